"""``recursa view [SESSION]``: the Agents View in the terminal (a Textual app).

It talks to the daemon (starting one when none runs) and opens SESSION's pane
when given. Textual loads only when the command runs, so ``recursa --help``
stays quick.
"""

from __future__ import annotations

from typing import Annotated

import typer

from recursa.cli import app
from recursa.cli.common import reference, with_client


@app.command()
def view(
    session: Annotated[
        str | None,
        typer.Argument(help="Open this session (id, id prefix or name).", callback=reference),
    ] = None,
) -> None:
    """Watch, steer and audit the live session tree in the terminal.

    Keys: 1-4 tabs (tree, session, harness, usage), enter opens a session,
    m message, a attach/detach, i interrupt, x stop, u unload, o goal and
    schedules, ctrl+p command palette (jump to a session), q quit."""
    from recursa.view.tui.app import ViewApp

    with_client(lambda client: ViewApp(client, start=session).run_async())

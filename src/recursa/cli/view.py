"""``recursa view [SESSION]``: the Agents View in the terminal (a Textual app).

It talks to the daemon (starting one when none runs) and opens SESSION's pane
when given. Textual loads only when the command runs, so ``recursa --help``
stays quick.
"""

from __future__ import annotations

from typing import Annotated

import typer

from recursa.cli.common import reference, with_client
from recursa.cli.root import app


@app.command()
def view(
    session: Annotated[
        str | None,
        typer.Argument(help="Open this session (id, id prefix or name).", callback=reference),
    ] = None,
) -> None:
    """Watch, steer and audit the live session tree in the terminal.

    Keys: 1-4 tabs (tree, session, harness, usage); in the tree / filter by
    name, t by status, enter opens a session; m message (ctrl+t: steer or
    follow-up), a attach/detach, i interrupt, x stop, u unload, o goal and
    schedules; in the session pane c last cell, f unfold, [ earlier events;
    in the harness pane a approve, r reject, v revert, d diff (space marks the
    other version), j open a trigger event, k/s/t filter; ctrl+p command
    palette (jump to a session by name or id); q quit."""
    from recursa.view.tui.app import ViewApp

    with_client(lambda client: ViewApp(client, start=session).run_async())

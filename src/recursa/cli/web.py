"""``recursa web``: the Agents View in a browser (:mod:`recursa.view.web`).

It serves the page on 127.0.0.1 only, prints the URL with its random token
in the fragment (``http://127.0.0.1:PORT/#token=TOKEN``: the only way in),
opens a browser on it unless told not to (through a private launcher file,
:mod:`recursa.view.web.launch`: never with the token on a command line), and
serves until Ctrl-C. It starts the daemon when none runs, as every command that
needs sessions does.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Annotated
from urllib.parse import quote

import typer

from recursa.cli.common import reference
from recursa.cli.root import app
from recursa.config import environment, load_config


@app.command()
def web(
    session: Annotated[
        str | None,
        typer.Argument(help="Open this session (id, id prefix or name).", callback=reference),
    ] = None,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (0: a free one).")
    ] = 0,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the URL only; open no browser.")
    ] = False,
) -> None:
    """The Agents View in a browser: watch, steer and audit the session tree.

    It serves on 127.0.0.1 only; the URL it prints carries the one token that
    lets a browser in."""
    from recursa.daemon.client import connect
    from recursa.view.web import launcher, serve, write_launcher

    config = load_config()

    with launcher(config.home) as made:

        def ready(url: str) -> None:
            if session is not None:
                url += f"&session={quote(session, safe='')}"
            print(f"recursa web: {url}", flush=True)
            print(
                "(Ctrl-C stops it; the sessions go on in the daemon)", file=sys.stderr, flush=True
            )
            if not no_browser and _graphical():
                import threading

                page = write_launcher(config.home, url)
                made.append(page)
                # Off the server's loop: a browser may take its time to start.
                threading.Thread(target=_open, args=(page.as_uri(),), daemon=True).start()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(lambda: connect(config), port=port, on_ready=ready))


def _graphical() -> bool:
    """Whether a browser can show a page here. Over SSH (no display) Python's
    webbrowser would run a text browser in this terminal, which cannot run the
    page and would take the terminal: the printed URL is the way in then."""
    if sys.platform in ("darwin", "win32"):
        return True
    env = environment()
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def _open(url: str) -> None:
    """Start a browser on ``url``: a ``file://`` launcher page, never the token URL."""
    import webbrowser

    with contextlib.suppress(Exception):  # no browser after all: the URL is printed
        webbrowser.open(url)


__all__ = ["web"]

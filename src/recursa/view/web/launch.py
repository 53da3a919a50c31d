"""How ``recursa web`` opens a browser without putting its token on a command line.

A browser is started as a process (xdg-open, firefox, ...), and a process's
arguments are readable by every local user (``/proc/PID/cmdline``). So the
browser is never given the URL with the token: it is given a ``file://`` URL
of a small HTML page, readable by this user only, that sends it on to the
token URL (a meta refresh, and a script for browsers that ignore it). This is
what Jupyter does. The page lives in ``$RECURSA_HOME/web/`` (a directory only
this user may enter) and is removed when the server stops.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

DIRECTORY = "web"


def write_launcher(home: Path, url: str) -> Path:
    """A new HTML file (mode 0600, in ``home/web``, mode 0700) that sends a
    browser on to ``url``; its path. The caller removes it (:func:`launcher`)."""
    where = home / DIRECTORY
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(where, 0o700)  # made before with a looser mode: tighten it
    path = where / f"open-{os.getpid()}-{secrets.token_hex(8)}.html"
    # The URL is ours (host, port, a url-safe token), but it is escaped as if it were not.
    attribute = html.escape(url, quote=True)
    script = json.dumps(url).replace("<", "\\u003c")
    page = (
        '<!doctype html>\n<html><head><meta charset="utf-8">\n'
        f'<meta http-equiv="refresh" content="0;url={attribute}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        "<title>recursa web</title></head>\n"
        f"<body><script>location.replace({script});</script>\n"
        f'<p><a href="{attribute}">Open the Agents View</a></p></body></html>\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(page)
    return path


@contextlib.contextmanager
def launcher(home: Path) -> Iterator[list[Path]]:
    """A list to which the launcher pages of one server's life are added; on
    exit (the server stopped) every one of them is removed."""
    made: list[Path] = []
    try:
        yield made
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                path.unlink()


__all__ = ["DIRECTORY", "launcher", "write_launcher"]

"""The ``recursa`` command line.

:func:`main` is the command. A call that only reads from a running daemon
(``recursa agents``, ``usage``, ``logs``) is answered by :mod:`recursa.cli.quick`, which imports
neither typer, pydantic nor asyncio; every other call, and any the quick path
cannot answer, goes to the Typer application in :mod:`recursa.cli.root`.
This module imports nothing else, so the quick path costs no more than it needs.
"""

from __future__ import annotations

import io
import sys

QUICK_COMMANDS = ("agents", "usage", "logs")
"""The commands :mod:`recursa.cli.quick` may answer."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit: the quick path's answer, else
    :func:`recursa.cli.root.main`'s (after the streams are set to print lone
    surrogates as escapes, for both)."""
    for stream in (sys.stdout, sys.stderr):
        # Text from models and cells may carry lone surrogates (undecodable bytes);
        # print them as escapes rather than fail.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in QUICK_COMMANDS:  # any other call loads nothing of the quick path
        try:
            from recursa.cli.quick import answer

            code = answer(args)
        except KeyboardInterrupt:
            from recursa.cli.exits import EXIT_INTERRUPTED

            sys.exit(EXIT_INTERRUPTED)
        if code is not None:
            sys.exit(code)
    from recursa.cli.root import main as run

    run(argv)


__all__ = ["main"]

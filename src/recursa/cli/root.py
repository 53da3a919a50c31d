"""The ``recursa`` command line's Typer application, and the command run
through it (:func:`main`; :func:`recursa.cli.main` comes here for every call
the quick path does not answer).

Every :class:`~recursa.errors.RecursaError` becomes one line on stderr and its
exit code; a traceback is only ever shown for a bug, with a note saying so.

Startup: a call imports only the module of the command it runs
(:mod:`recursa.cli.commands` lists them all for ``--help``); each module
imports what its commands need at the top, and rich (tables) on first use.
"""

from __future__ import annotations

import logging
import sys
import traceback

import typer

from recursa.cli.commands import LazyGroup
from recursa.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, epilog
from recursa.errors import RecursaError
from recursa.redact import RedactingFilter, redact

app = typer.Typer(
    name="recursa",
    help="A long-horizon agent harness: a model in a persistent IPython kernel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain (click's) help and usage errors: typer's rich formatter imports
    # rich's markdown and traceback modules, 0.08 of --help's 0.14 s.
    rich_markup_mode=None,
    # Help as wide as the terminal, up to 120 columns (click stops at 80).
    context_settings={"max_content_width": 120},
    epilog=epilog(),
    cls=LazyGroup,
)


@app.callback()
def _before_any_command() -> None:
    # Runs before every command (not for --help): from here on this process may
    # hold provider keys, so other processes of the user (the model's kernels)
    # must not read its memory.
    from recursa.daemon.client import harden_process

    harden_process()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit. Typer handles usage errors (exit 2) and ``typer.Exit``;
    a :class:`RecursaError` becomes one line on stderr and its exit code; any other
    exception is a bug: one line (the traceback with ``RECURSA_DEBUG=1``), exit 1."""
    last = logging.lastResort
    if last is not None and not any(isinstance(f, RedactingFilter) for f in last.filters):
        # What a runtime hosted here (--no-daemon) logs reaches stderr through
        # the last-resort handler: without URL credentials, like daemon.log.
        last.addFilter(RedactingFilter())
    try:
        app(args=argv)
    except RecursaError as exc:
        print(f"recursa: {_shown(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        from recursa.environ import debug_enabled

        if debug_enabled():
            traceback.print_exc()
        first = _shown(str(exc).splitlines()[0]) if str(exc) else ""
        print(
            f"recursa: internal error: {type(exc).__name__}: {first} "
            "(a bug; RECURSA_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        sys.exit(EXIT_FAILED)


def _shown(message: str) -> str:
    """An error message as printed: it may quote what a model chose (a name, a
    reference, its text) or a URL, so without control sequences or credentials."""
    from recursa.cli.terminal import printable

    return printable(redact(message))


__all__ = ["app", "main"]

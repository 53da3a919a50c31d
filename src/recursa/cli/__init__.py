"""The ``recursa`` command line.

Every :class:`~recursa.errors.RecursaError` becomes one line on stderr and its
exit code; a traceback is only ever shown for a bug, with a note saying so.
"""

from __future__ import annotations

import sys

import typer

from recursa.errors import RecursaError

app = typer.Typer(
    name="recursa",
    help="A long-horizon agent harness: a model in a persistent IPython kernel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Commands live in their own modules; importing them registers them on `app`.
    import recursa.cli.models
    import recursa.cli.run  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit. Typer handles usage errors (exit 2) and ``typer.Exit``;
    a :class:`RecursaError` becomes one line on stderr and its exit code."""
    _register()
    try:
        app(args=argv)
    except RecursaError as exc:
        print(f"recursa: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["app", "main"]

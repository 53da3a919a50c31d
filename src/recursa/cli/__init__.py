"""The ``recursa`` command line.

Every :class:`~recursa.errors.RecursaError` becomes one line on stderr and its
exit code; a traceback is only ever shown for a bug, with a note saying so.
"""

from __future__ import annotations

import sys

import click
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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    _register()
    try:
        result = app(args=argv, standalone_mode=False)
    except RecursaError as exc:
        print(f"recursa: {exc}", file=sys.stderr)
        code = exc.exit_code
    except click.exceptions.Abort:
        print("recursa: aborted", file=sys.stderr)
        code = 130
    except KeyboardInterrupt:
        code = 130
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    else:
        code = result if isinstance(result, int) else 0
    if argv is None:
        sys.exit(code)
    return code


__all__ = ["app", "main"]

"""Every exit code of the ``recursa`` command, in one table.

An error class's code is its ``exit_code`` (:mod:`recursa.errors`); a turn's end
reason maps to a code in :data:`recursa.cli.autonomous.EXIT_BY_REASON`; the rest
are named here. :data:`EXIT_CODES` is what ``recursa --help`` and the README's
table say; a test checks that it covers every code the CLI uses.
"""

from __future__ import annotations

from recursa.errors import (
    DaemonError,
    KernelError,
    ModelUnavailable,
    ProviderError,
    StoreError,
    UncertainCommand,
)

EXIT_OK = 0
"""Answered; with ``--autonomous``, every gate passed (and only then)."""
EXIT_FAILED = 1
"""Anything else: an internal error (a bug), a turn that failed inside, or no daemon
(``daemon status``)."""
EXIT_USAGE = 2
"""A usage error Typer finds itself (an unknown option, a missing argument): click's code,
the same as :class:`~recursa.errors.UsageError`'s."""
EXIT_LIMIT = 8
"""A limit was reached (steps, tokens, time, budget, turns): never reported as an answer
or as passed gates."""
EXIT_NO_PROGRESS = 9
"""The model made no progress: empty or cut-off replies, or the same cell again and again."""
EXIT_INTERRUPTED = 130
"""Interrupted by Ctrl-C; or detached from a session that goes on in the daemon."""

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "answered (with --autonomous: every gate passed, and only then)",
    EXIT_FAILED: "anything else: an internal error, or `daemon status` found no daemon",
    EXIT_USAGE: "bad configuration or usage",
    ModelUnavailable.exit_code: "model unavailable (extra, weights or key missing)",
    ProviderError.exit_code: "the provider failed (after retries)",
    KernelError.exit_code: "a kernel could not be started or reached",
    StoreError.exit_code: "the store cannot be used, or no such session",
    DaemonError.exit_code: "the daemon cannot be reached or refused the client",
    EXIT_LIMIT: "a limit was reached (never reported as an answer or as passed gates)",
    EXIT_NO_PROGRESS: "no progress: empty or cut-off replies, or the same cells again",
    UncertainCommand.exit_code: "a command's outcome was lost in a crash; it is not rerun",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C), or detached while the session goes on",
}
"""Each code the CLI exits with, and what it means, in one line."""


def epilog() -> str:
    """The exit-code table for ``--help``, one line per code (``\\b`` keeps
    click's help formatter from rewrapping the paragraph)."""
    rows = "\n".join(f"{code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())
    return f"\b\nExit codes:\n{rows}"


__all__ = [
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_LIMIT",
    "EXIT_NO_PROGRESS",
    "EXIT_OK",
    "EXIT_USAGE",
    "epilog",
]

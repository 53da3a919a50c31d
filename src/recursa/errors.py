"""The one error tree, typed by what the caller must do next.

::

    RecursaError                    ours, raised; never shown to the user as a traceback
    ├── ConfigError                 fix the configuration file, a variable or a flag      exit 2
    ├── UsageError                  fix the command line                                  exit 2
    ├── ModelUnavailable            install the extra, the weights, or set credentials   exit 3
    ├── ProviderError               a model call failed for good (after retries)          exit 4
    │     .kind: FailureKind         the caller branches on the kind, never on the text
    ├── KernelError                 a kernel could not be started or reached              exit 5
    ├── StoreError                  the store cannot be used (corrupt, newer schema)      exit 6
    │   └── NotFound                 no such session, entry or job                        exit 6
    ├── DaemonError                 the daemon cannot be reached or refused the client   exit 7
    │   └── AuthError                a wrong or missing token                             exit 7
    ├── UncertainCommand            a command's outcome was lost in a crash; not rerun   exit 10
    └── SubagentFailed              (in a kernel) a sub-agent ended without an answer

Mistakes the *model* makes (bad tool arguments, a failing cell, an empty reply)
are not exceptions: they are recorded in the transcript and told to the model
so it can correct itself. Foreign exceptions are translated at the edge with
``raise ... from`` and never escape the layer that called the foreign library.
"""

from __future__ import annotations

from typing import Literal, get_args

FailureKind = Literal[
    "auth",
    "rate_limit",
    "overloaded",
    "server_error",
    "timeout",
    "network",
    "invalid_request",
    "context_overflow",
    "aborted",
    "malformed",
    "unknown",
]
"""Why a model call failed. A closed set: retries and the UI branch on it."""

FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)

RETRYABLE_KINDS: frozenset[FailureKind] = frozenset(
    {"rate_limit", "overloaded", "server_error", "timeout", "network", "malformed"}
)
"""Kinds worth another attempt after a backoff. ``malformed`` covers a stream
cut short or garbled in transit, which a fresh request usually cures."""


class RecursaError(Exception):
    """Base of every error recursa raises on purpose.

    ``str(error)`` is one line a user can act on. ``exit_code`` is what the CLI
    exits with.
    """

    exit_code: int = 1


class ConfigError(RecursaError):
    """The configuration is wrong: a file, a key, an environment variable or a flag."""

    exit_code = 2


class UsageError(RecursaError):
    """The command line is wrong."""

    exit_code = 2


class ModelUnavailable(RecursaError):
    """A model cannot be used here: unknown provider, missing extra, credentials or weights."""

    exit_code = 3


class ProviderError(RecursaError):
    """A model call failed and will not be retried (any retries are spent)."""

    exit_code = 4

    def __init__(self, kind: FailureKind, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS


class KernelError(RecursaError):
    """A kernel process could not be started, reached or restarted."""

    exit_code = 5


class StoreError(RecursaError):
    """The store cannot be used: corrupt, locked for too long, or from a newer recursa."""

    exit_code = 6


class NotFound(StoreError):
    """No session, entry or job answers to the given id or name."""


class DaemonError(RecursaError):
    """The daemon cannot be reached, or refused what was asked."""

    exit_code = 7


class AuthError(DaemonError):
    """A wrong or missing token."""


class UncertainCommand(RecursaError):
    """A command was received before a crash and its outcome is unknown. It is
    never run again: check the session (``recursa logs``) and decide."""

    exit_code = 10


class SubagentFailed(RecursaError):
    """Raised in a kernel by ``await handle.result()`` when the sub-agent's work
    ended without an answer; the message says why (its last turn's reason)."""


WIRE_EXCEPTIONS: dict[str, type[RecursaError]] = {
    "not_found": NotFound,
    "auth": AuthError,
    "unavailable": ModelUnavailable,
    "invalid": UsageError,
    "uncertain": UncertainCommand,
    "conflict": StoreError,
    "internal": DaemonError,
}
"""The exception a client raises for a daemon's error of each kind (the daemon
client's and the kernel API's; :mod:`recursa.daemon.errormap` maps the other way)."""


def one_line(
    what: str | BaseException,
    *,
    limit: int | None = None,
    first_line: bool = False,
    typed: bool = False,
) -> str:
    """``what`` as one line of text, for a message, a log line or an error's text.

    A string is taken as it is; an exception by its message, or by its type's
    name when the message is empty. Every run of whitespace (newlines
    included) becomes one space; with ``first_line``, only the first non-blank
    line is kept instead (a traceback's or a server body's first line says
    what happened, the rest does not). ``typed`` prefixes an exception's type
    (``ValueError: bad``), for messages where the type is the news. A text
    longer than ``limit`` is cut and ends with ``…``, so the result has at
    most ``limit`` characters. The result is empty only for a blank string.
    """
    text = what if isinstance(what, str) else str(what)
    if first_line:
        text = next((line for line in text.splitlines() if line.strip()), "")
    text = " ".join(text.split())
    if isinstance(what, BaseException):
        name = type(what).__name__
        text = f"{name}: {text}" if typed and text else text or name
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)].rstrip() + "…"
    return text


__all__ = [
    "FAILURE_KINDS",
    "RETRYABLE_KINDS",
    "WIRE_EXCEPTIONS",
    "AuthError",
    "ConfigError",
    "DaemonError",
    "FailureKind",
    "KernelError",
    "ModelUnavailable",
    "NotFound",
    "ProviderError",
    "RecursaError",
    "StoreError",
    "SubagentFailed",
    "UncertainCommand",
    "UsageError",
    "one_line",
]

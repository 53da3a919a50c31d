"""Errors across the wire: an exception in the daemon becomes a
:class:`~recursa.protocol.wire.WireError` and an HTTP status; the client turns
it back into the matching :class:`~recursa.errors.RecursaError`.

Daemon side (first match wins)::

    NotFound                         not_found    404
    AuthError                        auth         401
    ModelUnavailable                 unavailable  422
    ProviderError, KernelError       unavailable  422   (the model or kernel cannot be used now)
    UsageError, ConfigError,
      ValueError                     invalid      400
    UncertainCommand                 uncertain    409
    StoreError                       conflict     409
    any other RecursaError           internal     500   (deliberate: its own message)
    anything else                    internal     500   (a bug: "internal error: Type: msg")

Client side: not_found → NotFound, auth → AuthError, unavailable →
ModelUnavailable, invalid → UsageError, uncertain → UncertainCommand,
conflict → StoreError, internal (and any kind this client does not know) →
DaemonError. Messages are always one line.
"""

from __future__ import annotations

from recursa.errors import (
    WIRE_EXCEPTIONS,
    AuthError,
    ConfigError,
    DaemonError,
    KernelError,
    ModelUnavailable,
    NotFound,
    ProviderError,
    RecursaError,
    StoreError,
    UncertainCommand,
    UsageError,
)
from recursa.protocol.wire import ERROR_STATUS, ErrorKind, WireError

MAX_MESSAGE_CHARS = 1000

_KINDS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], ErrorKind], ...] = (
    (NotFound, "not_found"),
    (AuthError, "auth"),
    ((ModelUnavailable, ProviderError, KernelError), "unavailable"),
    ((UsageError, ConfigError, ValueError), "invalid"),
    (UncertainCommand, "uncertain"),
    (StoreError, "conflict"),
)

_EXCEPTIONS = WIRE_EXCEPTIONS


def one_line(text: str) -> str:
    """The first non-empty line of ``text``, bounded."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            if len(line) > MAX_MESSAGE_CHARS:
                return line[: MAX_MESSAGE_CHARS - 1] + "…"
            return line
    return ""


def wire_error(exc: BaseException) -> tuple[WireError, bool]:
    """The wire error for ``exc`` and whether it is a bug (log its traceback)."""
    for classes, kind in _KINDS:
        if isinstance(exc, classes):
            return WireError(kind, one_line(str(exc)) or type(exc).__name__), False
    if isinstance(exc, RecursaError):
        return WireError("internal", one_line(str(exc)) or type(exc).__name__), False
    detail = one_line(str(exc))
    name = type(exc).__name__
    message = f"internal error: {name}: {detail}" if detail else f"internal error: {name}"
    return WireError("internal", message), True


def status_for(kind: ErrorKind) -> int:
    return ERROR_STATUS[kind]


def error_from_wire(kind: str, message: str) -> RecursaError:
    """The client-side exception for a daemon's error body."""
    cls = _EXCEPTIONS.get(kind, DaemonError)
    return cls(one_line(message) or f"the daemon answered with a {kind} error")


__all__ = ["MAX_MESSAGE_CHARS", "error_from_wire", "one_line", "status_for", "wire_error"]

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
    one_line,
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


def wire_error(exc: BaseException) -> tuple[WireError, bool]:
    """The wire error for ``exc`` and whether it is a bug (log its traceback).
    The message is the first line of the exception's (its type's name when it
    has none), at most :data:`MAX_MESSAGE_CHARS`."""
    for classes, kind in _KINDS:
        if isinstance(exc, classes):
            return WireError(kind, _line(exc)), False
    if isinstance(exc, RecursaError):
        return WireError("internal", _line(exc)), False
    return WireError("internal", f"internal error: {_line(exc, typed=True)}"), True


def status_for(kind: ErrorKind) -> int:
    return ERROR_STATUS[kind]


def error_from_wire(kind: str, message: str) -> RecursaError:
    """The client-side exception for a daemon's error body."""
    cls = _EXCEPTIONS.get(kind, DaemonError)
    return cls(_line(message) or f"the daemon answered with a {kind} error")


def _line(what: str | BaseException, *, typed: bool = False) -> str:
    return one_line(what, first_line=True, limit=MAX_MESSAGE_CHARS, typed=typed)


__all__ = ["MAX_MESSAGE_CHARS", "error_from_wire", "status_for", "wire_error"]

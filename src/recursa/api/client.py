"""The kernel's connection to the daemon: HTTP over its unix socket, with the
session's kernel token; or, in a kernel switched to it, comm messages on the
kernel's own Jupyter channels (:mod:`recursa.api.channel`), with no socket and
no token. :func:`_call` is where the two part; replies and errors are the same.

This module runs inside a kernel process, not in the daemon. It is the one
place besides :mod:`recursa.config` that reads ``os.environ``: the kernel's
environment is where the daemon puts :data:`ENV_SOCKET` and :data:`ENV_TOKEN`
(``Kernel.export_env``, again after every restart). At each call they are
moved out of the environment into this process alone (:func:`take_credentials`),
so a kernel whose variables were set after this module was imported, or
changed since, uses the current ones, and no program the kernel starts
inherits the session's token.

Importing it is cheap: ``httpx2`` and the wire values are imported on the
first call. One ``httpx2.AsyncClient`` is kept per event loop (a kernel has
one; a test has one per test) and per socket and token; idle connections are
dropped before the server would close them (:data:`KEEPALIVE_SECONDS`), so
a request never races a server-side close.

Every failure is one exception of the error tree, with one line a model can
act on: the daemon's errors by their kind (``not_found`` → NotFound,
``invalid`` → UsageError, ...), transport failures as DaemonError, and a
kernel without the variables as :class:`~recursa.errors.RecursaError`
(:data:`UNAVAILABLE`).
"""

from __future__ import annotations

import asyncio
import math
import os
from types import EllipsisType
from typing import TYPE_CHECKING, Any, TypeVar

from recursa.api import channel
from recursa.errors import (
    WIRE_EXCEPTIONS,
    AuthError,
    DaemonError,
    RecursaError,
    one_line,
)

if TYPE_CHECKING:
    import httpx2

ENV_SOCKET = "RECURSA_API_SOCKET"
"""The daemon's kernel socket (apart from the people's), as the kernel reaches it."""
ENV_TOKEN = "RECURSA_KERNEL_TOKEN"
"""The session's kernel token: the daemon derives the caller from it."""

UNAVAILABLE = "the recursa API is not available in this kernel"
CALL_TIMEOUT = 120.0
"""Seconds an ordinary call may wait for its reply."""
CONNECT_TIMEOUT = 5.0
POLL_MARGIN = 30.0
"""Seconds a long poll's reply may take beyond the wait it asked for."""
KEEPALIVE_SECONDS = 2.0
"""Idle connections are dropped after this, well before uvicorn's 5 s."""
MAX_WAIT_SECONDS = 86_400.0
"""The longest wait a long poll may ask for (the daemon's limit too)."""

_EXCEPTIONS = WIRE_EXCEPTIONS


class _Connection:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, socket: str, token: str, http: httpx2.AsyncClient
    ) -> None:
        self.loop = loop
        self.socket = socket
        self.token = token
        self.http = http


_current: _Connection | None = None
_OPERATIONS: dict[str, Any] = {}
"""The kernel rows by name, filled on the first call."""

T = TypeVar("T")


_credentials: dict[str, str] = {}
"""The socket and token, held by this process only (see :func:`take_credentials`)."""


def take_credentials() -> None:
    """Move the socket and token from ``os.environ`` into this process alone.

    A program the kernel starts (``%%bash``, ``subprocess``) then does not
    inherit the session's token: another kernel that can see its processes
    (forked kernels share a PID namespace) finds no token in its
    environment to speak as this session with."""
    for name in (ENV_SOCKET, ENV_TOKEN):
        value = os.environ.pop(name, None)
        if value is not None:
            _credentials[name] = value


def configured() -> tuple[str, str]:
    """The socket and token (the environment's newest, else the ones taken
    before), or the one-line RecursaError."""
    take_credentials()
    socket = _credentials.get(ENV_SOCKET, "")
    token = _credentials.get(ENV_TOKEN, "")
    if not socket or not token:
        missing = " and ".join(n for n, v in ((ENV_SOCKET, socket), (ENV_TOKEN, token)) if not v)
        raise RecursaError(f"{UNAVAILABLE} ({missing} not set)")
    return socket, token


async def run(
    name: str,
    fields: dict[str, Any] | None = None,
    *,
    timeout: float | EllipsisType | None = ...,  # noqa: ASYNC109 -- a read timeout, for httpx2
    what: str,
) -> Any:
    """Run the kernel operation ``name`` of the table (:mod:`recursa.protocol.kernel_ops`)
    and return the reply's JSON.

    ``fields`` are the request's (path, query or body, as the row says),
    built into its request value as the daemon builds it, so a malformed one
    fails here (ValueError) before anything is sent. ``timeout`` bounds the
    wait for the reply (``...``: the row's, else :data:`CALL_TIMEOUT`; None:
    no bound, for a long poll without a limit, see :func:`poll_timeout`);
    ``what`` names the call in error messages (``rlm()``)."""
    __tracebackhide__ = True
    from urllib.parse import urlencode

    from recursa.protocol.operations import operations
    from recursa.protocol.wire import from_json

    op = _OPERATIONS.get(name)
    if op is None:
        _OPERATIONS.update((row.name, row) for row in operations() if row.audience == "kernel")
        op = _OPERATIONS[name]
    value = None if op.request is None else from_json(op.request, fields or {})
    path, query, body = op.url(value)
    if query:
        path += f"?{urlencode(query)}"
    wait = (op.timeout or CALL_TIMEOUT) if isinstance(timeout, EllipsisType) else timeout
    return await _call(op.method, path, body, timeout=wait, what=what)


async def _call(
    method: str,
    path: str,
    body: dict[str, Any] | None,
    *,
    timeout: float | None,  # noqa: ASYNC109 -- a read timeout, passed to httpx2
    what: str,
) -> Any:
    """Send one request (``path`` under the API prefix) and return the reply's JSON,
    over the kernel's channels when it was switched to them (:mod:`recursa.api.channel`),
    else over the daemon's socket."""
    __tracebackhide__ = True
    if channel.active():
        reply = await channel.call(method, path, body, timeout=timeout)
        if reply is None:
            raise DaemonError(f"the recursa daemon did not answer {what} in time")
        status, data = reply
        if not 200 <= status < 300:
            raise _error_of(status, data, what)
        return data
    import httpx2

    from recursa.protocol.events import json_text
    from recursa.protocol.wire import API_PREFIX

    connection = await _connection()
    content = json_text(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if body is not None else {}
    try:
        response = await connection.http.request(
            method,
            f"{API_PREFIX}{path}",
            content=content,
            headers=headers,
            timeout=httpx2.Timeout(timeout, connect=CONNECT_TIMEOUT),
        )
    except (httpx2.ConnectError, httpx2.ConnectTimeout, FileNotFoundError):
        raise DaemonError(
            f"cannot reach the recursa daemon at {connection.socket} (during {what}); "
            "is it running?"
        ) from None
    except httpx2.TimeoutException:
        raise DaemonError(f"the recursa daemon did not answer {what} in time") from None
    except httpx2.TransportError:
        raise DaemonError(
            f"the connection to the recursa daemon broke during {what}; its outcome is unknown"
        ) from None
    except asyncio.CancelledError:
        raise  # the pool drops the connection it was using and stays sound
    except BaseException:
        # Interrupted at an arbitrary point (KeyboardInterrupt): the pool's
        # state is unknown, so the next call starts with a new client.
        _forget(connection)
        raise
    try:
        data = response.json()
    except ValueError:
        if response.is_success:
            raise malformed(what) from None
        data = None
    if not response.is_success:
        raise _error_of(response.status_code, data, what)
    return data


async def aclose() -> None:
    """Close the connection pool of this event loop (tests; a kernel never needs to)."""
    global _current
    connection, _current = _current, None
    if connection is not None and connection.loop is asyncio.get_running_loop():
        await connection.http.aclose()


def seconds(value: object, name: str, *, allow_none: bool) -> float | None:
    """A wait in seconds, checked: a finite number from 0 to :data:`MAX_WAIT_SECONDS`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number of seconds{' or None' if allow_none else ''}, "
            f"not {type(value).__name__}"
        )
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > MAX_WAIT_SECONDS:
        raise ValueError(f"{name} must be from 0 to {MAX_WAIT_SECONDS:g} seconds, not {value!r}")
    return number


def decode(cls: type[T], data: object, what: str) -> T:
    """A wire value from a reply's JSON; a malformed one is a DaemonError."""
    from recursa.protocol.plain import from_plain

    try:
        return from_plain(cls, data)
    except ValueError:
        raise malformed(what) from None


def decode_list(cls: type[T], data: object, what: str) -> list[T]:
    if not isinstance(data, list):
        raise malformed(what)
    return [decode(cls, item, what) for item in data]


def malformed(what: str) -> DaemonError:
    return DaemonError(f"the recursa daemon sent a malformed reply to {what}")


def poll_timeout(wait: float | None) -> float | None:
    """The reply timeout for a long poll that may wait ``wait`` seconds."""
    return None if wait is None else wait + POLL_MARGIN


async def _connection() -> _Connection:
    global _current
    socket, token = configured()
    loop = asyncio.get_running_loop()
    current = _current
    if current is not None:
        if current.loop is loop and current.socket == socket and current.token == token:
            return current
        _current = None
        if current.loop is loop:
            await current.http.aclose()
    import httpx2

    transport = httpx2.AsyncHTTPTransport(
        uds=socket,
        retries=0,
        # A unix socket has no TLS: no CA bundle to load (~20 ms of a kernel's CPU).
        verify=False,
        # No cap on connections: a cell may wait on many children at once, and
        # a capped pool would queue an inbox() behind them.
        limits=httpx2.Limits(max_connections=None, keepalive_expiry=KEEPALIVE_SECONDS),
    )
    http = httpx2.AsyncClient(
        transport=transport,
        base_url="http://recursa",
        headers={"authorization": f"Bearer {token}"},
        trust_env=False,
    )
    _current = _Connection(loop, socket, token, http)
    return _current


def _forget(connection: _Connection) -> None:
    global _current
    if _current is connection:
        _current = None


def _error_of(status: int, data: object, what: str) -> RecursaError:
    """The exception for an error reply: HTTP ``status`` and its body's JSON (None if not JSON)."""
    kind, message = "", ""
    try:
        error = data["error"]  # type: ignore[index]
        kind, message = str(error["kind"]), str(error["message"])
    except (KeyError, TypeError, IndexError):
        pass
    if kind == "auth":
        return AuthError(f"the recursa daemon refused this kernel's token during {what}")
    if not message:
        return DaemonError(f"the recursa daemon answered {what} with HTTP {status}")
    cls = _EXCEPTIONS.get(kind, DaemonError)
    return cls(one_line(message, first_line=True))


def text_arg(value: object, name: str) -> str:
    """An argument that must be a non-empty str: TypeError or ValueError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} is empty")
    return value


def optional_text_arg(value: object, name: str) -> str | None:
    return None if value is None else text_arg(value, name)


__all__ = [
    "CALL_TIMEOUT",
    "ENV_SOCKET",
    "ENV_TOKEN",
    "MAX_WAIT_SECONDS",
    "UNAVAILABLE",
    "aclose",
    "configured",
    "decode",
    "decode_list",
    "malformed",
    "optional_text_arg",
    "poll_timeout",
    "run",
    "seconds",
    "take_credentials",
    "text_arg",
]

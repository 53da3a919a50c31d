r"""The daemon client's transport: HTTP/1.1 over the daemon's unix socket.

:class:`Transport` sends requests with the daemon's token (over
:mod:`recursa.daemon.http1`, a connection each), and resends a mutating one
once (with the same command key) after the connection dropped, when the
daemon accepts connections again within the reconnect window. Failures are one-line
:class:`~recursa.errors.DaemonError`\ s; the daemon's own errors become
their classes (:mod:`recursa.daemon.errormap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from recursa.daemon import http1
from recursa.daemon.errormap import MAX_MESSAGE_CHARS, error_from_wire
from recursa.daemon.paths import DaemonPaths, read_state, read_token
from recursa.errors import DaemonError, one_line
from recursa.protocol.common import json_text
from recursa.protocol.wire import API_PREFIX, HEADER_CLIENT, HEADER_COMMAND

if TYPE_CHECKING:
    from recursa.protocol.events import EventRecord

CONNECT_TIMEOUT = 5.0
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 1.0


class NotRunning(Exception):
    """Nothing accepted the connection: the request was not sent."""


class Dropped(Exception):
    """The connection broke after the request may have been sent."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One request as sent, and as resent with the same command id.
    ``timeout`` replaces the client's reply timeout (a long call)."""

    method: str
    path: str
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


class Transport:
    """Requests to the daemon of ``paths`` (at ``socket``, else where its state
    file says) with ``token`` (else the home's token file)."""

    def __init__(
        self,
        paths: DaemonPaths,
        *,
        socket: Path | None,
        token: str | None,
        timeout: float,
        reconnect_window: float,
        client_id: str,
    ) -> None:
        self._paths = paths
        self._socket = socket
        self._token = token
        self._timeout = timeout
        self._reconnect_window = reconnect_window
        self._client_id = client_id
        self._where: tuple[str, str] | None = None
        self._streams: set[http1.StreamingResponse] = set()

    async def aclose(self) -> None:
        """Close the connections of streams still open (a request's own
        connection closes with its reply)."""
        for response in list(self._streams):
            response.close()
        self._streams.clear()
        self._where = None

    def where(self) -> tuple[str, str]:
        """The socket to connect to and the token to show, read once (the
        home's token file, the daemon's state file); a :class:`DaemonError`
        saying no daemon runs when there is no token."""
        if self._where is None:
            token = self._token or read_token(self._paths)
            if token is None:
                raise self.not_running()
            self._where = (str(self.socket_path()), token)
        return self._where

    def socket_path(self) -> Path:
        if self._socket is not None:
            return self._socket
        state = read_state(self._paths)
        return Path(state.socket) if state is not None else self._paths.socket

    def not_running(self) -> DaemonError:
        return DaemonError(
            f"no daemon is running for RECURSA_HOME {self._paths.home}: recursa daemon start"
        )

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        mutating: bool = False,
        retry: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 -- a read timeout, passed to http1
    ) -> Any:
        headers = {"content-type": "application/json"} if body is not None else {}
        if mutating:
            headers[HEADER_CLIENT] = self._client_id
            headers[HEADER_COMMAND] = secrets.token_hex(16)
        content = json_text(body).encode() if body is not None else None
        request = Outgoing(method, path, content, headers, timeout)
        try:
            response = await self.send(request)
        except NotRunning:
            raise self.not_running() from None
        except Dropped:
            if not retry:
                raise DaemonError(f"the connection to the daemon broke during {request}") from None
            response = await self.resend(request)
        return decode_reply(response, method, path)

    async def send(self, request: Outgoing) -> http1.Response:
        """One request, once."""
        wait = self._timeout if request.timeout is None else request.timeout
        socket, token = self.where()
        try:
            return await http1.request(
                socket,
                request.method,
                API_PREFIX + request.path,
                headers={**request.headers, "authorization": f"Bearer {token}"},
                content=request.content,
                timeout=wait,
                connect_timeout=CONNECT_TIMEOUT,
            )
        except http1.ConnectFailed as exc:
            raise NotRunning() from exc
        except http1.ConnectTimedOut:
            raise DaemonError(f"the daemon at {socket} accepts no connections") from None
        except http1.ReadTimedOut:
            raise DaemonError(f"the daemon did not answer {request} within {wait:g}s") from None
        except http1.Broken as exc:
            raise Dropped() from exc

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        params: Mapping[str, str],
        timeout: float,  # noqa: ASYNC109 -- between two pieces of the stream
    ) -> AsyncIterator[http1.StreamingResponse]:
        """A GET whose reply is read as it comes. Raises :class:`NotRunning`
        when nothing accepts the connection (in time), :class:`Dropped` when it
        breaks or falls silent past ``timeout``."""
        socket, token = self.where()
        target = f"{API_PREFIX}{path}?{urlencode(params)}" if params else API_PREFIX + path
        try:
            async with http1.stream(
                socket,
                "GET",
                target,
                headers={"authorization": f"Bearer {token}"},
                timeout=timeout,
                connect_timeout=CONNECT_TIMEOUT,
            ) as response:
                self._streams.add(response)
                try:
                    yield response
                finally:
                    self._streams.discard(response)
        except (http1.ConnectFailed, http1.ConnectTimedOut) as exc:
            raise NotRunning() from exc
        except (http1.ReadTimedOut, http1.Broken) as exc:
            raise Dropped() from exc

    async def resend(self, request: Outgoing) -> http1.Response:
        """Send once more with the same command id, once the daemon accepts a
        connection again (a refused connection sent nothing, so it is retried)."""
        deadline = time.monotonic() + self._reconnect_window
        delay = BACKOFF_FIRST
        while True:
            try:
                return await self.send(request)
            except NotRunning:
                now = time.monotonic()
                if now >= deadline:
                    raise DaemonError(
                        f"lost the daemon during {request} and it did not come back within "
                        f"{self._reconnect_window:g}s; the outcome is unknown (recursa agents)"
                    ) from None
                await asyncio.sleep(min(delay, deadline - now))
                delay = min(delay * 2, BACKOFF_MAX)
            except Dropped:
                raise DaemonError(
                    f"the connection to the daemon broke twice during {request}; "
                    "the outcome is unknown (recursa agents)"
                ) from None


def decode_reply(response: http1.Response, method: str, path: str) -> Any:
    """A successful reply's JSON, or the error it carries, raised."""
    if not response.is_success:
        raise error_of(response)
    try:
        return response.json()
    except ValueError:
        raise DaemonError(f"the daemon sent a malformed reply to {method} {path}") from None


def error_of(response: http1.Response | http1.StreamingResponse) -> Exception:
    try:
        error = response.json()["error"]
        kind, message = error["kind"], error["message"]
        if isinstance(kind, str) and isinstance(message, str):
            return error_from_wire(kind, message)
    except (ValueError, KeyError, TypeError):
        pass
    text = one_line(response.text, first_line=True, limit=MAX_MESSAGE_CHARS)
    return DaemonError(f"the daemon answered HTTP {response.status_code}: {text}".rstrip(": "))


def parse_line(line: str) -> EventRecord | None:
    """A record from one NDJSON line; None for a heartbeat or a blank line.
    An error line raises its error; a shutdown line raises DaemonError."""
    # Here, not at the top: a call that reads no events (``recursa agents``)
    # does not build the event grammar.
    from recursa.protocol.events import record_from_dict

    if not line.strip():
        return None
    try:
        data = json.loads(line)
        kind = data.get("type")
    except (ValueError, AttributeError):
        raise Dropped() from None  # a line cut short by a broken connection
    if kind == "heartbeat":
        return None
    if kind == "shutdown":
        raise DaemonError("the daemon is shutting down")
    if kind == "error":
        error = data.get("error") or {}
        raise error_from_wire(str(error.get("kind")), str(error.get("message", "")))
    try:
        return record_from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise DaemonError(
            f"the daemon sent a malformed event: {one_line(str(exc), first_line=True, limit=MAX_MESSAGE_CHARS)}"
        ) from None


__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "CONNECT_TIMEOUT",
    "Dropped",
    "NotRunning",
    "Outgoing",
    "Transport",
    "decode_reply",
    "error_of",
    "parse_line",
]

"""Requests and replies of the daemon's routes (:mod:`recursa.daemon.routes`).

- :func:`guarded`: every failure of a route becomes one wire error body
  (:mod:`recursa.daemon.errormap`); a bug is logged with its traceback.
- :func:`read_json`: the body, bounded and parsed; a bad one is a 400.
- :func:`long_poll`: a route that waits (for a child, a message, a quiet
  tree) waits on the host alone and holds nothing else; the wait is
  cancelled when the client goes away or the server stops, whichever comes
  first.
- :class:`StopSignal`: the server's stop, which ends event streams and long
  polls.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from recursa.daemon.errormap import MAX_MESSAGE_CHARS, status_for, wire_error
from recursa.errors import DaemonError, one_line
from recursa.protocol.events import json_text
from recursa.protocol.wire import ErrorKind, error_body

MAX_BODY_BYTES = 16 * 1024 * 1024
SHUTTING_DOWN = "the daemon is shutting down"
CANCEL_GRACE = 5.0
"""Seconds a cancelled host wait has to end before a long poll stops waiting for it."""

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]

logger = logging.getLogger("recursa.daemon")


class StopSignal:
    """A stop of the server, asked for by ``POST /v1/shutdown`` or a signal.

    Shared by the app and its server (:mod:`recursa.daemon.server`): open event
    streams and long polls end when it is set, and the server then exits. Use
    it from the event loop's thread."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def request(self) -> None:
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


class ClientGone(Exception):
    """The client disconnected during a long poll: there is no one to answer."""


def guarded(handler: Handler) -> Handler:
    """Every failure of ``handler`` becomes one wire error reply."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ClientGone:
            return Response(status_code=204)  # never delivered: the connection is gone
        except Exception as exc:
            return error_reply(request, exc)

    return endpoint


def error_reply(request: Request, exc: Exception) -> Response:
    error, bug = wire_error(exc)
    if bug:
        logger.error(
            "%s %s failed: %s", request.method, request.url.path, error.message, exc_info=exc
        )
    elif error.kind == "internal":
        logger.warning("%s %s failed: %s", request.method, request.url.path, error.message)
    return error_response(error.kind, error.message)


def error_response(kind: ErrorKind, message: str) -> Response:
    return json_reply(error_body(kind, message), status=status_for(kind))


def json_reply(
    data: Any, *, status: int = 200, background: BackgroundTask | None = None
) -> Response:
    return Response(
        json_text(data), status_code=status, media_type="application/json", background=background
    )


async def read_json(request: Request, *, empty_ok: bool = False) -> Any:
    """The request body as JSON; ``ValueError`` (a 400) when it is too large,
    missing or not JSON."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ValueError(f"the request body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        if empty_ok:
            return {}
        raise ValueError("the request needs a JSON body")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(
            f"the body is not valid JSON: {one_line(str(exc), first_line=True, limit=MAX_MESSAGE_CHARS)}"
        ) from exc


def json_object(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    return data


async def long_poll(request: Request, stop: StopSignal, work: Awaitable[T]) -> T:
    """The result of ``work`` (a host's wait), unless the client disconnects
    first (:class:`ClientGone`) or the server stops (DaemonError): then
    ``work`` is cancelled, and done, before this returns. Read the request's
    body before calling this: from here on its receive channel is watched for
    the disconnect."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request.receive))
    stopping = asyncio.ensure_future(stop.wait())
    every: set[asyncio.Future[Any]] = {task, gone, stopping}
    try:
        await asyncio.wait(every, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        if gone.done():
            raise ClientGone()
        raise DaemonError(SHUTTING_DOWN)
    finally:
        for future in every:
            future.cancel()
        # The host's wait must be over before the reply (or the next request).
        _, late = await asyncio.wait(every, timeout=CANCEL_GRACE)
        if task in late:
            logger.error("a host's wait ignored its cancellation for %gs", CANCEL_GRACE)


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


__all__ = [
    "MAX_BODY_BYTES",
    "SHUTTING_DOWN",
    "ClientGone",
    "StopSignal",
    "error_reply",
    "error_response",
    "guarded",
    "json_object",
    "json_reply",
    "long_poll",
    "read_json",
]

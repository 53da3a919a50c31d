"""An event stream: NDJSON over chunked HTTP from a host's iterator of pages
of event records.

It sends one :func:`~recursa.protocol.events.record_to_dict` per line (a
page's lines in one write), and
the control lines of :data:`~recursa.protocol.wire.StreamControl`: a
heartbeat after ``heartbeat`` seconds of silence, an error line if the
host's iterator fails, a shutdown line when the server stops. It ends when
the client disconnects, and the host's iterator is closed then, always.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from recursa.daemon.errormap import wire_error
from recursa.daemon.replies import StopSignal
from recursa.protocol.events import EventRecord, json_text, record_to_dict
from recursa.protocol.wire import error_body

NDJSON = "application/x-ndjson"

logger = logging.getLogger("recursa.daemon")
_END = object()


class EventStream(Response):
    """NDJSON over chunked HTTP from a host's iterator of pages of records.

    It watches three things at once: the next record, the client's
    disconnect, and the server's stop. Waiting for the next record is never
    cancelled by a heartbeat (cancelling an async generator mid-step would
    end it); it is cancelled only when the stream ends, and then the iterator
    is closed."""

    media_type = NDJSON

    def __init__(
        self, records: AsyncIterator[list[EventRecord]], *, heartbeat: float, stop: StopSignal
    ) -> None:
        self._records = records
        self._heartbeat = heartbeat
        self._stop = stop
        self.status_code = 200
        self.background = None
        self.init_headers({"cache-control": "no-store", "content-type": NDJSON})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        disconnected: asyncio.Future[Any] = asyncio.ensure_future(_disconnect(receive))
        stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(_next(self._records))
                done, _ = await asyncio.wait(
                    {pending, disconnected, stopping},
                    timeout=self._heartbeat,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if disconnected in done:
                    return
                if pending in done:
                    ready, pending = pending, None
                    lines, last = _page_lines(ready)
                    if lines:
                        await _send_lines(send, lines)
                    if last:
                        break
                    continue  # records that are ready go out before a stop
                if stopping in done:
                    await _send_lines(send, [{"type": "shutdown"}])
                    break
                await _send_lines(send, [{"type": "heartbeat"}])
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self._close(disconnected, stopping, pending)

    async def _close(self, *tasks: asyncio.Future[Any] | None) -> None:
        live = [task for task in tasks if task is not None]
        for task in live:
            task.cancel()
        # The pending step must be finished before the iterator can be closed.
        await asyncio.wait(live, timeout=5.0)
        aclose = getattr(self._records, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.exception("closing an event iterator failed")


async def _next(records: AsyncIterator[list[EventRecord]]) -> object:
    try:
        return await records.__anext__()
    except StopAsyncIteration:
        return _END


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _page_lines(ready: asyncio.Future[Any]) -> tuple[list[dict[str, Any]], bool]:
    """The lines for a finished step of the iterator, and whether it is the last."""
    try:
        value = ready.result()
    except Exception as exc:
        error, bug = wire_error(exc)
        if bug:
            logger.error("an event stream failed: %s", error.message, exc_info=exc)
        return [{"type": "error", **error_body(error.kind, error.message)}], True
    if value is _END:
        return [], True
    if not isinstance(value, list) or not all(isinstance(item, EventRecord) for item in value):
        logger.error(
            "an event iterator yielded %r, not a list of EventRecord", type(value).__name__
        )
        return [{"type": "error", **error_body("internal", "internal error: bad event")}], True
    return [record_to_dict(record) for record in value], False


async def _send_lines(send: Send, lines: list[dict[str, Any]]) -> None:
    body = "".join(json_text(data) + "\n" for data in lines).encode()
    await send({"type": "http.response.body", "body": body, "more_body": True})


__all__ = ["NDJSON", "EventStream"]

"""Server-sent events from the daemon's event records.

One record is one SSE message: ``id:`` its ``seq`` (a stored record; a
transient piece, ``seq`` 0, has no ``id:`` line, so the browser's
``Last-Event-ID`` stays at the last stored record and a reconnect resumes
exactly after it), ``data:`` :func:`~recursa.protocol.events.record_to_dict`
as one line of JSON. A comment line goes out after :data:`KEEPALIVE_SECONDS`
of silence, so proxies and the browser keep a quiet stream open. When the
daemon's stream fails, one ``event: failure`` message carries ``{kind,
message}`` and the stream ends (the page shows the line and stops retrying).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from recursa.errors import RecursaError
from recursa.protocol.events import EventRecord, json_text, record_to_dict

KEEPALIVE_SECONDS = 15.0
RETRY_MILLISECONDS = 2000
"""How long the browser waits before it reconnects a dropped stream."""


def message(record: EventRecord) -> str:
    """One record as an SSE message."""
    lines = [f"id: {record.seq}"] if record.seq else []
    lines.append(f"data: {json_text(record_to_dict(record))}")
    return "\n".join(lines) + "\n\n"


def failure(kind: str, text: str) -> str:
    """The message that ends a stream with an error the page shows."""
    return f"event: failure\ndata: {json.dumps({'kind': kind, 'message': text})}\n\n"


async def sse(
    records: AsyncIterator[EventRecord],
    *,
    describe: Callable[[RecursaError], tuple[str, str]],
    keepalive: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[str]:
    """The SSE text of ``records``, with keepalives; the iterator is closed at
    the end, always. ``describe(exc)`` gives the ``(kind, message)`` of a
    failure. Waiting for the next record is never cancelled by a keepalive
    (cancelling an async generator mid-step would end it)."""
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    pending: asyncio.Task[EventRecord] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(records))
            done, _ = await asyncio.wait({pending}, timeout=keepalive)
            if not done:
                yield ": keepalive\n\n"
                continue
            task, pending = pending, None
            try:
                record = task.result()
            except StopAsyncIteration:
                return
            except RecursaError as exc:
                kind, text = describe(exc)
                yield failure(kind, text)
                return
            yield message(record)
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})  # the generator must be at rest to be closed
        close = getattr(records, "aclose", None)
        if close is not None:
            await close()


__all__ = ["KEEPALIVE_SECONDS", "RETRY_MILLISECONDS", "failure", "message", "sse"]

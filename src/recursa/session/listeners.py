"""The listeners of one session's events: callbacks called in order, and
async iterators fed by them; and the streamed pieces of the reply or cell in
progress, so a watcher that arrives late can be shown them from the start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from recursa.protocol.events import EventRecord

STREAM_ENDS: frozenset[str] = frozenset(
    {
        "turn_started",
        "assistant_reply",
        "model_retry",
        "cell_started",
        "cell_finished",
        "turn_ended",
    }
)
"""Stored events after which no streamed piece before them is in progress."""

MAX_KEPT_CHARS = 256 * 1024
"""The most streamed text kept for late watchers; past it, later pieces are not
kept (the start is what a transcript shows; the whole is in the stored event)."""


class Listeners:
    """Who hears a session's events. :meth:`publish` calls every callback
    synchronously and in the order they were added; a callback must be quick
    and must not raise."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[EventRecord], None]] = []
        self._streamed: list[EventRecord] = []
        self._streamed_chars = 0

    def add(self, callback: Callable[[EventRecord], None]) -> Callable[[], None]:
        """Call ``callback`` with every record published from now on. Returns a
        function that stops the calls."""
        self._callbacks.append(callback)

        def stop() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return stop

    async def watch(self) -> AsyncIterator[EventRecord]:
        """Every record published from now on, as an async iterator (a queue fed
        by a callback, removed when the iterator is closed)."""
        queue: asyncio.Queue[EventRecord] = asyncio.Queue()
        stop = self.add(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            stop()

    def in_progress(self) -> tuple[EventRecord, ...]:
        """The transient records (``seq == 0``) published since the last stored
        event in :data:`STREAM_ENDS`: the streamed pieces of the reply or cell in
        progress, in order (up to :data:`MAX_KEPT_CHARS` of text)."""
        return tuple(self._streamed)

    def publish(self, record: EventRecord) -> None:
        if record.seq:
            if record.event.type in STREAM_ENDS:
                self._streamed.clear()
                self._streamed_chars = 0
        else:
            size = len(getattr(record.event, "text", ""))
            if self._streamed_chars + size <= MAX_KEPT_CHARS:
                self._streamed.append(record)
                self._streamed_chars += size
        for callback in list(self._callbacks):
            callback(record)


__all__ = ["MAX_KEPT_CHARS", "STREAM_ENDS", "Listeners"]

"""The listeners of one session's events: callbacks called in order, and
async iterators fed by them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from recursa.protocol.events import EventRecord


class Listeners:
    """Who hears a session's events. :meth:`publish` calls every callback
    synchronously and in the order they were added; a callback must be quick
    and must not raise."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[EventRecord], None]] = []

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

    def publish(self, record: EventRecord) -> None:
        for callback in list(self._callbacks):
            callback(record)


__all__ = ["Listeners"]

"""Reading the event log for people: one session's records, and the feed of
every session's, each from a cursor and then live.

A watcher never reads the whole log per update: it reads after the last
``seq`` it holds (or the tail of a long log, then pages back), then is fed
each new record as it is stored. The switch from stored to live is made
without a gap or a repeat: the live source is attached, then the store is
read, and anything live at or below the last seq read is dropped.

Records come in pages (lists, in seq order): the stream sends a page as one
write, so a history of thousands of records, or a burst of live ones, costs
a few writes and event-loop turns rather than a few per record.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from recursa.errors import UsageError
from recursa.protocol.events import EventRecord
from recursa.protocol.person_ops import EventsQuery, FeedQuery
from recursa.runtime.runtime import Runtime

FEED_PAGE = 1000
"""Rows the feed reads from the store at a time."""
PAGE = 500
"""The most records of a page of one session's events (stored, or live ones
that arrived together); the feed's pages are its reads of the store
(:data:`FEED_PAGE` rows)."""


class EventReads:
    """The ``events`` and ``feed`` operations of :class:`~recursa.runtime.people_api.PeopleApi`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.store = runtime.store

    async def events(self, request: EventsQuery) -> AsyncIterator[list[EventRecord]]:
        """The session's records, in pages (NotFound, or a usage error, at once)."""
        row = self.store.session(request.session)
        if request.before is not None and request.follow:
            raise UsageError("before pages back through stored events: it cannot follow")
        return self._records(row.id, request)

    async def _records(
        self, session_id: str, request: EventsQuery
    ) -> AsyncIterator[list[EventRecord]]:
        """Stored events after the cursor (or the last ``limit`` of them), then
        (``in_progress``) the streamed pieces of the reply or cell in progress,
        then live ones. The listener is attached, and the pieces so far taken,
        in one step before the store is read; records already sent are skipped
        by seq. So nothing falls between the parts and nothing comes twice."""
        follow = request.follow
        target = self.runtime.get(session_id) if follow else None
        live: asyncio.Queue[EventRecord] = asyncio.Queue()
        stop = target.listen(live.put_nowait) if target is not None else None
        pieces = target.in_progress() if target is not None and request.in_progress else ()
        try:
            last = request.after
            if request.limit is not None:
                stored = self.store.tail(
                    session_id, limit=request.limit, after=request.after, before=request.before
                )
            else:
                stored = self.store.events(session_id, after=request.after, before=request.before)
            for start in range(0, len(stored), PAGE):
                yield stored[start : start + PAGE]
            if stored:
                last = stored[-1].seq
            if not follow:
                return
            if pieces:
                yield list(pieces)
            while True:
                arrived = [await live.get()]
                while not live.empty() and len(arrived) < PAGE:
                    arrived.append(live.get_nowait())
                page = []
                for record in arrived:
                    if record.seq:
                        if record.seq <= last:
                            continue
                        last = record.seq
                    page.append(record)
                if page:
                    yield page
        finally:
            if stop is not None:
                stop()

    async def feed(self, request: FeedQuery) -> AsyncIterator[list[EventRecord]]:
        return self._feed(request.after, request.follow)

    async def _feed(self, after: int, follow: bool) -> AsyncIterator[list[EventRecord]]:
        """Every session's stored records after ``after`` in pages, then, with
        ``follow``, the new ones: woken by each append, read from the store."""
        appended = asyncio.Event()
        stop = self.store.on_append(appended.set) if follow else None
        try:
            last = after
            while True:
                appended.clear()  # before reading: an append during the read wakes us
                page, read_to = self.store.feed(after=last, limit=FEED_PAGE)
                if page:
                    yield page
                more = read_to > last  # rows were read (some may not decode): look again
                last = read_to
                if more:
                    continue
                if not follow:
                    return
                await appended.wait()
        finally:
            if stop is not None:
                stop()


__all__ = ["FEED_PAGE", "PAGE", "EventReads"]

"""An event stream sends its records a page at a time: one write of NDJSON
lines per page the host's iterator yields, in order, then the end. The
host's reads make the pages: stored records in pages of at most ``PAGE``,
and the live records that arrived together as one.

The ASGI ``send`` here records what the stream writes; ``receive`` never
reports a disconnect, and the server never stops, unless a test says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from recursa.daemon.replies import StopSignal
from recursa.daemon.stream import EventStream
from recursa.protocol.events import EventRecord, Notice, UserInput, record_to_dict
from recursa.protocol.person_ops import EventsQuery
from recursa.runtime.event_reads import PAGE, EventReads


def record(seq: int, text: str = "hi") -> EventRecord:
    return EventRecord(seq, "s-1", float(seq), UserInput(text=text))


async def written(records: AsyncIterator[Any]) -> list[bytes]:
    """The bodies the stream writes for ``records`` (a heartbeat never comes)."""
    bodies: list[bytes] = []
    forever = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await forever.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])

    stream = EventStream(records, heartbeat=3600.0, stop=StopSignal())
    await stream({"type": "http"}, receive, send)
    return bodies


def lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.decode().splitlines()]


async def test_each_page_is_one_write_of_its_records_lines_in_order() -> None:
    pages = [[record(n) for n in range(1, 301)], [record(301, "é\n")], [record(302)]]

    async def source() -> AsyncIterator[list[EventRecord]]:
        for page in pages:
            yield page

    bodies = await written(source())
    assert bodies[-1] == b""  # the end
    assert [lines(body) for body in bodies[:-1]] == [
        [record_to_dict(r) for r in page] for page in pages
    ]


async def test_an_iterator_that_yields_a_lone_record_ends_the_stream_with_an_error_line() -> None:
    async def source() -> AsyncIterator[object]:
        yield [record(1)]
        yield record(2)  # not a page
        yield [record(3)]

    bodies = await written(source())
    assert lines(bodies[0]) == [record_to_dict(record(1))]
    assert lines(bodies[1]) == [
        {"type": "error", "error": {"kind": "internal", "message": "internal error: bad event"}}
    ]
    assert bodies[2:] == [b""]


async def test_a_failing_iterator_ends_the_stream_with_its_error_after_the_pages_before() -> None:
    async def source() -> AsyncIterator[list[EventRecord]]:
        yield [EventRecord(1, "s-1", 1.0, Notice(text="n"))]
        raise LookupError("no such session")

    bodies = await written(source())
    assert lines(bodies[0])[0]["type"] == "notice"
    (error,) = lines(bodies[1])
    assert error["type"] == "error" and error["error"]["kind"] == "internal"
    assert bodies[2:] == [b""]


class Target:
    """A live session: its listeners and its piece in progress."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def listen(self, listener: Any) -> Any:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def in_progress(self) -> tuple[EventRecord, ...]:
        return (EventRecord(0, "s-1", 0.5, Notice(text="streaming")),)

    def tell(self, *records: EventRecord) -> None:
        for each in records:
            for listener in self.listeners:
                listener(each)


class Store:
    def __init__(self, records: list[EventRecord]) -> None:
        self.records = records

    def session(self, ref: str) -> Any:
        return SimpleNamespace(id="s-1")

    def events(self, session_id: str, *, after: int, before: int | None) -> list[EventRecord]:
        return [r for r in self.records if r.seq > after]


def reads(stored: list[EventRecord], target: Target) -> EventReads:
    runtime = SimpleNamespace(store=Store(stored), get=lambda session_id: target)
    return EventReads(runtime)  # type: ignore[arg-type]


async def test_stored_records_come_in_pages() -> None:
    stored = [record(n) for n in range(1, 2 * PAGE + 2)]
    pages = await reads(stored, Target()).events(EventsQuery("s-1"))
    assert [len(page) async for page in pages] == [PAGE, PAGE, 1]


async def test_live_records_that_arrived_together_come_as_one_page_without_repeats() -> None:
    target = Target()
    pages = await reads([record(1), record(2)], target).events(
        EventsQuery("s-1", follow=True, in_progress=True)
    )
    assert [r.seq for r in await anext(pages)] == [1, 2]
    assert [r.seq for r in await anext(pages)] == [0]  # the piece in progress
    live = EventRecord(0, "s-1", 3.5, Notice(text="delta"))
    target.tell(record(2), record(3), live, record(4))  # 2 was read from the store
    assert [(r.seq, r.ts) for r in await anext(pages)] == [(3, 3.0), (0, 3.5), (4, 4.0)]
    target.tell(record(4))
    target.tell(record(5))
    assert [r.seq for r in await anext(pages)] == [5]
    await pages.aclose()
    assert target.listeners == []

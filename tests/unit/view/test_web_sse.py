"""Server-sent events from event records (recursa.view.web.sse): the seq is
the event id (so a reconnect resumes), transient pieces have none, a quiet
stream gets keepalives, a failure is one last message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from recursa.errors import NotFound, RecursaError
from recursa.protocol.events import EventRecord, Notice, TextDelta
from recursa.view.web.sse import RETRY_MILLISECONDS, message, sse


def describe(exc: RecursaError) -> tuple[str, str]:
    return "not_found", str(exc)


def test_a_stored_record_is_a_message_with_its_seq_as_id() -> None:
    text = message(EventRecord(7, "s-1", 1.5, Notice(text="two\nlines")))
    lines = text.split("\n")
    assert lines[0] == "id: 7"
    assert lines[1].startswith("data: ")
    assert json.loads(lines[1][6:]) == {
        "seq": 7, "session_id": "s-1", "ts": 1.5, "type": "notice", "text": "two\nlines",
        "level": "info",
    }  # fmt: skip
    assert text.endswith("\n\n") and text.count("\n") == 3  # the data is one line


def test_a_transient_piece_has_no_id() -> None:
    text = message(EventRecord(0, "s-1", 1.5, TextDelta(text="he")))
    assert not text.startswith("id:") and text.startswith("data: ")


async def test_a_quiet_stream_gets_keepalives_and_a_failure_ends_it() -> None:
    release = asyncio.Event()
    closed: list[bool] = []

    async def records() -> AsyncIterator[EventRecord]:
        try:
            yield EventRecord(1, "s-1", 1.0, Notice(text="first"))
            await release.wait()
            raise NotFound("no session s-1")
        finally:
            closed.append(True)

    out = sse(records(), describe=describe, keepalive=0.01)
    assert await anext(out) == f"retry: {RETRY_MILLISECONDS}\n\n"
    assert (await anext(out)).startswith("id: 1\n")
    assert await anext(out) == ": keepalive\n\n"  # the record waited on is not cancelled
    release.set()
    while (last := await anext(out)) == ": keepalive\n\n":
        pass
    assert last.startswith("event: failure\n")
    assert json.loads(last.split("data: ")[1]) == {"kind": "not_found", "message": "no session s-1"}
    assert [chunk async for chunk in out] == []
    assert closed == [True]


async def test_closing_the_stream_closes_the_records_mid_wait() -> None:
    closed: list[bool] = []

    async def records() -> AsyncIterator[EventRecord]:
        try:
            await asyncio.Event().wait()  # nothing ever comes
            yield EventRecord(1, "s-1", 1.0, Notice(text="never"))
        finally:
            closed.append(True)

    out = sse(records(), describe=describe, keepalive=0.01)
    await anext(out)
    assert await anext(out) == ": keepalive\n\n"
    await out.aclose()  # the browser went away
    assert closed == [True]

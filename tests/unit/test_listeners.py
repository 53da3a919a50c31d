"""The streamed pieces a session keeps for watchers that arrive mid-reply."""

from __future__ import annotations

from recursa.protocol.events import (
    AssistantReply,
    CellOutput,
    CellStarted,
    Event,
    EventRecord,
    Notice,
    TextDelta,
)
from recursa.session.listeners import MAX_KEPT_CHARS, Listeners


def _record(event: Event, seq: int = 0) -> EventRecord:
    return EventRecord(seq=seq, session_id="s-1", ts=0.0, event=event)


def _texts(listeners: Listeners) -> list[str]:
    return [getattr(record.event, "text", "") for record in listeners.in_progress()]


def test_the_pieces_of_the_reply_in_progress_are_kept_in_order() -> None:
    listeners = Listeners()
    listeners.publish(_record(TextDelta(text="old"), 0))
    listeners.publish(_record(AssistantReply(text="old"), 1))
    listeners.publish(_record(TextDelta(text="he")))
    listeners.publish(_record(Notice(text="a note mid-reply"), 2))  # ends no stream
    listeners.publish(_record(TextDelta(text="llo")))
    assert _texts(listeners) == ["he", "llo"]


def test_a_stored_reply_or_cell_start_ends_the_pieces() -> None:
    listeners = Listeners()
    listeners.publish(_record(TextDelta(text="hello")))
    listeners.publish(_record(AssistantReply(text="hello"), 1))
    assert listeners.in_progress() == ()
    listeners.publish(_record(CellStarted(cell=1, call_id="c", code="print(1)"), 2))
    listeners.publish(_record(CellOutput(cell=1, stream="stdout", text="1\n")))
    assert _texts(listeners) == ["1\n"]


def test_past_the_limit_later_pieces_are_not_kept() -> None:
    listeners = Listeners()
    big = "x" * MAX_KEPT_CHARS
    listeners.publish(_record(CellOutput(cell=1, stream="stdout", text=big)))
    listeners.publish(_record(CellOutput(cell=1, stream="stdout", text="more")))
    assert _texts(listeners) == [big]


def test_a_callback_still_hears_every_record() -> None:
    listeners = Listeners()
    heard: list[EventRecord] = []
    stop = listeners.add(heard.append)
    records = [_record(TextDelta(text="a")), _record(AssistantReply(text="a"), 1)]
    for record in records:
        listeners.publish(record)
    stop()
    listeners.publish(_record(TextDelta(text="b")))
    assert heard == records

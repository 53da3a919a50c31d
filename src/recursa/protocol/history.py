"""What the kernel's ``history`` and ``compact`` exchange with the daemon: pure values.

``history`` reads the session's own event log, which compaction never
touches: everything the model saw, including what was later summarized away,
and the full output of every cell (the model was shown a bounded part).
:func:`event_text` says what of an event is searchable; :func:`excerpt` cuts
the part of it a hit shows.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any

from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Compacted,
    Event,
    EventRecord,
    InboxRead,
    ModelUsage,
    Notice,
    SessionCreated,
    StatusChanged,
    TurnEnded,
    TurnStarted,
    UserInput,
    record_to_dict,
)
from recursa.protocol.fields import Count, Instructions, Name
from recursa.validation import length, within
from recursa.values import frozen

DEFAULT_SEARCH_RESULTS = 20
MAX_SEARCH_RESULTS = 200
DEFAULT_EVENTS = 50
MAX_EVENTS = 1000
EXCERPT_CHARS = 400
"""Characters of text a search hit shows around its first match."""
MAX_QUERY_CHARS = 2000


@frozen
class HistoryHit:
    """One event that matched a search. ``text`` is an excerpt around the first
    match; ``full``: it comes from the complete output of cell ``cell`` kept in
    the store (the event itself holds the part the model was shown). ``turn`` is
    None for an event outside any turn."""

    seq: int
    type: str
    turn: int | None
    ts: float
    text: str
    cell: int | None = None
    full: bool = False


@frozen
class HistoryEvent:
    """A stored event with the number of the turn it belongs to (None: between turns)."""

    record: EventRecord
    turn: int | None

    def to_dict(self) -> dict[str, Any]:
        """The event as ``history.events()`` returns it: its fields, ``seq``,
        ``session_id``, ``ts`` and ``turn``."""
        return {**record_to_dict(self.record), "turn": self.turn}


@frozen
class SearchRequest:
    query: Annotated[str, length(least=1, most=MAX_QUERY_CHARS)]
    limit: Annotated[int, within(1, MAX_SEARCH_RESULTS)] = DEFAULT_SEARCH_RESULTS


@frozen
class EventsRequest:
    """``type``: only events of that type; ``after``: events with a seq above it,
    oldest first (None: the newest ``limit`` events, oldest first)."""

    type: Name | None = None
    after: Count | None = None
    limit: Annotated[int, within(1, MAX_EVENTS)] = DEFAULT_EVENTS


@frozen
class CompactRequest:
    instructions: Instructions = None


@frozen
class CompactReply:
    """What ``compact.run()`` did: ``compacted`` False says why not in ``detail``."""

    compacted: bool
    tokens_before: int = 0
    tokens_after: int = 0
    through: int = 0
    detail: str = ""


def event_text(event: Event) -> str:
    """The searchable text of an event: what a person would call its content.

    A reply's tool calls are left out (each cell's code is its ``cell_started``);
    events that carry only bookkeeping have none. An event type this function
    does not name is searched by all of its string fields.
    """
    match event:
        case UserInput(text=text) | CellStarted(code=text) | CellFinished(output=text):
            return text
        case AssistantReply(text=text):
            return text
        case Compacted(summary=summary):
            return summary
        case Notice(text=text):
            return text
        case TurnEnded(answer=answer, detail=detail):
            return "\n".join(part for part in (answer, detail) if part)
        case InboxRead(messages=messages):
            return "\n".join(message.text for message in messages)
        case ModelUsage() | StatusChanged() | TurnStarted() | SessionCreated():
            return ""
        case _:
            values = (getattr(event, f.name) for f in fields(event) if f.name != "type")
            return "\n".join(value for value in values if isinstance(value, str) and value)


def excerpt(text: str, query: str, width: int = EXCERPT_CHARS) -> str:
    """About ``width`` characters of ``text`` around the first (case-insensitive)
    match of ``query``, marked with ``…`` where it was cut."""
    if len(text) <= width:
        return text
    at = text.casefold().find(query.casefold())
    if at < 0:
        return text[:width] + "…"
    # The case-folded text can be longer than the text (ß → ss): clamp.
    at = min(at, len(text))
    start = max(0, min(at - width // 3, len(text) - width))
    end = start + width
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


__all__ = [
    "DEFAULT_EVENTS",
    "DEFAULT_SEARCH_RESULTS",
    "EXCERPT_CHARS",
    "MAX_EVENTS",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_RESULTS",
    "CompactReply",
    "CompactRequest",
    "EventsRequest",
    "HistoryEvent",
    "HistoryHit",
    "SearchRequest",
    "event_text",
    "excerpt",
]

"""Reading a session's history: search, recent events, one turn, turn numbers.

The event log keeps everything compaction took out of the model's context,
and ``cell_outputs`` the complete output of every cell (an event holds the
bounded part the model was shown); these reads cover both. They are queries
over the store's tables, so they live here; what they return is a value of
:mod:`recursa.protocol.history` or an :class:`EventRecord`.

Search is a case-insensitive substring match. A query of plain ASCII (no
quote or backslash, which JSON escapes) is first narrowed in SQL with
``LIKE`` over the stored JSON, then checked in Python against the event's
text (:func:`~recursa.protocol.history.event_text`), so field names and
bookkeeping never match; any other query is checked row by row.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from recursa.errors import NotFound
from recursa.protocol.events import (
    EVENT_TYPES,
    AssistantReply,
    CellFinished,
    CellStarted,
    Event,
    EventRecord,
    TurnEnded,
    TurnStarted,
    UserInput,
    event_from_json,
)
from recursa.protocol.history import HistoryEvent, HistoryHit, event_text, excerpt
from recursa.store.store import Store

_CHUNK = 500
"""SQL parameters per ``IN (...)`` list (SQLite allows a few thousand)."""


@dataclass(frozen=True, slots=True)
class TurnIndex:
    """Where a session's turns begin and end, to number any event by its turn."""

    started: tuple[tuple[int, int], ...]
    """(seq, turn) of every ``turn_started``, in seq order."""
    ended: tuple[int, ...]
    """The seq of every ``turn_ended``, in order."""

    def turn_of(self, seq: int, event: Event | None = None) -> int | None:
        """The turn an event belongs to: the last turn started at or before it,
        unless that turn had ended. A turn's inputs (``user_input`` delivered
        between turns) belong to the turn they start; other events between
        turns belong to none."""
        starts = [s for s, _ in self.started]
        at = bisect.bisect_right(starts, seq) - 1
        if at >= 0:
            start = starts[at]
            end = bisect.bisect_right(self.ended, start)
            if end >= len(self.ended) or self.ended[end] >= seq:
                return self.started[at][1]
        if isinstance(event, UserInput) and at + 1 < len(self.started):
            return self.started[at + 1][1]
        return None


def turn_index(store: Store, session_id: str) -> TurnIndex:
    started: list[tuple[int, int]] = []
    ended: list[int] = []
    rows = store.execute(
        "SELECT seq, data FROM events WHERE session_id = ?"
        " AND type IN ('turn_started', 'turn_ended') ORDER BY seq",
        (session_id,),
    )
    for seq, data in rows:
        event = _decode(data)
        if isinstance(event, TurnStarted):
            started.append((seq, event.turn))
        elif isinstance(event, TurnEnded):
            ended.append(seq)
    return TurnIndex(tuple(started), tuple(ended))


def search(
    store: Store, session_id: str, query: str, *, limit: int, skip: Collection[int] = ()
) -> list[HistoryHit]:
    """Events of the session whose text contains ``query`` (case-insensitive),
    newest first, at most ``limit``; a cell matches by its full output too.
    ``skip``: seqs to leave out (the searching cell's own code)."""
    if not query:
        raise ValueError("the query is empty")
    needle = query.casefold()
    like = _like(query)
    found: dict[int, HistoryHit] = {}
    turns = turn_index(store, session_id)
    want = limit + len(skip)

    # Full cell outputs first: a hit there is shown from the full text.
    cells: dict[int, tuple[str, str]] = {}
    sql = "SELECT cell, call_id, text FROM cell_outputs WHERE session_id = ?"
    params: list[object] = [session_id]
    if like is not None:
        sql += " AND text LIKE ? ESCAPE '\\'"
        params.append(like)
    for cell, call_id, text in store.execute(sql + " ORDER BY cell DESC", params):
        if needle in text.casefold():
            cells[cell] = (call_id, text)
            if len(cells) >= want:
                break
    for record in _cell_events(store, session_id, list(cells)):
        assert isinstance(record.event, CellFinished)
        cell = record.event.cell
        call_id, text = cells[cell]
        if record.event.call_id != call_id:
            continue
        found[record.seq] = HistoryHit(
            seq=record.seq,
            type=record.event.type,
            turn=turns.turn_of(record.seq, record.event),
            ts=record.ts,
            text=excerpt(text, query),
            cell=cell,
            full=True,
        )

    sql = "SELECT seq, ts, data FROM events WHERE session_id = ?"
    params = [session_id]
    if like is not None:
        sql += " AND data LIKE ? ESCAPE '\\'"
        params.append(like)
    matched = 0
    for seq, ts, data in store.execute(sql + " ORDER BY seq DESC", params):
        if matched >= want:
            break
        event = _decode(data)
        if event is None:
            continue
        text = event_text(event)
        if needle not in text.casefold():
            continue
        matched += 1
        if seq in found:
            continue
        found[seq] = HistoryHit(
            seq=seq,
            type=event.type,
            turn=turns.turn_of(seq, event),
            ts=ts,
            text=excerpt(text, query),
            cell=event.cell if isinstance(event, CellFinished) else None,
        )
    hits = sorted((h for h in found.values() if h.seq not in skip), key=lambda h: -h.seq)
    return hits[:limit]


def recent(
    store: Store, session_id: str, *, type: str | None, after: int | None, limit: int
) -> list[HistoryEvent]:
    """Events oldest first: those after ``after`` (the first ``limit``), or with
    ``after`` None the newest ``limit``. ``type`` keeps one event type only."""
    types = None if type is None else (type,)
    if after is not None:
        records = store.events(session_id, after=after, limit=limit, types=types)
    else:
        if type is not None and type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}")
        sql = "SELECT seq, ts, data FROM events WHERE session_id = ?"
        params: list[object] = [session_id]
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        rows = store.execute(sql + " ORDER BY seq DESC LIMIT ?", [*params, limit]).fetchall()
        records = list(reversed(list(_records(session_id, rows))))
    turns = turn_index(store, session_id)
    return [HistoryEvent(r, turns.turn_of(r.seq, r.event)) for r in records]


def turn(store: Store, session_id: str, number: int, *, limit: int) -> list[HistoryEvent]:
    """Turn ``number``'s events in order: the inputs it answered, then everything
    from its start to its end (at most ``limit``). NotFound when there is none."""
    turns = turn_index(store, session_id)
    starts = [seq for seq, n in turns.started if n == number]
    if not starts:
        raise NotFound(f"this session has no turn {number}")
    start = starts[-1]
    before = [seq for seq in turns.ended if seq < start]
    after = [seq for seq in turns.ended if seq > start]
    first = before[-1] if before else 0
    last = after[0] if after else None
    records: list[HistoryEvent] = []
    cursor = first
    while page := store.events(session_id, after=cursor, limit=_CHUNK):
        for record in page:
            if (last is not None and record.seq > last) or len(records) >= limit:
                return records
            if record.seq < start and not isinstance(record.event, UserInput):
                continue  # between turns: only the inputs this turn took belong to it
            records.append(HistoryEvent(record, number))
        cursor = page[-1].seq
    return records


def running_step(store: Store, session_id: str) -> set[int]:
    """The seqs of the step in progress, when a cell of it is running: its reply
    and the running cells' ``cell_started``. A search from that cell leaves
    them out, so it never finds its own code."""
    rows = store.execute(
        "SELECT seq, ts, data FROM events WHERE session_id = ? AND seq >= ("
        "SELECT max(seq) FROM events WHERE session_id = ? AND type = 'assistant_reply')"
        " AND type IN ('assistant_reply', 'cell_started', 'cell_finished') ORDER BY seq",
        (session_id, session_id),
    ).fetchall()
    reply: int | None = None
    running: dict[int, int] = {}
    for record in _records(session_id, rows):
        match record.event:
            case AssistantReply():
                reply = record.seq
            case CellStarted(cell=cell):
                running[cell] = record.seq
            case CellFinished(cell=cell):
                running.pop(cell, None)
            case _:
                pass
    if reply is None or not running:
        return set()
    return {reply, *running.values()}


def turn_tokens(store: Store, session_id: str) -> int:
    """Tokens (input and output) of the model calls of the session's latest
    turn: its steps, and the calls its cells made (``llm()``)."""
    row = store.execute(
        "SELECT total(input_tokens + output_tokens) FROM usage WHERE session_id = ? AND seq > "
        "(SELECT coalesce(max(seq), 0) FROM events WHERE session_id = ? AND type = 'turn_started')",
        (session_id, session_id),
    ).fetchone()
    return int(row[0]) if row else 0


def _cell_events(store: Store, session_id: str, cells: list[int]) -> Iterator[EventRecord]:
    for at in range(0, len(cells), _CHUNK):
        chunk = cells[at : at + _CHUNK]
        rows = store.execute(
            "SELECT seq, ts, data FROM events WHERE session_id = ? AND type = 'cell_finished'"
            f" AND json_extract(data, '$.cell') IN ({', '.join('?' * len(chunk))})",
            [session_id, *chunk],
        )
        yield from _records(session_id, rows)


def _records(session_id: str, rows: Iterable[tuple[int, float, str]]) -> Iterator[EventRecord]:
    for seq, ts, data in rows:
        event = _decode(data)
        if event is not None:
            yield EventRecord(seq, session_id, ts, event)


def _decode(data: str) -> Event | None:
    # Rows this recursa cannot read (a newer writer's) are skipped, as Store.events does.
    try:
        return event_from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _like(query: str) -> str | None:
    """A LIKE pattern that narrows rows to those that may match, or None when
    the query cannot be matched against stored JSON as it is."""
    plain = query.isascii() and query.isprintable() and '"' not in query and "\\" not in query
    if not plain:
        return None
    escaped = query.replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


__all__ = ["TurnIndex", "recent", "running_step", "search", "turn", "turn_index", "turn_tokens"]

"""The append-only event log and what indexes it: usage rows and cell outputs.

:class:`EventLog` is the part of :class:`~recursa.store.store.Store` that
writes and reads ``events``, ``usage`` and ``cell_outputs``. Its invariants
are the store's (see :mod:`recursa.store.store`): the log is append-only with
``seq`` growing across all sessions, transient events are never stored, and a
``model_usage`` event and its ``usage`` row are written in one transaction.

Undecodable events: a row whose JSON this recursa cannot decode (an event
type or field shape from a newer writer) is skipped by :meth:`EventLog.events`,
logged once per row, and counted in :attr:`EventLog.skipped_events`. A reader
therefore sees every event it understands, in order, and never crashes on one
it does not; ``after``/``limit`` paging still moves past the skipped rows.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable

from recursa.errors import one_line
from recursa.protocol.events import (
    EVENT_TYPES,
    Event,
    EventRecord,
    ModelUsage,
    event_from_json,
    event_to_json,
    is_transient,
)
from recursa.store.connection import StoreConnection
from recursa.store.db import translated
from recursa.store.rows import UsageTotals

log = logging.getLogger("recursa.store")

_INSERT_EVENT = "INSERT INTO events (session_id, ts, type, data) VALUES (?, ?, ?, ?)"
_INSERT_USAGE = (
    "INSERT INTO usage (seq, session_id, model, input_tokens, output_tokens, cached_tokens,"
    " cache_write_tokens, cost, latency, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_LAST_ANSWER = """
    SELECT json_extract(data, '$.answer') FROM events
    WHERE session_id = ? AND type = 'turn_ended' AND json_valid(data)
      AND json_extract(data, '$.answer') IS NOT NULL
    ORDER BY seq DESC LIMIT 1
"""


class EventLog(StoreConnection):
    """Appending and reading events, their usage rows, and cell outputs (a mixin of ``Store``)."""

    @property
    def skipped_events(self) -> int:
        """How many distinct stored events this store could not decode (and skipped)."""
        return len(self._skipped)

    def append(self, session_id: str, event: Event) -> EventRecord:
        """Append one event to a session's log in one transaction and return its record.

        Raises ``ValueError`` for a transient event and :class:`NotFound` for an
        unknown session. A :class:`ModelUsage` also writes its ``usage`` row.
        """
        return self.append_many(session_id, (event,))[0]

    def append_many(self, session_id: str, events: Iterable[Event]) -> list[EventRecord]:
        """Append events in order, all in one transaction: all are stored or none.

        Every event is checked before anything is written.
        """
        batch = tuple(events)
        for event in batch:
            if is_transient(event):
                raise ValueError(f"{event.type} events are transient and never stored")
        if not batch:
            return []
        conn = self._db()
        records: list[EventRecord] = []
        try:
            with self.transaction():
                for event in batch:
                    records.append(self._insert(conn, session_id, event, self._clock()))
        except sqlite3.Error as exc:
            raise self._error(exc, missing=f"no session {session_id!r}") from exc
        for callback in list(self._appended):
            callback()
        return records

    def on_append(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (quick, never raising) after every append from now
        on, once the events are readable from this store; returns a function
        that stops the calls. Readers of :meth:`feed` wait on it."""
        self._appended.append(callback)

        def stop() -> None:
            if callback in self._appended:
                self._appended.remove(callback)

        return stop

    def _insert(
        self, conn: sqlite3.Connection, session_id: str, event: Event, ts: float
    ) -> EventRecord:
        # Inside a transaction; IntegrityError is left to the caller to name.
        cursor = conn.execute(_INSERT_EVENT, (session_id, ts, event.type, event_to_json(event)))
        seq = cursor.lastrowid
        assert seq is not None  # an INSERT into a rowid table always sets it
        if isinstance(event, ModelUsage):
            conn.execute(
                _INSERT_USAGE,
                (
                    seq,
                    session_id,
                    event.model,
                    event.input_tokens,
                    event.output_tokens,
                    event.cached_tokens,
                    event.cache_write_tokens,
                    event.cost,
                    event.latency,
                    ts,
                ),
            )
        return EventRecord(seq, session_id, ts, event)

    def events(
        self,
        session_id: str,
        *,
        after: int = 0,
        limit: int | None = None,
        types: Collection[str] | None = None,
        before: int | None = None,
    ) -> list[EventRecord]:
        """A session's events with ``seq > after`` (and ``< before`` when given), in
        seq order, at most ``limit`` of them.

        ``types`` keeps only those event types (names from the grammar; an
        unknown name is a ``ValueError``). Undecodable rows are skipped (see the
        module docstring), and ``limit`` counts the events returned. An unknown
        session simply has no events.
        """
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        clause, params = "", [session_id, after]
        if types is not None:
            wanted = sorted(set(types))
            unknown = [name for name in wanted if name not in EVENT_TYPES]
            if unknown:
                raise ValueError(f"unknown event types: {', '.join(unknown)}")
            if not wanted:
                return []
            clause = f" AND type IN ({', '.join('?' * len(wanted))})"
            params.extend(wanted)
        if before is not None:
            clause += " AND seq < ?"
            params.append(before)
        sql = (
            "SELECT seq, ts, data FROM events WHERE session_id = ? AND seq > ?"
            f"{clause} ORDER BY seq LIMIT ?"
        )
        conn = self._db()
        records: list[EventRecord] = []
        cursor_seq = after
        while limit is None or len(records) < limit:
            want = -1 if limit is None else limit - len(records)  # -1: no limit in SQLite
            params[1] = cursor_seq
            with translated(self._where):
                rows = conn.execute(sql, (*params, want)).fetchall()
            for seq, ts, data in rows:
                event = self._decode(seq, data)
                if event is not None:
                    records.append(EventRecord(seq, session_id, ts, event))
            # A short page is the end; a full one may have lost rows to skipping.
            if want < 0 or len(rows) < want:
                break
            cursor_seq = rows[-1][0]
        return records

    def feed(self, *, after: int = 0, limit: int = 1000) -> tuple[list[EventRecord], int]:
        """Every session's events with ``seq > after``, in seq order, from at most
        ``limit`` rows, and the last seq read (``after`` when none): a reader goes
        on from there, past rows that cannot be decoded (fewer records than rows)."""
        with translated(self._where):
            rows = (
                self._db()
                .execute(
                    "SELECT seq, session_id, ts, data FROM events WHERE seq > ?"
                    " ORDER BY seq LIMIT ?",
                    (after, limit),
                )
                .fetchall()
            )
        records = [
            EventRecord(seq, session_id, ts, event)
            for seq, session_id, ts, data in rows
            if (event := self._decode(seq, data)) is not None
        ]
        return records, rows[-1][0] if rows else after

    def tail(
        self, session_id: str, *, limit: int, after: int = 0, before: int | None = None
    ) -> list[EventRecord]:
        """The last ``limit`` rows of a session's events with ``after < seq < before``
        (``before`` None: no upper bound), in seq order; a reader paging back
        through a long log passes the oldest seq it holds as ``before``."""
        if limit < 0:
            raise ValueError("limit must be >= 0")
        upper = "" if before is None else " AND seq < ?"
        params: tuple[object, ...] = (session_id, after, *(() if before is None else (before,)))
        with translated(self._where):
            rows = (
                self._db()
                .execute(
                    f"SELECT seq, ts, data FROM events WHERE session_id = ? AND seq > ?{upper}"
                    " ORDER BY seq DESC LIMIT ?",
                    (*params, limit),
                )
                .fetchall()
            )
        return [
            EventRecord(seq, session_id, ts, event)
            for seq, ts, data in reversed(rows)
            if (event := self._decode(seq, data)) is not None
        ]

    def _decode(self, seq: int, data: str) -> Event | None:
        try:
            return event_from_json(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # json.JSONDecodeError is a ValueError; JSON that is not an object,
            # or a malformed nested field (tool_calls), raises one of the others.
            if seq not in self._skipped:
                self._skipped.add(seq)
                log.warning("skipped event %d in %s: %s", seq, self._where, one_line(exc))
            return None

    def last_activity(self, session_id: str) -> float | None:
        """The time of the session's latest event, or None when it has none."""
        with translated(self._where):
            row = (
                self._db()
                .execute("SELECT max(ts) FROM events WHERE session_id = ?", (session_id,))
                .fetchone()
            )
        return None if row is None or row[0] is None else float(row[0])

    def last_answer(self, session_id: str) -> str | None:
        """The answer of the session's latest turn that ended with one (what
        a loaded session keeps as ``last_answer``), or None. A row that is
        not JSON is passed over, as every read of the log passes it over."""
        with translated(self._where):
            row = self._db().execute(_LAST_ANSWER, (session_id,)).fetchone()
        return None if row is None or not isinstance(row[0], str) else row[0]

    def last_seq(self, session_id: str | None = None, *, type: str | None = None) -> int:
        """The highest seq stored (in that session, or anywhere; of that event
        type, or any); 0 when there is none."""
        where, params = [], []
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if type is not None:
            where.append("type = ?")
            params.append(type)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        # Newest first and the first match: the (session_id, seq) index is walked
        # back from the end and stops there, however long the log.
        sql = f"SELECT seq FROM events{clause} ORDER BY seq DESC LIMIT 1"
        with translated(self._where):
            row = self._db().execute(sql, params).fetchone()
        return 0 if row is None else int(row[0])

    # -- cell outputs --------------------------------------------------------

    def put_cell_output(self, session_id: str, cell: int, call_id: str, text: str) -> None:
        """Keep the full text of a cell's output. Raises :class:`NotFound` for an unknown session.

        A second put for the same (session, cell) replaces the first, so a
        retried write is harmless; cell numbers are unique within a session.
        """
        try:
            self._db().execute(
                "INSERT INTO cell_outputs (session_id, cell, call_id, text, chars)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, cell) DO UPDATE SET"
                " call_id = excluded.call_id, text = excluded.text, chars = excluded.chars",
                (session_id, cell, call_id, text, len(text)),
            )
        except sqlite3.Error as exc:
            raise self._error(exc, missing=f"no session {session_id!r}") from exc

    def cell_output(self, session_id: str, cell: int) -> str | None:
        """The full output text of a cell, or None if none was kept."""
        with translated(self._where):
            row = (
                self._db()
                .execute(
                    "SELECT text FROM cell_outputs WHERE session_id = ? AND cell = ?",
                    (session_id, cell),
                )
                .fetchone()
            )
        return None if row is None else str(row[0])

    # -- usage ---------------------------------------------------------------

    def usage_totals(self, session_id: str, *, tree: bool = False) -> UsageTotals:
        """Usage of a session's model calls; with ``tree``, of it and all its descendants.

        Delegation is never free in the books: ``tree=True`` is what a
        session's work cost, sub-agents included. An unknown session has no usage.
        """
        scope = "SELECT ?"
        if tree:
            scope = (
                "WITH RECURSIVE tree(id) AS (SELECT ? UNION "
                "SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id) SELECT id FROM tree"
            )
        with translated(self._where):
            row = (
                self._db()
                .execute(
                    "SELECT count(*), total(input_tokens), total(output_tokens),"
                    " total(cached_tokens), total(cache_write_tokens), total(cost),"
                    " count(*) - count(cost)"
                    f" FROM usage WHERE session_id IN ({scope})",
                    (session_id,),
                )
                .fetchone()
            )
        calls, inp, out, cached, written, cost, unknown = row
        return UsageTotals(
            calls=int(calls),
            input_tokens=int(inp),
            output_tokens=int(out),
            cached_tokens=int(cached),
            cache_write_tokens=int(written),
            cost=float(cost),
            unknown_cost_calls=int(unknown),
        )


__all__ = ["EventLog"]

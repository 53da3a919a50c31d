"""The Store: sessions, the append-only event log, usage and cell outputs in one SQLite file.

One :class:`Store` owns one connection and is the only writer of its file.
It is used from the asyncio thread: every call is a short synchronous SQLite
statement (an append is tens of microseconds, see ``benchmarks/store_append.py``),
so calling it from a coroutine does not stall the loop, and one thread means
no locks in Python and no ``SQLITE_BUSY`` between our own writes. Reads use
the same connection. sqlite3 refuses a call from any other thread; a process
that only reads (a CLI, a backup) may open its own connection, which WAL mode
lets run beside the writer.

Invariants the store keeps:

- ``events`` is append-only. Triggers in the database abort any UPDATE,
  DELETE or reuse of a ``seq``; ``seq`` grows strictly across all sessions.
- Transient events (:func:`~recursa.protocol.events.is_transient`) are never stored.
- A ``model_usage`` event and its ``usage`` row are written in one
  transaction: the usage table is an index of the log, never ahead or behind.
- Every ``sqlite3`` error leaves as a one-line :class:`~recursa.errors.StoreError`.

Undecodable events: a row whose JSON this recursa cannot decode (an event
type or field shape from a newer writer) is skipped by :meth:`Store.events`,
logged once per row, and counted in :attr:`Store.skipped_events`. A reader
therefore sees every event it understands, in order, and never crashes on one
it does not; ``after``/``limit`` paging still moves past the skipped rows.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Literal

from recursa.errors import NotFound, StoreError
from recursa.protocol.events import (
    EVENT_TYPES,
    Event,
    EventRecord,
    ModelUsage,
    SessionStatus,
    event_from_json,
    event_to_json,
    is_transient,
)
from recursa.store import sessions as session_table
from recursa.store.db import connect, one_line, translated
from recursa.store.goals import GoalTable
from recursa.store.harness import HarnessTables
from recursa.store.inbox import Inbox
from recursa.store.ledger import Commands, KernelRecords, KernelTokens
from recursa.store.migrations import migrate
from recursa.store.rows import JSONValue, SessionRow, UsageTotals
from recursa.store.schedules import ScheduleTable

log = logging.getLogger("recursa.store")


class _Keep(Enum):
    KEEP = "keep"


_KEEP: Literal[_Keep.KEEP] = _Keep.KEEP

_INSERT_EVENT = "INSERT INTO events (session_id, ts, type, data) VALUES (?, ?, ?, ?)"
_INSERT_USAGE = (
    "INSERT INTO usage (seq, session_id, model, input_tokens, output_tokens, cached_tokens,"
    " cache_write_tokens, cost, latency, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class Store:
    """The SQLite store. Build it with :meth:`open` or :meth:`memory`; close it when done.

    All times come from the injected ``clock`` (unix seconds), so tests can
    pin them. Not thread-safe by design: see the module docstring.
    """

    def __init__(
        self, conn: sqlite3.Connection, *, where: str, path: Path | None, clock: Callable[[], float]
    ) -> None:
        """Wrap a connection already opened by :func:`~recursa.store.db.connect` and migrated.

        Prefer :meth:`open` and :meth:`memory`, which do both.
        """
        self._conn: sqlite3.Connection | None = conn
        self._where = where
        self._path = path
        self._clock = clock
        self._depth = 0
        self._skipped: set[int] = set()
        self.inbox = Inbox(self)
        """Messages waiting for sessions (:mod:`recursa.store.inbox`)."""
        self.commands = Commands(self)
        """The idempotency ledger of client commands (:mod:`recursa.store.ledger`)."""
        self.kernels = KernelRecords(self)
        """Each session's kernel process, for reattaching after a crash."""
        self.tokens = KernelTokens(self)
        self.harness = HarnessTables(self)
        """Harness entry versions, staged edits, refinements (:mod:`recursa.store.harness`)."""
        """The tokens kernels speak to the daemon with (hashes only)."""
        self.goals = GoalTable(self)
        """Each session's goals (:mod:`recursa.store.goals`)."""
        self.schedules = ScheduleTable(self)
        """Scheduled prompts: heartbeats, one-time and cron jobs (:mod:`recursa.store.schedules`)."""

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, clock: Callable[[], float] = time.time) -> Store:
        """Open (creating if needed) the store at ``path`` and bring its schema up to date.

        Missing parent directories are created with mode 0700 and a new file
        with mode 0600. Raises :class:`StoreError` (one line naming the path)
        if the file is not a SQLite database, belongs to another program, was
        written by a newer recursa, or cannot be opened.
        """
        where = str(path)
        conn = connect(path)
        try:
            migrate(conn, where=where, clock=clock)
        except BaseException:
            conn.close()
            raise
        return cls(conn, where=where, path=path, clock=clock)

    @classmethod
    def memory(cls, *, clock: Callable[[], float] = time.time) -> Store:
        """A private in-memory store with the full schema, for tests. Gone on close."""
        conn = connect(None)
        migrate(conn, where=":memory:", clock=clock)
        return cls(conn, where=":memory:", path=None, clock=clock)

    @property
    def path(self) -> Path | None:
        """The database file, or None for an in-memory store."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._conn is None

    @property
    def skipped_events(self) -> int:
        """How many distinct stored events this store could not decode (and skipped)."""
        return len(self._skipped)

    def close(self) -> None:
        """Close the connection. Idempotent. An open :meth:`transaction` is rolled back."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the store {self._where} is closed")
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Make the block atomic: all of its writes commit together, or none do.

        Nests: an inner block is a savepoint, rolled back alone when it raises.
        The block must be synchronous: never ``await`` inside it, because every
        coroutine shares this connection and would write into (and be rolled
        back with) the open transaction. Store methods called in the block
        raise their usual errors; a raw ``sqlite3`` statement's errors pass
        through for the caller (inside this package) to name.
        """
        conn = self._db()
        depth = self._depth
        with translated(self._where):
            conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT s{depth}")
        self._depth = depth + 1
        try:
            yield
        except BaseException:
            self._depth = depth
            with translated(self._where):
                if depth == 0:
                    conn.execute("ROLLBACK")
                else:
                    conn.execute(f"ROLLBACK TO s{depth}")
                    conn.execute(f"RELEASE s{depth}")
            raise
        self._depth = depth
        with translated(self._where):
            if depth > 0:
                conn.execute(f"RELEASE s{depth}")
                return
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def now(self) -> float:
        """The store's clock (unix seconds)."""
        return self._clock()

    def execute(
        self, sql: str, params: Sequence[object] = (), *, missing: str | None = None
    ) -> sqlite3.Cursor:
        """One statement on the store's connection, for the store's companions
        (inbox, ledgers). A foreign-key failure is :class:`NotFound` naming the
        session ``missing``; any other SQLite error is a one-line StoreError."""
        try:
            return self._db().execute(sql, params)
        except sqlite3.Error as exc:
            raise self._error(
                exc, missing=None if missing is None else f"no session {missing!r}"
            ) from exc

    def _error(self, exc: sqlite3.Error, *, missing: str | None = None) -> StoreError:
        """The one-line error for ``exc``; a foreign-key failure is ``NotFound(missing)``."""
        if (
            missing is not None
            and isinstance(exc, sqlite3.IntegrityError)
            and exc.sqlite_errorname == "SQLITE_CONSTRAINT_FOREIGNKEY"
        ):
            return NotFound(missing)
        return StoreError(f"store {self._where}: {one_line(exc)}")

    # -- sessions ----------------------------------------------------------

    def create_session(
        self,
        *,
        model: str,
        cwd: str,
        workspace: str,
        name: str | None = None,
        parent_id: str | None = None,
        status: SessionStatus = "admitted",
        meta: Mapping[str, JSONValue] | None = None,
    ) -> SessionRow:
        """Create a session row with a new time-ordered id and return it.

        The store writes no event here: recording ``session_created`` is the
        session layer's job (wrap both in :meth:`transaction` to make them atomic).

        ``parent_id`` is an exact session id (resolve names with :meth:`session`
        first). ``name`` is optional and unique across the store. Raises
        :class:`NotFound` for an unknown parent, :class:`StoreError` for a taken
        name, ``ValueError`` for an invalid name or status.
        """
        conn = self._db()
        with translated(self._where):
            session_id = session_table.insert_session(
                conn,
                model=model,
                cwd=cwd,
                workspace=workspace,
                name=name,
                parent_id=parent_id,
                status=status,
                meta=meta,
                now=self._clock(),
            )
            return session_table.find_session(conn, session_id)

    def session(self, id_or_name: str) -> SessionRow:
        """The session with this exact id, else this name, else this unique id prefix.

        Raises :class:`NotFound` (one line) when none matches or a prefix is ambiguous.
        """
        conn = self._db()
        with translated(self._where):
            return session_table.find_session(conn, id_or_name)

    def sessions(
        self,
        *,
        parent_id: str | None = None,
        roots: bool = False,
        statuses: Collection[SessionStatus] | None = None,
    ) -> list[SessionRow]:
        """Sessions in creation order, filtered.

        ``parent_id``: only the children of that session; ``roots``: only
        sessions without a parent (not both, ``ValueError``); ``statuses``: only these.
        """
        conn = self._db()
        with translated(self._where):
            return session_table.list_sessions(
                conn, parent_id=parent_id, roots=roots, statuses=statuses
            )

    def set_status(self, session_id: str, status: SessionStatus) -> SessionRow:
        """Set a session's status (exact id) and return the new row. Raises :class:`NotFound`.

        The store checks the value, not the transition: the lifecycle belongs
        to the session layer, which also records the transition as an event.
        """
        session_table.check_status(status)
        return self._update(session_id, {"status": status})

    def update_session(
        self,
        session_id: str,
        *,
        model: str | None = None,
        name: str | _Keep | None = _KEEP,
        workspace: str | None = None,
        meta: Mapping[str, JSONValue] | None = None,
    ) -> SessionRow:
        """Change a session's model, name (None clears it), workspace or meta (replaced whole).

        Arguments left out are kept. Returns the new row. Raises :class:`NotFound`
        for an unknown id, :class:`StoreError` for a taken name. The workspace
        is settable because it is usually named after the id, which exists only
        once the row does.
        """
        fields: dict[str, object] = {}
        if model is not None:
            fields["model"] = model
        if not isinstance(name, _Keep):
            session_table.check_name(name)
            fields["name"] = name
        if workspace is not None:
            fields["workspace"] = workspace
        if meta is not None:
            fields["meta"] = session_table.dump_meta(meta)
        return self._update(session_id, fields)

    def _update(self, session_id: str, fields: Mapping[str, object]) -> SessionRow:
        conn = self._db()
        with translated(self._where):
            return session_table.update_fields(conn, session_id, fields, now=self._clock())

    # -- events ------------------------------------------------------------

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
        return records

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
    ) -> list[EventRecord]:
        """A session's events with ``seq > after``, in seq order, at most ``limit`` of them.

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

    def last_seq(self, session_id: str | None = None) -> int:
        """The highest seq stored (in that session, or anywhere); 0 when there is none."""
        with translated(self._where):
            if session_id is None:
                row = self._db().execute("SELECT max(seq) FROM events").fetchone()
            else:
                row = (
                    self._db()
                    .execute("SELECT max(seq) FROM events WHERE session_id = ?", (session_id,))
                    .fetchone()
                )
        return int(row[0] or 0)

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


__all__ = ["Store"]

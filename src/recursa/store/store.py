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

The class is assembled by concern: :class:`~recursa.store.connection.StoreConnection`
(the connection, transactions, errors), :class:`~recursa.store.sessions.SessionMethods`
(session rows), :class:`~recursa.store.eventlog.EventLog` (events, usage, cell
outputs and how undecodable rows are skipped), and one companion object per
other table (``store.inbox``, ``store.harness``, ...).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from recursa.store.db import connect
from recursa.store.eventlog import EventLog
from recursa.store.goals import GoalTable
from recursa.store.harness import HarnessTables
from recursa.store.inbox import Inbox
from recursa.store.ledger import Commands, KernelRecords, KernelTokens
from recursa.store.migrations import migrate
from recursa.store.schedules import ScheduleTable
from recursa.store.sessions import SessionMethods


class Store(SessionMethods, EventLog):
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
        super().__init__(conn, where=where, path=path, clock=clock)
        self.inbox = Inbox(self)
        """Messages waiting for sessions (:mod:`recursa.store.inbox`)."""
        self.commands = Commands(self)
        """The idempotency ledger of client commands (:mod:`recursa.store.ledger`)."""
        self.kernels = KernelRecords(self)
        """Each session's kernel process, for reattaching after a crash."""
        self.tokens = KernelTokens(self)
        """The tokens kernels speak to the daemon with (hashes only)."""
        self.harness = HarnessTables(self)
        """Harness entry versions, staged edits, refinements (:mod:`recursa.store.harness`)."""
        self.goals = GoalTable(self)
        """Each session's goals (:mod:`recursa.store.goals`)."""
        self.schedules = ScheduleTable(self)
        """Scheduled prompts: heartbeats, one-time and cron jobs (:mod:`recursa.store.schedules`)."""

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def open(
        cls, path: Path, *, clock: Callable[[], float] = time.time, autocheckpoint: bool = True
    ) -> Store:
        """Open (creating if needed) the store at ``path`` and bring its schema up to date.

        Missing parent directories are created with mode 0700 and a new file
        with mode 0600. Raises :class:`StoreError` (one line naming the path)
        if the file is not a SQLite database, belongs to another program, was
        written by a newer recursa, or cannot be opened.

        Without ``autocheckpoint`` no COMMIT on this connection checkpoints the
        WAL; the owner runs a :class:`~recursa.store.checkpoint.Checkpointer`.
        """
        where = str(path)
        conn = connect(path)
        if not autocheckpoint:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
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


__all__ = ["Store"]

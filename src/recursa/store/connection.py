"""The store's one connection: its lifetime, its transactions and its one-line errors.

:class:`StoreConnection` is the base of :class:`~recursa.store.store.Store`
and what the store's companions (inbox, ledgers, harness, goals, schedules)
call through: :meth:`~StoreConnection.execute`,
:meth:`~StoreConnection.transaction` and :meth:`~StoreConnection.now`. It
owns the connection, which sqlite3 ties to the thread that opened it; every
``sqlite3`` error that leaves it is a one-line
:class:`~recursa.errors.StoreError` (or :class:`~recursa.errors.NotFound`
for a missing session).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from recursa.errors import NotFound, StoreError, one_line
from recursa.store.db import translated


class StoreConnection:
    """One migrated SQLite connection, the clock its rows are stamped with, and
    the transaction depth. Not thread-safe by design (see :mod:`recursa.store.store`).

    Invariant: once :meth:`close` ran, every use raises :class:`StoreError`.
    """

    def __init__(
        self, conn: sqlite3.Connection, *, where: str, path: Path | None, clock: Callable[[], float]
    ) -> None:
        """Wrap a connection already opened by :func:`~recursa.store.db.connect` and migrated."""
        self._conn: sqlite3.Connection | None = conn
        self._where = where
        self._path = path
        self._clock = clock
        self._depth = 0
        self._skipped: set[int] = set()
        """Seqs of stored events this reader could not decode (see :mod:`recursa.store.eventlog`)."""
        self._appended: list[Callable[[], None]] = []
        """Called after every append (see :meth:`~recursa.store.eventlog.EventLog.on_append`)."""

    @property
    def path(self) -> Path | None:
        """The database file, or None for an in-memory store."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._conn is None

    def close(self) -> None:
        """Close the connection. Idempotent. An open :meth:`transaction` is rolled back."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> Self:
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


__all__ = ["StoreConnection"]

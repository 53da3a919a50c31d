"""Opening the SQLite file: private permissions, pragmas, and one-line errors.

This module owns everything that touches :mod:`sqlite3` below the level of
tables: where the file goes, who may read it, how the connection is tuned, and
how a foreign ``sqlite3.Error`` becomes a :class:`~recursa.errors.StoreError`
whose text is one line a user can act on. The schema lives in
:mod:`recursa.store.migrations`, the rows in :mod:`recursa.store.store`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recursa.errors import StoreError, one_line

log = logging.getLogger("recursa.store")

DB_FILE_NAME = "recursa.db"
"""The store's file name under ``RECURSA_HOME``."""

BUSY_TIMEOUT_MS = 5000
"""How long a statement waits for another connection's lock before failing.

There is one writer, but a second process (a CLI reading the store, a backup)
may hold a read or checkpoint lock for a moment; waiting beats failing."""

WAL_SIZE_LIMIT = 64 * 1024 * 1024
"""Bytes of WAL file kept after a checkpoint; the rest is truncated away."""

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents with mode 0700.

    Directories that already exist are left as they are: the user's home, or a
    ``RECURSA_HOME`` they chose, is theirs to set. Only what this call creates
    is made private, and ``chmod`` follows ``mkdir`` because the umask can
    strip bits from the mode ``mkdir`` is given.
    """
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            # Another process made it between our check and mkdir: theirs to keep.
            continue
        os.chmod(path, DIR_MODE)


def create_private_file(path: Path) -> None:
    """Create an empty ``path`` with mode 0600 unless it exists.

    SQLite treats an empty file as an empty database, and it gives the ``-wal``
    and ``-shm`` files it creates the mode of the database file, so creating
    the file first is what keeps the whole store private. An existing file's
    mode is left alone.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def refuse_emptied(path: Path) -> None:
    """Raise :class:`StoreError` (one line; the file is left as it is) when
    ``path`` is a 0-byte file in a home that was used: SQLite would take it
    for an empty database and the history would silently start over.

    A home counts as used when it holds a session's directory (``sessions/``
    with anything in it) or a non-empty write-ahead log. A new home may hold
    a 0-byte file: :func:`create_private_file` makes it empty before SQLite
    writes the schema, and a start cut short in between leaves it so."""
    try:
        if path.stat().st_size != 0:
            return
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc.strerror or exc}") from exc
    sessions = path.parent / "sessions"
    wal = path.with_name(path.name + "-wal")
    used = (sessions.is_dir() and any(sessions.iterdir())) or (
        wal.exists() and wal.stat().st_size > 0
    )
    if used:
        raise StoreError(
            f"the store {path} is empty (0 bytes) but this home has been used; "
            "restore it from a backup, or move it away to start a new store"
        )


def connect(path: Path | None) -> sqlite3.Connection:
    """A tuned connection to ``path`` (``None``: a private in-memory database).

    The connection is in autocommit mode (``isolation_level=None``): the store
    issues ``BEGIN IMMEDIATE``/``COMMIT`` itself, so a transaction is exactly
    the block the code says it is, and DDL in migrations is transactional.
    ``check_same_thread`` stays on: the store belongs to the thread that opened
    it (the asyncio thread), and sqlite3 refuses any other.

    Raises :class:`StoreError` (one line naming the path) when the file cannot
    be opened, is not a SQLite database, or was emptied (:func:`refuse_emptied`).
    """
    where = ":memory:" if path is None else str(path)
    if path is not None:
        refuse_emptied(path)
        try:
            make_private_dirs(path.parent)
            create_private_file(path)
        except OSError as exc:
            raise StoreError(f"cannot create the store {where}: {exc.strerror or exc}") from exc
    try:
        conn = sqlite3.connect(where, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {where}: {one_line(exc)}") from exc
    try:
        _apply_pragmas(conn, wal=path is not None, where=where)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot use the store {where}: {one_line(exc)}") from exc
    return conn


def _apply_pragmas(conn: sqlite3.Connection, *, wal: bool, where: str) -> None:
    # Set first so that the journal-mode switch below waits for a lock held
    # by another process instead of failing at once.
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if wal:
        # The first statement that reads the file: a file that is not a SQLite
        # database fails here with "file is not a database".
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if str(mode).lower() != "wal":
            # Some file systems (network mounts) cannot share the WAL index.
            # The store still works in rollback-journal mode, only slower.
            log.warning("the store %s could not use WAL mode (journal_mode=%s)", where, mode)
    # NORMAL in WAL mode syncs the WAL only at checkpoints, not at each commit.
    # A committed transaction is in the WAL file (in the OS page cache) when
    # COMMIT returns, so it survives the *process* dying at any point, kill -9
    # included, which is the crash recovery relies on. Only an OS crash or power
    # loss can roll back the last few commits, and never corrupts the file.
    # FULL would fsync on every commit and make an append cost milliseconds.
    conn.execute("PRAGMA synchronous = NORMAL")
    # A checkpoint empties the WAL but leaves the file at its largest size;
    # cap what stays on disk after a burst (a large batch, big cell outputs).
    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
    # SQLite leaves foreign keys off per connection unless asked.
    conn.execute("PRAGMA foreign_keys = ON")
    # Any file: make sure it can be read at all (a garbage in-memory db cannot
    # happen, but a torn file that passes the header check fails here).
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()


@contextmanager
def translated(where: str) -> Iterator[None]:
    """Turn any ``sqlite3.Error`` raised in the block into a one-line :class:`StoreError`.

    Errors the caller means to handle (a constraint it checks for) must be
    caught inside the block; this is the edge where the foreign exception
    stops.
    """
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"store {where}: {one_line(exc)}") from exc


__all__ = [
    "BUSY_TIMEOUT_MS",
    "DB_FILE_NAME",
    "DIR_MODE",
    "FILE_MODE",
    "WAL_SIZE_LIMIT",
    "connect",
    "create_private_file",
    "make_private_dirs",
    "refuse_emptied",
    "translated",
]

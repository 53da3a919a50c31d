"""Versioned schema migrations: named functions applied once, in order, and recorded.

Each migration is a function decorated with ``@_migration(version)``; its name
is the function's name. :func:`migrate` applies the ones a database has not
recorded, in version order, each in its own ``BEGIN IMMEDIATE`` transaction
together with its row in ``schema_migrations``, so a migration is either fully
applied and recorded or not at all (SQLite DDL is transactional).

Invariants:

- Versions are 1, 2, 3, ... with no gaps; a released migration is never
  edited or renumbered, only followed by a new one.
- A database that records a version this code does not know was written by a
  newer recursa: it is refused with one line, never "migrated" backwards.
- A migration runs inside a transaction, where ``PRAGMA foreign_keys`` cannot
  change. A future migration that rebuilds a table (SQLite's 12-step ALTER)
  must not rely on turning foreign keys off; copy into the new table before
  dropping the old one instead. Dropping ``events`` to rebuild it bypasses the
  append-only triggers, and must preserve every row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recursa.errors import StoreError, one_line


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step. ``apply`` runs inside the transaction :func:`migrate` opens."""

    version: int
    name: str
    apply: Callable[[sqlite3.Connection], None]


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    """A row of ``schema_migrations``: what was applied, and when (unix seconds)."""

    version: int
    name: str
    applied_at: float


_REGISTRY: list[Migration] = []


def _migration(
    version: int,
) -> Callable[[Callable[[sqlite3.Connection], None]], Callable[[sqlite3.Connection], None]]:
    def register(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
        expected = len(_REGISTRY) + 1
        if version != expected:
            raise RuntimeError(f"migration {fn.__name__} is version {version}, expected {expected}")
        _REGISTRY.append(Migration(version, fn.__name__.removeprefix("m_"), fn))
        return fn

    return register


def _run(conn: sqlite3.Connection, statements: Sequence[str]) -> None:
    # One statement per execute(): executescript() would COMMIT first and take
    # the migration out of its transaction.
    for statement in statements:
        conn.execute(statement)


@_migration(1)
def m_initial(conn: sqlite3.Connection) -> None:
    """Sessions, the append-only event log, usage per model call, full cell outputs."""
    _run(
        conn,
        (
            """
            CREATE TABLE sessions (
                id          TEXT PRIMARY KEY,
                name        TEXT UNIQUE,
                parent_id   TEXT REFERENCES sessions(id),
                model       TEXT NOT NULL,
                status      TEXT NOT NULL,
                cwd         TEXT NOT NULL,
                workspace   TEXT NOT NULL,
                created_at  REAL NOT NULL,
                updated_at  REAL NOT NULL,
                meta        TEXT NOT NULL DEFAULT '{}'
            )
            """,
            "CREATE INDEX sessions_parent ON sessions(parent_id)",
            # AUTOINCREMENT: a seq is never reused, so it is a safe global cursor.
            """
            CREATE TABLE events (
                seq         INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id  TEXT NOT NULL REFERENCES sessions(id),
                ts          REAL NOT NULL,
                type        TEXT NOT NULL,
                data        TEXT NOT NULL
            )
            """,
            "CREATE INDEX events_session_seq ON events(session_id, seq)",
            # The log is append-only, and the database says so, not only the code.
            """
            CREATE TRIGGER events_no_update BEFORE UPDATE ON events
            BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE refused'); END
            """,
            """
            CREATE TRIGGER events_no_delete BEFORE DELETE ON events
            BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE refused'); END
            """,
            # INSERT OR REPLACE deletes the old row without firing DELETE
            # triggers (recursive_triggers is off), so refuse a reused seq here.
            """
            CREATE TRIGGER events_no_replace BEFORE INSERT ON events
            WHEN EXISTS (SELECT 1 FROM events WHERE seq = NEW.seq)
            BEGIN SELECT RAISE(ABORT, 'events are append-only: seq exists'); END
            """,
            # One row per model call, keyed by its model_usage event: an index
            # of the log, written in the same transaction as the event.
            # cost NULL = the price is unknown; never 0.
            """
            CREATE TABLE usage (
                seq                 INTEGER PRIMARY KEY REFERENCES events(seq),
                session_id          TEXT NOT NULL REFERENCES sessions(id),
                model               TEXT NOT NULL,
                input_tokens        INTEGER NOT NULL,
                output_tokens       INTEGER NOT NULL,
                cached_tokens       INTEGER NOT NULL DEFAULT 0,
                cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
                cost                REAL,
                latency             REAL NOT NULL DEFAULT 0,
                ts                  REAL NOT NULL
            )
            """,
            "CREATE INDEX usage_session ON usage(session_id)",
            """
            CREATE TABLE cell_outputs (
                session_id  TEXT NOT NULL REFERENCES sessions(id),
                cell        INTEGER NOT NULL,
                call_id     TEXT NOT NULL,
                text        TEXT NOT NULL,
                chars       INTEGER NOT NULL,
                PRIMARY KEY (session_id, cell)
            ) WITHOUT ROWID
            """,
        ),
    )


@_migration(2)
def m_daemon(conn: sqlite3.Connection) -> None:
    """What a daemon needs to survive a crash: the durable inbox, the ledger of
    client commands (for idempotency), and each session's live kernel."""
    _run(
        conn,
        (
            # A message is stored before its receipt is returned, and marked
            # delivered in the same transaction as the event that delivers it:
            # so it is delivered exactly once, whatever crashes in between.
            """
            CREATE TABLE messages (
                id              INTEGER PRIMARY KEY AUTOINCREMENT,
                session_id      TEXT NOT NULL REFERENCES sessions(id),
                sender          TEXT,
                source          TEXT NOT NULL,
                mode            TEXT NOT NULL,
                text            TEXT NOT NULL,
                status          TEXT NOT NULL DEFAULT 'queued',
                created_at      REAL NOT NULL,
                delivered_at    REAL,
                delivered_seq   INTEGER REFERENCES events(seq)
            )
            """,
            "CREATE INDEX messages_pending ON messages(session_id, status, id)",
            # One row per client command: 'pending' until its effect is done;
            # a command found pending after a crash is uncertain, never rerun.
            """
            CREATE TABLE commands (
                client_id   TEXT NOT NULL,
                command_id  TEXT NOT NULL,
                kind        TEXT NOT NULL,
                status      TEXT NOT NULL,
                result      TEXT,
                created_at  REAL NOT NULL,
                finished_at REAL,
                PRIMARY KEY (client_id, command_id)
            ) WITHOUT ROWID
            """,
            # The kernel process a session last had, for reattaching after a
            # daemon crash (its connection file is kept on disk).
            """
            CREATE TABLE kernels (
                session_id      TEXT PRIMARY KEY REFERENCES sessions(id),
                pid             INTEGER NOT NULL,
                connection_file TEXT NOT NULL,
                started_at      REAL NOT NULL
            ) WITHOUT ROWID
            """,
        ),
    )


@_migration(3)
def m_agents(conn: sqlite3.Connection) -> None:
    """Sub-agents: the tokens kernels speak with, and which messages are a
    child's final answer (a parent that waited for it takes it from the queue)."""
    _run(
        conn,
        (
            # Only a hash is kept; the token itself lives in the kernel that got it.
            """
            CREATE TABLE kernel_tokens (
                token_hash  TEXT PRIMARY KEY,
                session_id  TEXT NOT NULL REFERENCES sessions(id),
                created_at  REAL NOT NULL
            ) WITHOUT ROWID
            """,
            "CREATE INDEX kernel_tokens_session ON kernel_tokens(session_id)",
            "ALTER TABLE messages ADD COLUMN kind TEXT NOT NULL DEFAULT 'message'",
        ),
    )


@_migration(4)
def m_harness(conn: sqlite3.Connection) -> None:
    """The Continual Harness: every version of every entry (a row each, never
    changed), the edits staged for a session's next turn boundary, and the
    refinements that proposed some of them."""
    _run(
        conn,
        (
            """
            CREATE TABLE harness_entries (
                entry_id       TEXT NOT NULL,
                version        INTEGER NOT NULL,
                kind           TEXT NOT NULL,
                title          TEXT NOT NULL,
                scope          TEXT NOT NULL,
                status         TEXT NOT NULL,
                content        TEXT NOT NULL,
                code           TEXT,
                meta           TEXT NOT NULL DEFAULT '{}',
                session_id     TEXT REFERENCES sessions(id),
                action         TEXT NOT NULL,
                actor          TEXT NOT NULL,
                reason         TEXT NOT NULL DEFAULT '',
                effect         TEXT NOT NULL DEFAULT '',
                source_events  TEXT NOT NULL DEFAULT '[]',
                refinement_id  INTEGER,
                review         TEXT,
                created_at     REAL NOT NULL,
                PRIMARY KEY (entry_id, version)
            ) WITHOUT ROWID
            """,
            "CREATE INDEX harness_entries_title ON harness_entries(kind, title)",
            # Versions are history: never changed, never deleted.
            """
            CREATE TRIGGER harness_entries_no_update BEFORE UPDATE ON harness_entries
            BEGIN SELECT RAISE(ABORT, 'harness versions are append-only'); END
            """,
            """
            CREATE TRIGGER harness_entries_no_delete BEFORE DELETE ON harness_entries
            BEGIN SELECT RAISE(ABORT, 'harness versions are append-only'); END
            """,
            """
            CREATE TABLE harness_edits (
                id          INTEGER PRIMARY KEY,
                session_id  TEXT NOT NULL REFERENCES sessions(id),
                edit        TEXT NOT NULL,
                created_at  REAL NOT NULL,
                applied_at  REAL,
                result      TEXT
            )
            """,
            "CREATE INDEX harness_edits_pending ON harness_edits(session_id) WHERE applied_at IS NULL",
            """
            CREATE TABLE refinements (
                id            INTEGER PRIMARY KEY,
                session_id    TEXT NOT NULL REFERENCES sessions(id),
                instructions  TEXT,
                status        TEXT NOT NULL,
                proposals     TEXT NOT NULL DEFAULT '[]',
                detail        TEXT NOT NULL DEFAULT '',
                created_at    REAL NOT NULL,
                finished_at   REAL
            )
            """,
        ),
    )


@_migration(5)
def m_goals_schedules(conn: sqlite3.Connection) -> None:
    """Long-horizon controls: each session's goals (the newest row is its
    current goal) and scheduled prompts (heartbeats, one-time and cron jobs)."""
    _run(
        conn,
        (
            # Usage toward a goal is the subtree's model calls with seq > since_seq
            # while it is open, frozen into ``spent`` when it ends: counted from
            # the log, so it survives restarts.
            """
            CREATE TABLE goals (
                id          INTEGER PRIMARY KEY,
                session_id  TEXT NOT NULL REFERENCES sessions(id),
                objective   TEXT NOT NULL,
                status      TEXT NOT NULL,
                budget      INTEGER,
                spent       INTEGER NOT NULL DEFAULT 0,
                since_seq   INTEGER,
                continued   INTEGER NOT NULL DEFAULT 0,
                detail      TEXT NOT NULL DEFAULT '',
                created_at  REAL NOT NULL,
                updated_at  REAL NOT NULL,
                ended_at    REAL
            )
            """,
            "CREATE INDEX goals_session ON goals(session_id, id)",
            # A tick is claimed (next_at advanced, or the job finished) in the
            # same transaction that queues its prompt: never delivered twice.
            """
            CREATE TABLE schedules (
                id          INTEGER PRIMARY KEY,
                session_id  TEXT NOT NULL REFERENCES sessions(id),
                label       TEXT,
                prompt      TEXT NOT NULL,
                spec        TEXT NOT NULL,
                mode        TEXT NOT NULL,
                status      TEXT NOT NULL,
                next_at     REAL,
                last_at     REAL,
                fired       INTEGER NOT NULL DEFAULT 0,
                missed      INTEGER NOT NULL DEFAULT 0,
                created_by  TEXT NOT NULL,
                detail      TEXT NOT NULL DEFAULT '',
                created_at  REAL NOT NULL,
                updated_at  REAL NOT NULL
            )
            """,
            "CREATE INDEX schedules_due ON schedules(status, next_at)",
            "CREATE INDEX schedules_session ON schedules(session_id, id)",
            """
            CREATE UNIQUE INDEX schedules_label ON schedules(session_id, label)
            WHERE status = 'active' AND label IS NOT NULL
            """,
        ),
    )


MIGRATIONS: tuple[Migration, ...] = tuple(_REGISTRY)
"""Every migration this recursa knows, in version order."""

LATEST_VERSION: int = MIGRATIONS[-1].version
"""The schema version a store has after :func:`migrate`."""


def migrate(
    conn: sqlite3.Connection,
    *,
    where: str,
    clock: Callable[[], float],
    migrations: Sequence[Migration] = MIGRATIONS,
) -> tuple[int, ...]:
    """Apply the migrations ``conn``'s database has not recorded; return their versions.

    ``conn`` must be in autocommit mode (no open transaction). ``where`` names
    the database in error messages; ``clock`` stamps ``applied_at``.

    Raises :class:`StoreError` when the database records a version newer than
    any in ``migrations``, when it is a SQLite file belonging to something else,
    or when a migration fails (that migration is rolled back; earlier ones stay).
    """
    try:
        _ensure_table(conn, where)
        recorded = {m.version for m in applied_migrations(conn)}
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the schema of {where}: {one_line(exc)}") from exc
    known = max((m.version for m in migrations), default=0)
    newest = max(recorded, default=0)
    if newest > known:
        raise StoreError(
            f"{where} was written by a newer recursa (schema version {newest}, this one "
            f"knows up to {known}); upgrade recursa to use it"
        )
    done: list[int] = []
    for step in sorted(migrations, key=lambda m: m.version):
        if step.version in recorded:
            continue
        if _apply_one(conn, step, where=where, clock=clock):
            done.append(step.version)
    return tuple(done)


def _apply_one(
    conn: sqlite3.Connection, step: Migration, *, where: str, clock: Callable[[], float]
) -> bool:
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while we waited for the write lock.
            if conn.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (step.version,)
            ).fetchone():
                conn.execute("ROLLBACK")
                return False
            step.apply(conn)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (step.version, step.name, clock()),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise StoreError(
            f"migration {step.version} ({step.name}) of {where} failed: {one_line(exc)}"
        ) from exc
    return True


def _ensure_table(conn: sqlite3.Connection, where: str) -> None:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists:
        return
    # Adding our tables to another program's database would damage both.
    foreign = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    ).fetchone()[0]
    if foreign:
        raise StoreError(f"{where} is a SQLite database but not a recursa store")
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version     INTEGER PRIMARY KEY,
            name        TEXT NOT NULL,
            applied_at  REAL NOT NULL
        )
        """
    )


def applied_migrations(conn: sqlite3.Connection) -> list[AppliedMigration]:
    """The recorded migrations in version order (empty before the first :func:`migrate`)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if not exists:
        return []
    rows = conn.execute(
        "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
    ).fetchall()
    return [AppliedMigration(int(v), str(n), float(t)) for v, n, t in rows]


__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "AppliedMigration",
    "Migration",
    "applied_migrations",
    "migrate",
]

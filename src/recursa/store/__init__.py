"""The store: one SQLite database in WAL mode under ``RECURSA_HOME``, one writer.

:class:`Store` holds sessions, the append-only event log, usage per model
call and the full text of cell outputs; ``store.inbox`` the durable inbox,
``store.commands`` and ``store.kernels`` the ledgers a daemon needs to survive
a crash. It is owned by the asyncio thread;
see :mod:`recursa.store.store` for the invariants it keeps, and
:mod:`recursa.store.migrations` for how the schema changes between versions.
"""

from recursa.store.db import DB_FILE_NAME
from recursa.store.inbox import MessageKind, MessageMode, MessageRow, MessageStatus
from recursa.store.ledger import CommandRow, CommandStatus, KernelRow
from recursa.store.migrations import (
    LATEST_VERSION,
    AppliedMigration,
    Migration,
    applied_migrations,
)
from recursa.store.rows import (
    SESSION_ID_PREFIX,
    JSONValue,
    SessionIds,
    SessionRow,
    UsageTotals,
    new_session_id,
)
from recursa.store.sessions import MAX_NAME_CHARS
from recursa.store.store import Store

__all__ = [
    "DB_FILE_NAME",
    "LATEST_VERSION",
    "MAX_NAME_CHARS",
    "SESSION_ID_PREFIX",
    "AppliedMigration",
    "CommandRow",
    "CommandStatus",
    "JSONValue",
    "KernelRow",
    "MessageKind",
    "MessageMode",
    "MessageRow",
    "MessageStatus",
    "Migration",
    "SessionIds",
    "SessionRow",
    "Store",
    "UsageTotals",
    "applied_migrations",
    "new_session_id",
]

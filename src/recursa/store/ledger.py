"""Two small ledgers a daemon keeps to survive a crash.

:class:`Commands` makes client commands idempotent. A command is identified
by ``(client_id, command_id)``. Its row is ``pending`` from when its effect
starts until the effect is done, then ``done`` with the result. Whoever runs
a command calls :meth:`Commands.begin` first:

- a new command is recorded ``pending`` and runs;
- a repeated ``done`` command gets its stored result and does not run again;
- a repeated ``pending`` command is *uncertain*: its effect may or may not
  have happened before a crash, and it is never run again.

When the effect is a few synchronous store writes, begin, effect and finish
go in one transaction and the command can never be left uncertain.

:class:`KernelRecords` remembers each session's kernel process, so a daemon
restarted after a crash can find live kernels and reattach to them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from recursa.store.rows import JSONValue

if TYPE_CHECKING:
    from recursa.store.store import Store

CommandStatus = Literal["pending", "done"]


@dataclass(frozen=True, slots=True)
class CommandRow:
    client_id: str
    command_id: str
    kind: str
    status: CommandStatus
    result: JSONValue
    created_at: float
    finished_at: float | None


class Commands:
    """Use through ``store.commands``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def get(self, client_id: str, command_id: str) -> CommandRow | None:
        row = self._store.execute(
            "SELECT client_id, command_id, kind, status, result, created_at, finished_at"
            " FROM commands WHERE client_id = ? AND command_id = ?",
            (client_id, command_id),
        ).fetchone()
        if row is None:
            return None
        result = json.loads(row[4]) if row[4] is not None else None
        return CommandRow(row[0], row[1], row[2], row[3], result, row[5], row[6])

    def begin(self, client_id: str, command_id: str, kind: str) -> CommandRow | None:
        """Record a new command as pending and return None; or return the row of
        a command seen before (``done``: its result; ``pending``: uncertain)."""
        with self._store.transaction():
            seen = self.get(client_id, command_id)
            if seen is not None:
                return seen
            self._store.execute(
                "INSERT INTO commands (client_id, command_id, kind, status, created_at)"
                " VALUES (?, ?, ?, 'pending', ?)",
                (client_id, command_id, kind, self._store.now()),
            )
        return None

    def finish(self, client_id: str, command_id: str, result: JSONValue) -> None:
        """Mark a pending command done with its result."""
        with self._store.transaction():
            self._store.execute(
                "UPDATE commands SET status = 'done', result = ?, finished_at = ?"
                " WHERE client_id = ? AND command_id = ?",
                (json.dumps(result, ensure_ascii=False), self._store.now(), client_id, command_id),
            )


@dataclass(frozen=True, slots=True)
class KernelRow:
    session_id: str
    pid: int
    connection_file: str
    started_at: float


class KernelRecords:
    """Use through ``store.kernels``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def record(self, session_id: str, pid: int, connection_file: str) -> None:
        """Remember ``session_id``'s kernel process (replacing an earlier one)."""
        with self._store.transaction():
            self._store.execute(
                "INSERT OR REPLACE INTO kernels (session_id, pid, connection_file, started_at)"
                " VALUES (?, ?, ?, ?)",
                (session_id, pid, connection_file, self._store.now()),
                missing=session_id,
            )

    def get(self, session_id: str) -> KernelRow | None:
        row = self._store.execute(
            "SELECT session_id, pid, connection_file, started_at FROM kernels WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        return None if row is None else KernelRow(*row)

    def all(self) -> list[KernelRow]:
        rows = self._store.execute(
            "SELECT session_id, pid, connection_file, started_at FROM kernels ORDER BY session_id"
        ).fetchall()
        return [KernelRow(*row) for row in rows]

    def forget(self, session_id: str) -> None:
        """The session's kernel was stopped on purpose: nothing to reattach to."""
        with self._store.transaction():
            self._store.execute("DELETE FROM kernels WHERE session_id = ?", (session_id,))


class KernelTokens:
    """Tokens a session's kernel speaks to the daemon with (use ``store.tokens``).

    :meth:`mint` returns a fresh token and keeps only its hash; the daemon
    maps a request's token to its session with :meth:`session_of`. A session
    may hold several (a kernel reattached after a crash keeps its own);
    :meth:`revoke` drops them all, for a session deleted or unloaded.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def mint(self, session_id: str) -> str:
        token = secrets.token_urlsafe(32)
        with self._store.transaction():
            self._store.execute(
                "INSERT INTO kernel_tokens (token_hash, session_id, created_at) VALUES (?, ?, ?)",
                (_digest(token), session_id, self._store.now()),
                missing=session_id,
            )
        return token

    def session_of(self, token: str) -> str | None:
        row = self._store.execute(
            "SELECT session_id FROM kernel_tokens WHERE token_hash = ?", (_digest(token),)
        ).fetchone()
        return None if row is None else str(row[0])

    def revoke(self, session_id: str) -> None:
        with self._store.transaction():
            self._store.execute("DELETE FROM kernel_tokens WHERE session_id = ?", (session_id,))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


__all__ = ["CommandRow", "CommandStatus", "Commands", "KernelRecords", "KernelRow", "KernelTokens"]

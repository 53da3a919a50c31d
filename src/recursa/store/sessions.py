"""The ``sessions`` table: checking, writing, finding and decoding session rows.

Plain functions over a connection, and :class:`SessionMethods`, the part of
:class:`~recursa.store.store.Store` that calls them and owns what they do
not: the clock, and turning a stray ``sqlite3.Error`` into a
:class:`~recursa.errors.StoreError`. The errors the functions raise
themselves are already the store's own, one line each.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Literal, cast

from recursa.errors import NotFound, StoreError
from recursa.protocol.events import SessionStatus
from recursa.store.connection import StoreConnection
from recursa.store.db import translated
from recursa.store.rows import SESSION_STATUSES, JSONValue, SessionRow, new_session_id

MAX_NAME_CHARS = 100
"""The longest session name accepted."""

ID_ATTEMPTS = 5
"""Ids drawn before giving up on a clash (one clash is already unlikely)."""

COLUMNS = "id, name, parent_id, model, status, cwd, workspace, created_at, updated_at, meta"
_SELECT = f"SELECT {COLUMNS} FROM sessions"
_INSERT = f"INSERT INTO sessions ({COLUMNS}) VALUES ({', '.join('?' * 10)})"


def check_name(name: str | None) -> None:
    """Raise ``ValueError`` unless ``name`` is None or 1-100 printable non-space characters.

    No spaces keeps a name usable as one word on a command line and in an
    address such as ``child:NAME``.
    """
    if name is None:
        return
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"a session name has 1 to {MAX_NAME_CHARS} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in name):
        raise ValueError(f"a session name has no spaces or control characters: {name!r}")


def check_status(status: str) -> None:
    """Raise ``ValueError`` unless ``status`` is a :data:`SessionStatus`."""
    if status not in SESSION_STATUSES:
        raise ValueError(f"unknown session status {status!r}")


def dump_meta(meta: Mapping[str, JSONValue] | None) -> str:
    """``meta`` as compact JSON text (``{}`` for None)."""
    return json.dumps(dict(meta or {}), ensure_ascii=False, separators=(",", ":"))


def insert_session(
    conn: sqlite3.Connection,
    *,
    model: str,
    cwd: str,
    workspace: str,
    name: str | None,
    parent_id: str | None,
    status: SessionStatus,
    meta: Mapping[str, JSONValue] | None,
    now: float,
) -> str:
    """Insert a new session row and return its id.

    Raises ``ValueError`` for a bad name or status, :class:`NotFound` for an
    unknown parent, :class:`StoreError` for a taken name.
    """
    check_name(name)
    check_status(status)
    meta_json = dump_meta(meta)
    for _attempt in range(ID_ATTEMPTS):
        session_id = new_session_id(now=now)
        values = (session_id, name, parent_id, model, status, cwd, workspace, now, now, meta_json)
        try:
            conn.execute(_INSERT, values)
        except sqlite3.IntegrityError as exc:
            code = exc.sqlite_errorname
            if code == "SQLITE_CONSTRAINT_FOREIGNKEY":
                raise NotFound(f"no parent session {parent_id!r}") from exc
            if code == "SQLITE_CONSTRAINT_UNIQUE" and name is not None and _by_name(conn, name):
                raise StoreError(f"a session named {name!r} already exists") from exc
            if code in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"):
                continue  # an id drawn by another process: draw again
            raise
        return session_id
    raise StoreError(f"could not draw a free session id in {ID_ATTEMPTS} attempts")


def find_session(conn: sqlite3.Connection, id_or_name: str) -> SessionRow:
    """The session with this exact id, else this name, else this unique id prefix.

    Raises :class:`NotFound` when none matches or a prefix is ambiguous.
    """
    row = conn.execute(f"{_SELECT} WHERE id = ?", (id_or_name,)).fetchone()
    row = row or _by_name(conn, id_or_name)
    if row is None and id_or_name:
        # A range on the primary key: ids that share the prefix sort together.
        rows = conn.execute(
            f"{_SELECT} WHERE id > ? AND id < ? ORDER BY id LIMIT 2",
            (id_or_name, id_or_name + "\U0010ffff"),
        ).fetchall()
        if len(rows) > 1:
            raise NotFound(f"{id_or_name!r} matches more than one session; give more of the id")
        row = rows[0] if rows else None
    if row is None:
        raise NotFound(f"no session {id_or_name!r}")
    return session_row(row)


def _by_name(conn: sqlite3.Connection, name: str) -> tuple[object, ...] | None:
    row: tuple[object, ...] | None = conn.execute(f"{_SELECT} WHERE name = ?", (name,)).fetchone()
    return row


def list_sessions(
    conn: sqlite3.Connection,
    *,
    parent_id: str | None,
    roots: bool,
    statuses: Collection[SessionStatus] | None,
) -> list[SessionRow]:
    """Sessions in creation order; see :meth:`Store.sessions <recursa.store.Store.sessions>`."""
    if parent_id is not None and roots:
        raise ValueError("give parent_id or roots, not both")
    clauses: list[str] = []
    params: list[object] = []
    if parent_id is not None:
        clauses.append("parent_id = ?")
        params.append(parent_id)
    if roots:
        clauses.append("parent_id IS NULL")
    if statuses is not None:
        wanted = sorted(set(statuses))
        if not wanted:
            return []
        for status in wanted:
            check_status(status)
        clauses.append(f"status IN ({', '.join('?' * len(wanted))})")
        params.extend(wanted)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(f"{_SELECT}{where} ORDER BY created_at, id", params).fetchall()
    return [session_row(row) for row in rows]


def update_fields(
    conn: sqlite3.Connection, session_id: str, fields: Mapping[str, object], *, now: float
) -> SessionRow:
    """Set ``fields`` (already checked and encoded) and ``updated_at``; return the new row.

    Raises :class:`NotFound` for an unknown id, :class:`StoreError` for a taken name.
    """
    assignments = ", ".join(f"{column} = ?" for column in (*fields, "updated_at"))
    try:
        cursor = conn.execute(
            f"UPDATE sessions SET {assignments} WHERE id = ?",
            (*fields.values(), now, session_id),
        )
    except sqlite3.IntegrityError as exc:
        if exc.sqlite_errorname == "SQLITE_CONSTRAINT_UNIQUE":
            raise StoreError(f"a session named {fields.get('name')!r} already exists") from exc
        raise
    if cursor.rowcount == 0:
        raise NotFound(f"no session {session_id!r}")
    row = conn.execute(f"{_SELECT} WHERE id = ?", (session_id,)).fetchone()
    return session_row(row)


def session_row(row: Sequence[object]) -> SessionRow:
    """Decode a row selected with :data:`COLUMNS`."""
    sid, name, parent, model, status, cwd, workspace, created, updated, meta = row
    loaded = json.loads(str(meta))
    return SessionRow(
        id=str(sid),
        name=None if name is None else str(name),
        parent_id=None if parent is None else str(parent),
        model=str(model),
        # A status from a newer writer is passed through, not refused: a reader
        # that cannot name it can still show it.
        status=cast(SessionStatus, status),
        cwd=str(cwd),
        workspace=str(workspace),
        created_at=float(cast(float, created)),
        updated_at=float(cast(float, updated)),
        meta=MappingProxyType(loaded if isinstance(loaded, dict) else {}),
    )


class _Keep(Enum):
    KEEP = "keep"


_KEEP: Literal[_Keep.KEEP] = _Keep.KEEP


class SessionMethods(StoreConnection):
    """Creating, finding, listing and changing sessions (a mixin of ``Store``)."""

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
            session_id = insert_session(
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
            return find_session(conn, session_id)

    def session(self, id_or_name: str) -> SessionRow:
        """The session with this exact id, else this name, else this unique id prefix.

        Raises :class:`NotFound` (one line) when none matches or a prefix is ambiguous.
        """
        conn = self._db()
        with translated(self._where):
            return find_session(conn, id_or_name)

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
            return list_sessions(conn, parent_id=parent_id, roots=roots, statuses=statuses)

    def set_status(self, session_id: str, status: SessionStatus) -> SessionRow:
        """Set a session's status (exact id) and return the new row. Raises :class:`NotFound`.

        The store checks the value, not the transition: the lifecycle belongs
        to the session layer, which also records the transition as an event.
        """
        check_status(status)
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
            check_name(name)
            fields["name"] = name
        if workspace is not None:
            fields["workspace"] = workspace
        if meta is not None:
            fields["meta"] = dump_meta(meta)
        return self._update(session_id, fields)

    def _update(self, session_id: str, fields: Mapping[str, object]) -> SessionRow:
        conn = self._db()
        with translated(self._where):
            return update_fields(conn, session_id, fields, now=self._clock())


__all__ = [
    "COLUMNS",
    "ID_ATTEMPTS",
    "MAX_NAME_CHARS",
    "SessionMethods",
    "check_name",
    "check_status",
    "dump_meta",
    "find_session",
    "insert_session",
    "list_sessions",
    "session_row",
    "update_fields",
]

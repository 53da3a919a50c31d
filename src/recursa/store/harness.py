"""The harness tables: entry versions, staged edits, refinements (use ``store.harness``).

A version row is never changed or deleted (triggers refuse it): the entry's
state is its newest row, and its history is all of them. Staged edits wait
in ``harness_edits`` for their session's next turn boundary; taking them
marks them applied with their result, in the same transaction as the
versions they wrote, so an edit is applied once even across a crash.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from recursa.protocol.harness import (
    Action,
    Actor,
    Edit,
    EntryVersion,
    Kind,
    Scope,
    Status,
)
from recursa.store.table import Table

ENTRY_ID_PREFIX = "h-"

_COLUMNS = (
    "entry_id, version, kind, title, scope, status, content, code, meta, session_id, action,"
    " actor, reason, effect, source_events, refinement_id, review, created_at"
)


@dataclass(frozen=True, slots=True)
class StagedEdit:
    id: int
    session_id: str
    edit: Edit
    created_at: float


@dataclass(frozen=True, slots=True)
class Refinement:
    id: int
    session_id: str
    instructions: str | None
    status: str
    proposals: list[dict[str, Any]]
    detail: str
    created_at: float
    finished_at: float | None


def new_entry_id() -> str:
    return ENTRY_ID_PREFIX + secrets.token_hex(5)


class HarnessTables(Table[EntryVersion]):
    """Use through ``store.harness``."""

    def _row(self, values: Sequence[Any]) -> EntryVersion:
        return _version(values)

    # -- versions ----------------------------------------------------------------------

    def write(self, previous: EntryVersion | None, draft: EntryVersion) -> EntryVersion:
        """Append ``draft`` as the next version of its entry (``previous``: the
        entry's newest, None for a new entry). The version number and the time
        are set here; ``draft``'s own are ignored."""
        version = replace(
            draft,
            version=1 if previous is None else previous.version + 1,
            meta=dict(draft.meta),
            source_events=tuple(draft.source_events),
            created_at=self._store.now(),
        )
        with self._store.transaction():
            self._store.execute(
                f"INSERT INTO harness_entries ({_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    version.entry_id,
                    version.version,
                    version.kind,
                    version.title,
                    version.scope,
                    version.status,
                    version.content,
                    version.code,
                    json.dumps(version.meta),
                    version.session_id,
                    version.action,
                    version.actor,
                    version.reason,
                    version.effect,
                    json.dumps(list(version.source_events)),
                    version.refinement_id,
                    None if version.review is None else json.dumps(version.review),
                    version.created_at,
                ),
            )
        return version

    def current(self, entry_id: str) -> EntryVersion | None:
        return self._one(
            f"SELECT {_COLUMNS} FROM harness_entries WHERE entry_id = ?"
            " ORDER BY version DESC LIMIT 1",
            (entry_id,),
        )

    def version(self, entry_id: str, version: int) -> EntryVersion | None:
        return self._one(
            f"SELECT {_COLUMNS} FROM harness_entries WHERE entry_id = ? AND version = ?",
            (entry_id, version),
        )

    def history(self, entry_id: str) -> list[EntryVersion]:
        return self._all(
            f"SELECT {_COLUMNS} FROM harness_entries WHERE entry_id = ? ORDER BY version",
            (entry_id,),
        )

    def entries(self) -> list[EntryVersion]:
        """Every entry's newest version, oldest entry first."""
        return self._all(
            f"SELECT {_COLUMNS} FROM harness_entries AS h WHERE version ="
            " (SELECT MAX(version) FROM harness_entries WHERE entry_id = h.entry_id)"
            " ORDER BY (SELECT MIN(created_at) FROM harness_entries WHERE entry_id = h.entry_id),"
            " entry_id"
        )

    def log(self, limit: int | None = None) -> list[EntryVersion]:
        """Every version of every entry, newest first."""
        return self._all(
            f"SELECT {_COLUMNS} FROM harness_entries ORDER BY created_at DESC, version DESC"
            + ("" if limit is None else f" LIMIT {int(limit)}")
        )

    def find(self, ref: str) -> EntryVersion | None:
        """An entry by id, unique id prefix, or title (the newest such entry)."""
        found = self.current(ref)
        if found is not None:
            return found
        rows = self._store.execute(
            "SELECT DISTINCT entry_id FROM harness_entries WHERE entry_id LIKE ? ESCAPE '\\'",
            (ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
        ).fetchall()
        if len(rows) == 1:
            return self.current(str(rows[0][0]))
        named = [e for e in self.entries() if e.title == ref]
        return named[-1] if named else None

    # -- staged edits ------------------------------------------------------------------

    def stage(self, session_id: str, edit: Edit) -> int:
        with self._store.transaction():
            cursor = self._store.execute(
                "INSERT INTO harness_edits (session_id, edit, created_at) VALUES (?, ?, ?)",
                (session_id, json.dumps(edit.to_json()), self._store.now()),
                missing=session_id,
            )
        return int(cursor.lastrowid or 0)

    def staged(self, session_id: str | None = None) -> list[StagedEdit]:
        """Edits not applied yet (of one session, or all), in the order staged."""
        where = "applied_at IS NULL" + ("" if session_id is None else " AND session_id = ?")
        rows = self._store.execute(
            f"SELECT id, session_id, edit, created_at FROM harness_edits WHERE {where} ORDER BY id",
            () if session_id is None else (session_id,),
        ).fetchall()
        return [StagedEdit(r[0], r[1], Edit.from_json(json.loads(r[2])), r[3]) for r in rows]

    def mark_applied(self, edit_id: int, result: dict[str, object]) -> None:
        with self._store.transaction():
            self._store.execute(
                "UPDATE harness_edits SET applied_at = ?, result = ? WHERE id = ?",
                (self._store.now(), json.dumps(result), edit_id),
            )

    # -- refinements -------------------------------------------------------------------

    def begin_refinement(self, session_id: str, instructions: str | None) -> int:
        with self._store.transaction():
            cursor = self._store.execute(
                "INSERT INTO refinements (session_id, instructions, status, created_at)"
                " VALUES (?, ?, 'running', ?)",
                (session_id, instructions, self._store.now()),
                missing=session_id,
            )
        return int(cursor.lastrowid or 0)

    def finish_refinement(
        self, refinement_id: int, status: str, proposals: Iterable[dict[str, Any]], detail: str
    ) -> None:
        with self._store.transaction():
            self._store.execute(
                "UPDATE refinements SET status = ?, proposals = ?, detail = ?, finished_at = ?"
                " WHERE id = ?",
                (status, json.dumps(list(proposals)), detail, self._store.now(), refinement_id),
            )

    def refinement(self, refinement_id: int) -> Refinement | None:
        row = self._store.execute(
            "SELECT id, session_id, instructions, status, proposals, detail, created_at,"
            " finished_at FROM refinements WHERE id = ?",
            (refinement_id,),
        ).fetchone()
        if row is None:
            return None
        return Refinement(
            row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7]
        )


def _version(row: Sequence[Any]) -> EntryVersion:
    review = json.loads(row[16]) if row[16] is not None else None
    return EntryVersion(
        entry_id=row[0],
        version=int(row[1]),
        kind=cast(Kind, row[2]),
        title=row[3],
        scope=cast(Scope, row[4]),
        status=cast(Status, row[5]),
        content=row[6],
        code=row[7],
        meta=json.loads(row[8]),
        session_id=row[9],
        action=cast(Action, row[10]),
        actor=cast(Actor, row[11]),
        reason=row[12],
        effect=row[13],
        source_events=tuple(json.loads(row[14])),
        refinement_id=row[15],
        review=review,
        created_at=float(row[17]),
    )


__all__ = [
    "ENTRY_ID_PREFIX",
    "HarnessTables",
    "Refinement",
    "StagedEdit",
    "new_entry_id",
]

"""The schedules table: prompts delivered to a session on a clock (use
``store.schedules``).

A job is ``active`` while it has a next tick (``next_at``), then ``done``
(a one-time job that fired) or ``cancelled``. :meth:`ScheduleTable.claim`
moves a due job to its next tick only if nobody moved it since it was read;
the scheduler calls it in the same transaction that queues the tick's
prompt, so a tick is delivered once whatever crashes around it.

Parsing a spec and computing ticks is not the store's business
(:mod:`recursa.control.schedule`); the store keeps the canonical ``spec``
text and the times it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recursa.errors import NotFound
from recursa.protocol.control import ScheduleCreator, ScheduleMode, ScheduleStatus
from recursa.protocol.events import json_text
from recursa.store.table import Table, with_text

_COLUMNS = (
    "id, session_id, label, prompt, spec, mode, status, next_at, last_at, fired, missed,"
    " created_by, detail, created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    id: int
    session_id: str
    label: str | None
    prompt: str
    spec: str
    mode: ScheduleMode
    status: ScheduleStatus
    next_at: float | None
    last_at: float | None
    fired: int
    missed: int
    created_by: ScheduleCreator
    detail: str
    created_at: float
    updated_at: float


class ScheduleTable(Table[ScheduleRow]):
    """Use through ``store.schedules``."""

    def _row(self, values: Sequence[object]) -> ScheduleRow:
        return with_text(ScheduleRow, values, 3)  # the prompt

    def add(
        self,
        session_id: str,
        *,
        prompt: str,
        spec: str,
        mode: ScheduleMode,
        next_at: float,
        label: str | None = None,
        created_by: ScheduleCreator = "user",
    ) -> ScheduleRow:
        """Store an active job; NotFound for an unknown session."""
        now = self._store.now()
        with self._store.transaction():
            cursor = self._store.execute(
                "INSERT INTO schedules (session_id, label, prompt, spec, mode, status, next_at,"
                " created_by, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?, ?)",
                (session_id, label, json_text(prompt), spec, mode, next_at, created_by, now, now),
                missing=session_id,
            )
        return self.get(int(cursor.lastrowid or 0))

    def get(self, job_id: int) -> ScheduleRow:
        """The job; NotFound (one line) when there is none."""
        job = self._one(f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", (job_id,))
        if job is None:
            raise NotFound(f"no scheduled job {job_id}")
        return job

    def jobs(self, session_id: str | None = None, *, finished: bool = False) -> list[ScheduleRow]:
        """Jobs oldest first: of one session or all; active only unless ``finished``."""
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if not finished:
            clauses.append("status = 'active'")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._all(f"SELECT {_COLUMNS} FROM schedules{where} ORDER BY id", params)

    def labelled(self, session_id: str, label: str) -> ScheduleRow | None:
        """The session's active job with this label."""
        return self._one(
            f"SELECT {_COLUMNS} FROM schedules WHERE session_id = ? AND label = ?"
            " AND status = 'active'",
            (session_id, label),
        )

    def due(self, now: float) -> list[ScheduleRow]:
        """Active jobs whose next tick is at or before ``now``, earliest first."""
        return self._all(
            f"SELECT {_COLUMNS} FROM schedules WHERE status = 'active' AND next_at <= ?"
            " ORDER BY next_at, id",
            (now,),
        )

    def next_due(self) -> float | None:
        """The earliest next tick of any active job."""
        row = self._store.execute(
            "SELECT min(next_at) FROM schedules WHERE status = 'active'"
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def claim(self, job: ScheduleRow, *, next_at: float | None, missed: int, now: float) -> bool:
        """Take the tick of ``job`` as read: count it fired (and ``missed`` more
        coalesced into it) and move it to ``next_at`` (None: it is done). False,
        changing nothing, when the job moved on since it was read."""
        cursor = self._store.execute(
            "UPDATE schedules SET next_at = ?, status = ?, last_at = ?, fired = fired + 1,"
            " missed = missed + ?, updated_at = ?"
            " WHERE id = ? AND status = 'active' AND next_at = ?",
            (
                next_at,
                "active" if next_at is not None else "done",
                now,
                missed,
                now,
                job.id,
                job.next_at,
            ),
        )
        return cursor.rowcount == 1

    def update(
        self,
        job_id: int,
        *,
        prompt: str | None = None,
        spec: str | None = None,
        next_at: float | None = None,
        mode: ScheduleMode | None = None,
        label: str | None = None,
    ) -> ScheduleRow:
        """Change the fields given of an active job."""
        fields: dict[str, object] = {}
        if prompt is not None:
            fields["prompt"] = json_text(prompt)
        if spec is not None:
            fields["spec"] = spec
        if next_at is not None:
            fields["next_at"] = next_at
        if mode is not None:
            fields["mode"] = mode
        if label is not None:
            fields["label"] = label
        fields["updated_at"] = self._store.now()
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self._store.transaction():
            self.get(job_id)
            self._store.execute(
                f"UPDATE schedules SET {assignments} WHERE id = ?", (*fields.values(), job_id)
            )
        return self.get(job_id)

    def finish(self, job_id: int, status: ScheduleStatus, detail: str = "") -> ScheduleRow:
        """End a job (``cancelled`` or ``done``); it has no next tick any more."""
        with self._store.transaction():
            self.get(job_id)
            self._store.execute(
                "UPDATE schedules SET status = ?, next_at = NULL, detail = ?, updated_at = ?"
                " WHERE id = ?",
                (status, detail, self._store.now(), job_id),
            )
        return self.get(job_id)


__all__ = ["ScheduleRow", "ScheduleTable"]

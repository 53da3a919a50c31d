"""The scheduler: heartbeats, one-time and cron prompts, delivered on a clock.

A job (``store.schedules``) says which session gets which prompt when
(:mod:`recursa.control.schedule` parses its spec and computes its ticks).
:meth:`Scheduler.tick` delivers what is due at ``now``; the daemon's host
runs :meth:`Scheduler.run`, which calls it when the next job comes due (or
a job changed), by an injected wall clock. Tests call ``tick(now)`` with
the time they want.

Exactly once. For each due job, one savepoint of one transaction claims the
tick (moves ``next_at`` past ``now``, or finishes a one-time job) *and*
queues its prompt in the session's durable inbox. A crash before the commit
leaves the tick due, with nothing queued: the next tick delivers it. After
the commit the prompt is queued, and the inbox delivers it exactly once (the
session takes it now, or when it is next loaded or recovered). So a crash
never delivers a tick twice, and never loses one either. Whatever runs after
the commit (the session starting its turn) is not part of the tick.

Missed ticks coalesce: a job that came due several times while no daemon ran
fires once, with a line saying how many ticks it stands for, and moves to
its first tick after ``now``.

Jobs a model makes with ``heartbeat.create`` are its own: it may update and
delete those; a person's jobs are listed to it but changed only by a person.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from typing import TYPE_CHECKING

from recursa.control import schedule as plan
from recursa.errors import ModelUnavailable, NotFound, UsageError
from recursa.protocol.control import (
    AddSchedule,
    ScheduleCreator,
    ScheduleInfo,
    UpdateSchedule,
)
from recursa.store.schedules import ScheduleRow

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime

log = logging.getLogger("recursa.runtime")

MAX_MODEL_JOBS = 20
"""Active schedules a model may keep for its session (a person's are not counted)."""
CHECK_SECONDS = 30.0
"""The longest the scheduler sleeps without looking (a job added elsewhere,
a wall clock that jumped)."""
MIN_WAIT_SECONDS = 1.0
"""The shortest wait between ticks, so a job that cannot be delivered does
not spin the loop."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One tick delivered: the job, its session, the message queued for it,
    when the tick was due, and how many missed ticks it stands for."""

    job: int
    session_id: str
    message_id: int
    due_at: float
    missed: int


class Scheduler:
    """Every session's scheduled prompts. ``wall`` is the clock (unix seconds)
    that :meth:`run` and new jobs read; ``tz`` where cron is evaluated (None:
    the machine's local time)."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        wall: Callable[[], float] = time.time,
        tz: tzinfo | None = None,
    ) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.wall = wall
        self.tz = tz
        self.changed = asyncio.Event()
        """Set when a job is added or changed: :meth:`run` looks again at once."""

    # ---------------------------------------------------------------- jobs

    def add(
        self,
        session_id: str,
        request: AddSchedule,
        *,
        by: ScheduleCreator = "user",
        now: float | None = None,
    ) -> ScheduleInfo:
        """Schedule ``request.prompt`` for the session; its first tick is
        computed from ``now`` (default: the wall clock). UsageError for a bad
        spec, prompt, mode or label, or a deleted session."""
        try:
            spec = plan.parse(request.spec)
            prompt = plan.check_prompt(request.prompt)
            mode = plan.check_mode(request.mode)
            label = plan.check_label(request.label)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        row = self.store.session(session_id)
        if row.status == "deleted":
            raise UsageError(f"session {row.id} was deleted")
        at = self.wall() if now is None else now
        first = self._first_at(spec, at)
        mine = [j for j in self.jobs(row.id) if j.created_by == "model"]
        if by == "model" and len(mine) >= MAX_MODEL_JOBS:
            raise UsageError(
                f"a session may keep {MAX_MODEL_JOBS} active schedules; delete one first"
            )
        with self.store.transaction():
            self._free(row.id, label)
            job = self.store.schedules.add(
                row.id,
                prompt=prompt,
                spec=spec.text,
                mode=mode,
                next_at=first,
                label=label,
                created_by=by,
            )
        self.changed.set()
        return self.describe(job)

    def _first_at(self, spec: plan.Spec, at: float) -> float:
        """The spec's first time after ``at``; UsageError for one that never
        comes (a cron expression for the 30th of February)."""
        try:
            return plan.first_at(spec, at, tz=self.tz)
        except Exception as exc:  # croniter's own errors for impossible dates
            raise UsageError(f"the schedule {spec.text!r} never comes due ({exc})") from None

    def jobs(self, session_id: str | None = None, *, finished: bool = False) -> list[ScheduleInfo]:
        """Jobs oldest first, of one session or all; active ones unless ``finished``."""
        return [
            self.describe(job) for job in self.store.schedules.jobs(session_id, finished=finished)
        ]

    def find(self, session_id: str, ref: str) -> ScheduleRow:
        """The session's job by id or label; NotFound otherwise."""
        job: ScheduleRow | None = None
        if ref.isdigit():
            with contextlib.suppress(NotFound):
                job = self.store.schedules.get(int(ref))
        else:
            job = self.store.schedules.labelled(session_id, ref)
        if job is None or job.session_id != session_id:
            raise NotFound(f"no scheduled job {ref!r} for this session")
        return job

    def update(
        self,
        session_id: str,
        ref: str,
        request: UpdateSchedule,
        *,
        by: ScheduleCreator = "model",
        now: float | None = None,
    ) -> ScheduleInfo:
        """Change the session's job ``ref`` (id or label); a new spec restarts its
        clock from ``now``."""
        job = self._own(session_id, ref, by)
        try:
            spec = None if request.spec is None else plan.parse(request.spec)
            prompt = None if request.prompt is None else plan.check_prompt(request.prompt)
            mode = None if request.mode is None else plan.check_mode(request.mode)
            label = plan.check_label(request.label)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if spec is None and prompt is None and mode is None and label is None:
            raise UsageError("nothing to change: give prompt, every, cron, mode or label")
        at = self.wall() if now is None else now
        first = None if spec is None else self._first_at(spec, at)
        with self.store.transaction():
            if label is not None and label != job.label:
                self._free(session_id, label)
            changed = self.store.schedules.update(
                job.id,
                prompt=prompt,
                spec=None if spec is None else spec.text,
                next_at=first,
                mode=mode,
                label=label,
            )
        self.changed.set()
        return self.describe(changed)

    def cancel(
        self, job_id: int, *, session_id: str | None = None, by: ScheduleCreator = "user"
    ) -> ScheduleInfo:
        """Cancel a job (one of ``session_id``'s, when given). Cancelling a job
        that already ended changes nothing."""
        if session_id is not None:
            job = self._own(session_id, str(job_id), by)
        else:
            job = self.store.schedules.get(job_id)
        if job.status != "active":
            return self.describe(job)
        who = "a person" if by == "user" else "the agent"
        cancelled = self.store.schedules.finish(job.id, "cancelled", f"cancelled by {who}")
        self.changed.set()
        return self.describe(cancelled)

    def describe(self, job: ScheduleRow) -> ScheduleInfo:
        try:
            kind: str = plan.parse(job.spec).kind
        except ValueError:
            kind = "unknown"
        return ScheduleInfo(
            id=job.id,
            session_id=job.session_id,
            label=job.label,
            prompt=job.prompt,
            spec=job.spec,
            kind=kind,
            mode=job.mode,
            status=job.status,
            next_at=job.next_at,
            last_at=job.last_at,
            fired=job.fired,
            missed=job.missed,
            created_by=job.created_by,
            detail=job.detail,
            created_at=job.created_at,
        )

    def _own(self, session_id: str, ref: str, by: ScheduleCreator) -> ScheduleRow:
        job = self.find(session_id, ref)
        if by == "model" and job.created_by != "model":
            raise UsageError(
                f"job {job.id} was scheduled by a person; only a person changes it "
                "(recursa schedule cancel)"
            )
        if job.status != "active":
            raise UsageError(f"job {job.id} is {job.status}")
        return job

    def _free(self, session_id: str, label: str | None) -> None:
        if label is not None and self.store.schedules.labelled(session_id, label) is not None:
            raise UsageError(f"this session already has a scheduled job labelled {label!r}")

    # --------------------------------------------------------------- ticks

    def tick(self, now: float | None = None) -> list[Delivery]:
        """Deliver every tick due at ``now`` (default: the wall clock), each
        claimed and queued together (see the module docstring)."""
        at = self.wall() if now is None else now
        deliveries: list[Delivery] = []
        with self.store.transaction():
            for job in self.store.schedules.due(at):
                try:
                    with self.store.transaction():  # this job's claim and prompt, or neither
                        delivery = self._fire(job, at)
                except Exception:
                    log.exception("scheduled job %d: delivering its tick failed", job.id)
                    continue
                if delivery is not None:
                    deliveries.append(delivery)
        return deliveries

    def _fire(self, job: ScheduleRow, now: float) -> Delivery | None:
        assert job.next_at is not None  # due() returns active jobs, which have one
        try:
            spec = plan.parse(job.spec)
        except ValueError as exc:
            self.store.schedules.finish(job.id, "cancelled", f"its schedule is unreadable: {exc}")
            return None
        tick = plan.advance(spec, job.next_at, now, tz=self.tz)
        if tick is None:
            return None
        if self.store.session(job.session_id).status == "deleted":
            self.store.schedules.finish(job.id, "cancelled", "its session was deleted")
            return None
        if not self.store.schedules.claim(job, next_at=tick.next_at, missed=tick.missed, now=now):
            return None  # claimed by someone else since it was read
        sender = f"schedule:{job.id}"
        if any(m.sender == sender for m in self.store.inbox.pending(job.session_id)):
            # Its last prompt still waits (the session is busy or cannot load):
            # this tick joins it rather than piling another copy behind it.
            return None
        text = job.prompt
        if tick.missed:
            text += (
                f"\n\n(This stands for {tick.missed + 1} ticks of the schedule {job.spec!r}: "
                f"{tick.missed} more came due while nothing was running to deliver them.)"
            )
        try:
            session = self.runtime.get(job.session_id)
        except ModelUnavailable as exc:
            # Queued all the same: the session takes it when it can load again.
            log.warning("scheduled job %d: session cannot load now: %s", job.id, exc)
            message = self.store.inbox.enqueue(
                job.session_id, text, source="schedule", mode=job.mode, sender=sender
            )
        else:
            message = session.send(text, mode=job.mode, source="schedule", sender=sender)
        return Delivery(job.id, job.session_id, message.id, tick.due_at, tick.missed)

    def next_due(self) -> float | None:
        """When the earliest active job comes due (unix seconds)."""
        return self.store.schedules.next_due()

    async def run(self, *, check: float = CHECK_SECONDS) -> None:
        """Deliver ticks as they come due, until cancelled. Wakes at the next
        job's time, after ``check`` seconds at most, or when a job changes."""
        while True:
            self.changed.clear()
            wait = check
            try:
                self.tick()
                due = self.next_due()
                if due is not None:
                    wait = min(check, due - self.wall())
            except Exception:  # the store failed: try again later, never stop
                log.exception("the scheduler's tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(MIN_WAIT_SECONDS, wait))


__all__ = ["CHECK_SECONDS", "MAX_MODEL_JOBS", "Delivery", "Scheduler"]

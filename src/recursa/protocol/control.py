"""Goals and schedules on the wire: the values clients and kernels send and get.

Their closed sets (a goal's status, a job's mode and status) live here, at
the bottom, so the store, the pure decisions (:mod:`recursa.control`) and
the wire all name them alike. The operations that carry these values are rows
of :mod:`recursa.protocol.person_ops` and :mod:`recursa.protocol.kernel_ops`;
:func:`~recursa.protocol.wire.from_json` and :func:`~recursa.protocol.wire.to_json`
build and read them.
"""

from __future__ import annotations

from typing import Literal

from recursa.protocol.fields import Name, Positive, Text
from recursa.values import frozen

GoalStatus = Literal["active", "paused", "completed", "exhausted", "cleared"]
"""``active``: continued after each turn; ``paused``: kept, not continued;
``completed`` by the agent; ``exhausted``: its budget is spent; ``cleared``:
removed by a person (or replaced by a new goal)."""
GoalAction = Literal["pause", "resume", "clear"]
"""What a person may do to a goal besides setting it."""

ScheduleMode = Literal["steer", "follow_up"]
"""How a tick's prompt is delivered: ``steer`` joins a running turn (or starts
one), ``follow_up`` waits for the running turn to end."""
ScheduleStatus = Literal["active", "done", "cancelled"]
ScheduleCreator = Literal["user", "model"]


@frozen
class GoalInfo:
    """A session's goal. ``used``: tokens (input plus output) of the session's
    whole subtree since the goal was set (until it ended); ``remaining``: of the budget
    (None: no budget); ``continued``: continuation prompts queued so far;
    ``detail``: why it last stopped."""

    id: int
    session_id: str
    objective: str
    status: GoalStatus
    budget: int | None
    used: int
    remaining: int | None
    continued: int
    detail: str
    created_at: float
    updated_at: float
    ended_at: float | None = None


@frozen
class SetGoal:
    """``recursa goal set SESSION OBJECTIVE [--budget TOKENS]``."""

    objective: Text
    budget: Positive | None = None


@frozen
class CompleteGoal:
    """``goal.complete(summary)`` from a kernel."""

    summary: Text = ""


@frozen
class ScheduleInfo:
    """A scheduled job. ``spec`` is its canonical form (``every 10m``, ``in 30m``,
    ``0 9 * * 1-5``); ``next_at`` the next tick (unix seconds; None once
    finished); ``fired`` the ticks delivered; ``missed`` those coalesced
    into another because nobody was running to deliver them."""

    id: int
    session_id: str
    label: str | None
    prompt: str
    spec: str
    kind: str
    mode: ScheduleMode
    status: ScheduleStatus
    next_at: float | None
    last_at: float | None
    fired: int
    missed: int
    created_by: ScheduleCreator
    detail: str
    created_at: float


@frozen
class AddSchedule:
    """``recursa schedule add SESSION SPEC -- PROMPT`` and ``heartbeat.create``."""

    spec: Name
    prompt: Text
    mode: ScheduleMode = "follow_up"
    label: Name | None = None


@frozen
class UpdateSchedule:
    """``heartbeat.update(job, ...)``: the fields given change; a new ``spec``
    restarts the job's clock from now."""

    prompt: Text | None = None
    spec: Name | None = None
    mode: ScheduleMode | None = None
    label: Name | None = None


__all__ = [
    "AddSchedule",
    "CompleteGoal",
    "GoalAction",
    "GoalInfo",
    "GoalStatus",
    "ScheduleCreator",
    "ScheduleInfo",
    "ScheduleMode",
    "ScheduleStatus",
    "SetGoal",
    "UpdateSchedule",
]

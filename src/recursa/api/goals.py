"""``goal`` and ``heartbeat``: long-horizon controls, from inside a kernel.

A goal is an objective a person gives this session (``recursa goal set``):
after every turn the session is asked to continue toward it, until the
model calls ``goal.complete()``, a person pauses it, or its token budget is
spent. ``heartbeat`` schedules prompts to this session: every so often, once
after a delay, or on a cron schedule. The daemon derives the caller from
the kernel's token; both objects act on the caller's own session.

Arguments are checked here, before any request (TypeError, ValueError); what
they mean (a cron expression, an interval too short) is the daemon's to
judge, and comes back as a one-line UsageError.
"""

from __future__ import annotations

import math
from typing import Any

from recursa.api import client
from recursa.api.client import optional_text_arg as _optional_text
from recursa.api.client import text_arg as _text

Info = dict[str, Any]
"""A goal: id, objective, status, budget, used, remaining, continued, detail, ...
A job: id, label, prompt, spec, kind, mode, status, next_at, fired, missed, created_by, ..."""

MODES = ("steer", "follow_up")


class GoalApi:
    """Your goal, if a person gave you one.

    ``await goal.get()``
        ``None``, or ``{"objective", "status", "budget", "used", "remaining", ...}``:
        ``status`` is active, paused, completed or exhausted; ``used`` and
        ``remaining`` count tokens (input plus output) of you and your sub-agents.
    ``await goal.complete(summary="")``
        The goal is achieved: you are not asked to continue after this turn.
        Call it only when the objective is fully met; then give your final answer.
    """

    async def get(self) -> Info | None:
        """Your current goal, or None."""
        __tracebackhide__ = True
        what = "goal.get()"
        data = await client.run("caller_goal", what=what)
        return None if data is None else _goal(data, what)

    async def complete(self, summary: str = "") -> Info:
        """Mark your goal completed (effective at once); ``summary`` is logged with it."""
        __tracebackhide__ = True
        if not isinstance(summary, str):
            raise TypeError(f"summary must be a str, not {type(summary).__name__}")
        what = "goal.complete()"
        data = await client.run("complete_goal", {"summary": summary}, what=what)
        return _goal(data, what)

    def __repr__(self) -> str:
        return "<goal: await goal.get(), await goal.complete(summary=''); help(goal)>"


class HeartbeatApi:
    """Prompts delivered to you later, on a schedule (they survive restarts).

    ``await heartbeat.create(prompt, *, every=None, cron=None, after=None, label=None,
    mode="follow_up")``
        Exactly one of ``every`` (an interval: ``"10m"``, ``"1h30m"`` or seconds;
        at least a minute), ``after`` (once, that long from now) or ``cron``
        (``"0 9 * * 1-5"``, the machine's local time). ``mode``: ``"follow_up"``
        waits for your running turn to end; ``"steer"`` joins it. Ticks missed
        while the daemon was down are delivered once, not one by one.
    ``await heartbeat.list()``                 your active jobs (a person's too)
    ``await heartbeat.update(job, *, prompt=None, every=None, cron=None, after=None,
    label=None, mode=None)``   a new schedule restarts from now
    ``await heartbeat.delete(job)``            cancel it

    ``job`` is a job's id or label. You may change and delete only the jobs you
    created; a person's are changed by a person.
    """

    async def create(
        self,
        prompt: str,
        *,
        every: str | float | None = None,
        cron: str | None = None,
        after: str | float | None = None,
        label: str | None = None,
        mode: str = "follow_up",
    ) -> Info:
        """Schedule ``prompt`` for this session; returns the job."""
        __tracebackhide__ = True
        spec = _spec(every, cron, after)
        if spec is None:
            raise ValueError("give exactly one of every=, cron= or after=")
        body = {
            "prompt": _text(prompt, "prompt"),
            "spec": spec,
            "label": _optional_text(label, "label"),
            "mode": _mode(mode),
        }
        what = "heartbeat.create()"
        return _job(await client.run("heartbeat_create", body, what=what), what)

    async def list(self) -> list[Info]:
        """Your active jobs, oldest first."""
        __tracebackhide__ = True
        what = "heartbeat.list()"
        data = await client.run("heartbeat_list", what=what)
        if not isinstance(data, list):
            raise client.malformed(what)
        return [_job(item, what) for item in data]

    async def update(
        self,
        job: int | str,
        *,
        prompt: str | None = None,
        every: str | float | None = None,
        cron: str | None = None,
        after: str | float | None = None,
        label: str | None = None,
        mode: str | None = None,
    ) -> Info:
        """Change the fields given of one of your jobs."""
        __tracebackhide__ = True
        body = {
            "prompt": None if prompt is None else _text(prompt, "prompt"),
            "spec": _spec(every, cron, after),
            "label": _optional_text(label, "label"),
            "mode": None if mode is None else _mode(mode),
        }
        if all(value is None for value in body.values()):
            raise ValueError("nothing to change: give prompt, every, cron, after, label or mode")
        what = "heartbeat.update()"
        return _job(
            await client.run("heartbeat_update", {"job": _job_ref(job), **body}, what=what), what
        )

    async def delete(self, job: int | str) -> Info:
        """Cancel one of your jobs; returns it, cancelled."""
        __tracebackhide__ = True
        what = "heartbeat.delete()"
        return _job(await client.run("heartbeat_delete", {"job": _job_ref(job)}, what=what), what)

    def __repr__(self) -> str:
        return (
            "<heartbeat: await heartbeat.create(prompt, every='10m' | cron='0 9 * * 1-5' | "
            "after='30m', label=None, mode='follow_up'), .list(), .update(job, ...), "
            ".delete(job); help(heartbeat)>"
        )


def _spec(every: object, cron: object, after: object) -> str | None:
    given = [(name, value) for name, value in (("every", every), ("cron", cron), ("after", after))]
    chosen = [(name, value) for name, value in given if value is not None]
    if not chosen:
        return None
    if len(chosen) > 1:
        raise ValueError(
            f"give one of every=, cron= or after=, not {' and '.join(n for n, _ in chosen)}"
        )
    name, value = chosen[0]
    if name == "cron":
        return _text(value, "cron")
    word = "every" if name == "every" else "in"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"{name} must be a duration such as '10m', or seconds; not {value!r}")
    if isinstance(value, str):
        return f"{word} {_text(value, name)}"
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    text = str(int(seconds)) if seconds == int(seconds) else f"{seconds:.3f}".rstrip("0")
    return f"{word} {text}s"


def _mode(mode: object) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be 'steer' or 'follow_up', not {mode!r}")
    return str(mode)


def _job_ref(job: object) -> str:
    if isinstance(job, bool) or not isinstance(job, int | str):
        raise TypeError(f"job must be a job's id (int) or label (str), not {type(job).__name__}")
    ref = str(job).strip()
    if not ref:
        raise ValueError("job is empty")
    return ref


def _goal(data: object, what: str) -> Info:
    from recursa.protocol.control import GoalInfo

    client.decode(GoalInfo, data, what)  # checked; the JSON itself is returned
    assert isinstance(data, dict)
    return data


def _job(data: object, what: str) -> Info:
    from recursa.protocol.control import ScheduleInfo

    client.decode(ScheduleInfo, data, what)
    assert isinstance(data, dict)
    return data


goal = GoalApi()
heartbeat = HeartbeatApi()

__all__ = ["GoalApi", "HeartbeatApi", "goal", "heartbeat"]

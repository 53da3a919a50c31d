"""Schedules as pure decisions: parse a spec, say when it fires next, and
coalesce the ticks a stopped daemon missed.

A spec is one of three forms::

    every 10m         an interval (heartbeat); the first tick is one interval from now
    in 30m            once, that long from now
    0 9 * * 1-5       a five-field cron expression (or @hourly, @daily, ...)

Durations are read by :mod:`recursa.duration` (numbers with units, run together
or spaced: ``90s``, ``10m``, ``1h30m``, ``2 hours``, ``1d``); a spec's duration
carries a unit. No interval may be shorter than
:data:`MIN_INTERVAL_SECONDS`: every tick starts a model turn.

Cron expressions are evaluated by ``croniter`` in the local time of the
machine (``tz=None``; daylight-saving changes included) or in the ``tz``
given (tests pin UTC). Times in and out are unix seconds.

Coalescing: :func:`advance` is asked about a job whose tick ``due_at`` has
come. However many ticks passed since (the daemon was down for hours), it
fires once, says how many it swallowed (``missed``), and moves the next
tick to the first one strictly after ``now``. An interval keeps its phase
(``due_at + k * interval``); a one-time job is finished.

Nothing here touches the store or reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Literal

from recursa.duration import format_duration, is_bare_number, parse_duration
from recursa.errors import one_line
from recursa.protocol.control import ScheduleMode
from recursa.validation import checked_text

ScheduleKind = Literal["every", "once", "cron"]
SCHEDULE_MODES: tuple[ScheduleMode, ...] = ("steer", "follow_up")

MIN_INTERVAL_SECONDS = 60.0
"""The shortest interval (and the soonest one-time tick): each tick is a model turn."""
MAX_DURATION_SECONDS = 366 * 86_400.0
"""The longest interval or delay: a year and a day."""
MAX_MISSED_COUNT = 1_000
"""Counting missed cron ticks stops here (``* * * * *`` over a month is 43,200;
each is a croniter step, and the count is only reported)."""
MAX_SPEC_CHARS = 200
MAX_PROMPT_CHARS = 20_000
MAX_LABEL_CHARS = 80

_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

FORMS = '"every 10m", "in 30m" or a cron expression such as "0 9 * * 1-5"'


@dataclass(frozen=True, slots=True)
class Spec:
    """A parsed spec. ``text`` is its canonical form (what is stored and shown);
    ``seconds`` the interval or delay (``every``, ``once``); ``cron`` the expression."""

    kind: ScheduleKind
    text: str
    seconds: float = 0.0
    cron: str = ""


@dataclass(frozen=True, slots=True)
class Tick:
    """A due job's tick: fire once now. ``missed``: further ticks that came due
    before ``now`` and are coalesced into this one; ``next_at``: the next tick,
    after ``now`` (None: the job is finished)."""

    due_at: float
    missed: int
    next_at: float | None


def parse(text: str) -> Spec:
    """The spec ``text`` stands for; ``ValueError`` with one line when it is none."""
    if not isinstance(text, str):
        raise ValueError(f"a schedule must be text: {FORMS}")
    cleaned = one_line(text)
    if not cleaned:
        raise ValueError(f"the schedule is empty: give {FORMS}")
    if len(cleaned) > MAX_SPEC_CHARS:
        raise ValueError(f"the schedule is longer than {MAX_SPEC_CHARS} characters")
    word, _, rest = cleaned.partition(" ")
    lowered = word.lower()
    if lowered == "every":
        seconds = duration(rest)
        return Spec("every", f"every {format_duration(seconds)}", seconds=seconds)
    if lowered == "in":
        seconds = duration(rest)
        return Spec("once", f"in {format_duration(seconds)}", seconds=seconds)
    return Spec("cron", cleaned, cron=_cron(cleaned))


def duration(text: str | float) -> float:
    """Seconds from ``"10m"``, ``"1h30m"``, ``"90 seconds"`` (or a number of
    seconds; see :mod:`recursa.duration`), checked against the shortest and
    longest allowed. Text must carry a unit: ``every 10`` would be a guess."""
    if isinstance(text, str) and is_bare_number(text):
        raise ValueError(
            f"cannot read the duration {text.strip()!r}: use a number and a unit "
            "(s, m, h, d), e.g. 10m or 1h30m"
        )
    if isinstance(text, str) and not text.strip():
        raise ValueError("a duration is missing: e.g. every 10m, in 2h")
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise ValueError("a duration must be text such as 10m, or a number of seconds")
    seconds = parse_duration(text)
    if seconds < MIN_INTERVAL_SECONDS:
        raise ValueError(
            f"the shortest interval is {format_duration(MIN_INTERVAL_SECONDS)}, not {_plain(text)}"
        )
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"the longest interval is 366d, not {_plain(text)}")
    return seconds


def _plain(value: str | float) -> str:
    return value.strip() if isinstance(value, str) else f"{float(value):g}s"


def _cron(expression: str) -> str:
    from croniter import croniter  # imported on first use: the CLI does not need it to start

    fields = expression.split()
    if expression.startswith("@"):
        if expression.lower() not in _ALIASES:
            raise ValueError(f"unknown cron alias {expression!r}: use one of {', '.join(_ALIASES)}")
        return expression.lower()
    if len(fields) != 5:
        raise ValueError(
            f"{expression!r} is not a schedule: give {FORMS} "
            "(cron has five fields: minute hour day month weekday)"
        )
    if not croniter.is_valid(expression):
        raise ValueError(f"{expression!r} is not a valid cron expression")
    return expression


def first_at(spec: Spec, now: float, *, tz: tzinfo | None = None) -> float:
    """When a job made at ``now`` first fires."""
    if spec.kind == "cron":
        return next_cron(spec.cron, now, tz=tz)
    return now + spec.seconds


def next_cron(expression: str, after: float, *, tz: tzinfo | None = None) -> float:
    """The first time strictly after ``after`` that ``expression`` matches, in
    local time (``tz`` None) or in ``tz``."""
    from croniter import croniter

    start = datetime.fromtimestamp(after, tz)
    following = croniter(expression, start).get_next(datetime)
    assert isinstance(following, datetime)
    return following.timestamp()


def advance(spec: Spec, due_at: float, now: float, *, tz: tzinfo | None = None) -> Tick | None:
    """The tick of a job due at ``due_at``, seen at ``now``: None when it is not
    due yet; else fire once, with the ticks missed since coalesced (see the
    module docstring)."""
    if due_at > now:
        return None
    if spec.kind == "once":
        return Tick(due_at, 0, None)
    if spec.kind == "every":
        missed = math.floor((now - due_at) / spec.seconds)
        following = due_at + (missed + 1) * spec.seconds
        if following <= now:  # float rounding at an exact multiple
            missed, following = missed + 1, following + spec.seconds
        return Tick(due_at, missed, following)
    missed, following = 0, next_cron(spec.cron, due_at, tz=tz)
    while following <= now:
        missed += 1
        if missed >= MAX_MISSED_COUNT:
            following = next_cron(spec.cron, now, tz=tz)
            break
        following = next_cron(spec.cron, following, tz=tz)
    return Tick(due_at, missed, following)


def describe(spec: Spec) -> str:
    """One phrase for a listing: ``every 10m``, ``once``, ``cron 0 9 * * 1-5``."""
    if spec.kind == "once":
        return "once"
    if spec.kind == "every":
        return spec.text
    return f"cron {spec.cron}"


def check_prompt(prompt: object) -> str:
    """A tick's prompt: non-empty text within :data:`MAX_PROMPT_CHARS`."""
    return checked_text(prompt, "prompt", MAX_PROMPT_CHARS)


def check_label(label: object) -> str | None:
    """A job's label: None, or a short name that is not a number (numbers are job ids)."""
    if label is None:
        return None
    if not isinstance(label, str):
        raise ValueError("the label must be text")
    text = label.strip()
    if not text:
        raise ValueError("the label is empty")
    if len(text) > MAX_LABEL_CHARS or not text.isprintable():
        raise ValueError(f"the label must be printable and at most {MAX_LABEL_CHARS} characters")
    if text.isdigit():
        raise ValueError(f"the label {text!r} is a number; numbers name jobs by id")
    return text


def check_mode(mode: object) -> ScheduleMode:
    """``mode`` as a schedule's delivery mode; ``ValueError`` otherwise."""
    if mode == "steer":
        return "steer"
    if mode == "follow_up":
        return "follow_up"
    raise ValueError(f"mode must be steer or follow_up, not {mode!r}")


__all__ = [
    "FORMS",
    "MAX_DURATION_SECONDS",
    "MAX_LABEL_CHARS",
    "MAX_MISSED_COUNT",
    "MAX_PROMPT_CHARS",
    "MIN_INTERVAL_SECONDS",
    "SCHEDULE_MODES",
    "ScheduleKind",
    "ScheduleMode",
    "Spec",
    "Tick",
    "advance",
    "check_label",
    "check_mode",
    "check_prompt",
    "describe",
    "duration",
    "first_at",
    "format_duration",
    "next_cron",
    "parse",
]

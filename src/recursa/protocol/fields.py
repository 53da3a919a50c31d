"""Field types of the values the daemon receives: bounded text, counts, durations.

A request comes from a person's client or from a kernel, that is from code a
model wrote, so every field has a type and a bound. These aliases are plain
``str``, ``int`` and ``float`` to mypy and to the code that reads the values;
the checks they carry (:mod:`recursa.validation`'s markers, which import
nothing) become part of pydantic's schema when
:func:`~recursa.protocol.wire.from_json` validates a request (strictly: ``"5"``
is not 5, ``true`` is not 1). Text that must say something (a task, a
recipient) refuses a blank string; blank instructions are none. What a value
means (an unknown model, a name already taken, a harness entry's own limits)
is judged further in, by the host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from recursa.duration import Duration
from recursa.validation import After, after, length, within

MAX_TEXT_CHARS = 4_000_000
"""A task, a message, an entry's content: bounded by the body's size (16 MiB) anyway."""
MAX_NAME_CHARS = 500
"""A name, a model reference, a session or entry reference, a label, a spec."""
MAX_SESSION_NAME_CHARS = 100
"""A session's own name (see :func:`check_session_name`)."""
MAX_PATH_CHARS = 4096
MAX_COUNT = 10**12
"""Tokens, steps, turns: more is a typo, not a budget."""
MAX_COST = 1_000_000.0
"""USD."""
MAX_SECONDS = 366 * 86_400.0
"""A time limit or timeout: a year and a day."""
MAX_ITEMS = 100
"""Items of a list in a request (gates)."""
MAX_WAIT_SECONDS = 86_400.0
"""The longest wait a long poll may ask for; a client wanting longer asks again."""


def _filled(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _blank_is_none(value: str | None) -> str | None:
    return value if value is not None and value.strip() else None


def _wait(value: float) -> float:
    # Written so that NaN, which compares false with everything, fails too.
    if not 0 <= value <= MAX_WAIT_SECONDS:
        raise ValueError(f"must be from 0 to {MAX_WAIT_SECONDS:g} seconds")
    return value


_SESSION_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_session_name(name: str) -> str:
    """``name`` if it can name a session, else ``ValueError`` in one line.

    A session name is 1 to :data:`MAX_SESSION_NAME_CHARS` of the characters
    ``A-Z a-z 0-9 . _ -``, and not ``.`` or ``..``: it is one word on a command
    line, part of an address (``child:NAME``) and safe in a path, so a name
    such as ``../../etc`` is refused rather than kept and left unreachable.
    """
    if not isinstance(name, str):
        raise ValueError("a session name is a string")
    if not 1 <= len(name) <= MAX_SESSION_NAME_CHARS:
        raise ValueError(
            f"a session name has 1 to {MAX_SESSION_NAME_CHARS} characters, not {len(name):,}"
        )
    if not _SESSION_NAME.fullmatch(name) or name in (".", ".."):
        shown = repr(name) if len(name) <= 40 else repr(name[:40]) + "..."
        raise ValueError(
            f"a session name is made of the characters A-Z a-z 0-9 . _ - "
            f"(and is not . or ..): {shown} is not"
        )
    return name


def one_of(allowed: Iterable[str]) -> After:
    """A pydantic check that a string is one of ``allowed``, for fields that are
    plain ``str`` to their Python callers (a CLI flag's text)."""
    options = tuple(allowed)
    rule = f"must be one of {', '.join(options)}"

    def check(value: str) -> str:
        if value not in options:
            raise ValueError(rule)
        return value

    return after(check)


Text = Annotated[str, length(most=MAX_TEXT_CHARS)]
Name = Annotated[str, length(most=MAX_NAME_CHARS)]
FilledText = Annotated[Text, after(_filled)]
"""Text that is not blank (a task, a message)."""
FilledName = Annotated[Name, after(_filled)]
"""A name that is not blank (a model, a job, a message's recipient)."""
Instructions = Annotated[Text | None, after(_blank_is_none)]
"""A refinement's or compaction's extra instructions: blank ones are none."""
SessionName = Annotated[str, after(check_session_name)]
"""A session's own name: :func:`check_session_name`."""
PathText = Annotated[str, length(most=MAX_PATH_CHARS)]
Count = Annotated[int, within(0, MAX_COUNT)]
"""A count where 0 is allowed (and often means no limit)."""
Positive = Annotated[int, within(1, MAX_COUNT)]
Version = Annotated[int, within(0, 10**9)]
"""A harness entry's version; 0 is before the entry existed."""
Cost = Annotated[float, within(0, MAX_COST)]
PositiveCost = Annotated[float, within(0, MAX_COST, above=True)]
Seconds = Annotated[Duration, within(0, MAX_SECONDS, duration=True)]
"""A duration (``90s``, ``1h30m``, ``2d`` or a number of seconds) as seconds."""
PositiveSeconds = Annotated[Duration, within(0, MAX_SECONDS, duration=True, above=True)]
Wait = Annotated[float, after(_wait)]
"""Seconds a long poll waits: from 0 to :data:`MAX_WAIT_SECONDS`."""

__all__ = [
    "MAX_COST",
    "MAX_COUNT",
    "MAX_ITEMS",
    "MAX_NAME_CHARS",
    "MAX_PATH_CHARS",
    "MAX_SECONDS",
    "MAX_SESSION_NAME_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_WAIT_SECONDS",
    "Cost",
    "Count",
    "FilledName",
    "FilledText",
    "Instructions",
    "Name",
    "PathText",
    "Positive",
    "PositiveCost",
    "PositiveSeconds",
    "Seconds",
    "SessionName",
    "Text",
    "Version",
    "Wait",
    "check_session_name",
    "one_of",
]

"""Field types of the values the daemon receives: bounded text, counts, durations.

A request comes from a person's client or from a kernel, that is from code a
model wrote, so every field has a type and a bound. These aliases are plain
``str``, ``int`` and ``float`` to mypy and to the code that reads the values;
the metadata they carry is read by pydantic when
:func:`~recursa.protocol.wire.from_json` validates a request (strictly: ``"5"``
is not 5, ``true`` is not 1). What a value means (an unknown model, a name
already taken, a harness entry's own limits) is judged further in.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from recursa.duration import Duration
from recursa.validation import within

MAX_TEXT_CHARS = 4_000_000
"""A task, a message, an entry's content: bounded by the body's size (16 MiB) anyway."""
MAX_NAME_CHARS = 500
"""A name, a model reference, a session or entry reference, a label, a spec."""
MAX_PATH_CHARS = 4096
MAX_COUNT = 10**12
"""Tokens, steps, turns: more is a typo, not a budget."""
MAX_COST = 1_000_000.0
"""USD."""
MAX_SECONDS = 366 * 86_400.0
"""A time limit or timeout: a year and a day."""
MAX_ITEMS = 100
"""Items of a list in a request (gates)."""

Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
PathText = Annotated[str, Field(max_length=MAX_PATH_CHARS)]
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

__all__ = [
    "MAX_COST",
    "MAX_COUNT",
    "MAX_ITEMS",
    "MAX_NAME_CHARS",
    "MAX_PATH_CHARS",
    "MAX_SECONDS",
    "MAX_TEXT_CHARS",
    "Cost",
    "Count",
    "Name",
    "PathText",
    "Positive",
    "PositiveCost",
    "PositiveSeconds",
    "Seconds",
    "Text",
    "Version",
]

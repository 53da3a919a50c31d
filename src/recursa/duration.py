"""Durations: one grammar for every place a person or a model writes a length of time.

Accepted, everywhere (configuration, command line flags, schedules, ``rlm()``
budgets, daemon requests)::

    90            a number: seconds (int or float; also as text, "90" or "2.5")
    90s  10m  2h  1d            a number and a unit
    1h30m  1d 12h  1.5h         parts run together or spaced; decimals allowed
    2 hours  90 seconds  5 min  long unit names, any case

Units: ``s sec secs second seconds``, ``m min mins minute minutes``,
``h hr hrs hour hours``, ``d day days``. A duration is finite and never
negative; bools are refused (``True`` is not one second). What a duration
means in context (0 as "no limit", a shortest interval) is the caller's rule.

:data:`Duration` is the type for pydantic schemas (``float`` to mypy): it
accepts what :func:`parse_duration` accepts and yields seconds as a float.
This module sits at the bottom of the layers (beside ``errors``) so the
configuration and the kernel-side API both use it; it imports neither pydantic
nor anything of recursa at import time, so a kernel pays nothing for it.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic_core import CoreSchema

UNIT_SECONDS: dict[str, float] = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86_400.0, "day": 86_400.0, "days": 86_400.0,
}  # fmt: skip
"""Every unit name a duration may use, with its length in seconds."""
MAX_DURATION_CHARS = 100
"""Longer text is refused before it is read: durations are short."""
EXAMPLES = "90s, 10m, 1h30m, 2d or a number of seconds"

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")


def parse_duration(value: object) -> float:
    """Seconds from ``value`` (see the module docstring); ``ValueError`` with
    one line naming what was given when it is not a duration."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"a duration is {EXAMPLES}, not {_shown(value)}")
    seconds = _from_text(value) if isinstance(value, str) else float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be finite, not {_shown(value)}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {_shown(value)}")
    return seconds


def is_bare_number(text: str) -> bool:
    """Whether ``text`` is a number without a unit (``"10"``): schedules refuse
    one in a spec, where ``every 10`` would be a guess."""
    return _NUMBER.fullmatch(text.strip()) is not None


def format_duration(seconds: float) -> str:
    """``5400.0`` → ``"1h30m"``; whole seconds only (``"0s"`` for less than a half)."""
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            count, left = divmod(left, size)
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _from_text(text: str) -> float:
    if len(text) > MAX_DURATION_CHARS:
        raise ValueError(f"a duration is at most {MAX_DURATION_CHARS} characters")
    source = text.strip().lower()
    if not source:
        raise ValueError(f"a duration is missing: give {EXAMPLES}")
    if _NUMBER.fullmatch(source):
        return float(source)
    total, position = 0.0, 0
    while position < len(source):
        match = _PART.match(source, position)
        if match is None or match.group(2) not in UNIT_SECONDS:
            raise ValueError(
                f"cannot read the duration {text.strip()!r}: use a number and a unit "
                "(s, m, h, d), e.g. 10m or 1h30m"
            )
        total += float(match.group(1)) * UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _DurationSchema:
    """Pydantic metadata for :data:`Duration`: pydantic is imported only when a
    schema that uses it is built, never by importing this module."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            parse_duration, serialization=core_schema.plain_serializer_function_ser_schema(float)
        )

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "maxLength": MAX_DURATION_CHARS, "examples": ["90s", "1h30m"]},
            ],
            "description": f"a duration: {EXAMPLES}",
        }


Duration = Annotated[float, _DurationSchema()]
"""Seconds, read with :func:`parse_duration` when pydantic validates a field of this type."""

__all__ = [
    "EXAMPLES",
    "MAX_DURATION_CHARS",
    "UNIT_SECONDS",
    "Duration",
    "format_duration",
    "is_bare_number",
    "parse_duration",
]

"""Request values that check their own field types when built.

A request reaches the daemon as JSON from a person's client or from a
kernel, i.e. from model-written code: hostile input. :class:`Checked` makes
a dataclass refuse a field of the wrong type with one line (``ValueError``),
(:class:`InvalidRequest`), so the daemon answers 400, the CLI exits 2, and
the host gets well-typed values. Ranges and
other meanings are the value's own ``__post_init__`` (which calls this one
first) or the host's to judge.
"""

from __future__ import annotations

import dataclasses
import math
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from recursa.errors import UsageError

MAX_WAIT_SECONDS = 86_400.0
"""The longest wait a long poll may ask for; a client wanting longer asks again."""


class InvalidRequest(UsageError, ValueError):
    """A request value that is malformed: a 400 at the daemon, exit 2 at the CLI."""


class Checked:
    """A base of frozen request dataclasses: their fields are type-checked on init."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for name, kind in _hints(type(self)).items():
            value = getattr(self, name)
            if not fits(kind, value):
                raise InvalidRequest(f"{name} must be {describe(kind)}")


def fits(kind: Any, value: object) -> bool:
    """Whether ``value`` (from JSON) is of type ``kind``."""
    origin = get_origin(kind)
    if kind is Any:
        return True
    if kind is type(None) or kind is None:
        return value is None
    if origin is Literal:
        return any(value == option and type(value) is type(option) for option in get_args(kind))
    if origin in (Union, types.UnionType):
        return any(fits(option, value) for option in get_args(kind))
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        )
    if kind is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        return isinstance(value, tuple | list)
    if origin is dict or kind is dict:
        return isinstance(value, dict)
    if isinstance(kind, type):
        return isinstance(value, kind)
    return True


def describe(kind: Any) -> str:
    """``kind`` in words, for an error line."""
    origin = get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(repr(option) for option in get_args(kind))
    if origin in (Union, types.UnionType):
        options = [describe(option) for option in get_args(kind) if option is not type(None)]
        text = " or ".join(options)
        return f"{text} or null" if type(None) in get_args(kind) else text
    words = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}
    return words.get(kind, getattr(kind, "__name__", str(kind)))


def seconds(value: float | None, name: str) -> None:
    """A wait in seconds: from 0 to :data:`MAX_WAIT_SECONDS` (ValueError otherwise)."""
    if value is not None and not 0 <= value <= MAX_WAIT_SECONDS:
        raise InvalidRequest(f"{name} must be from 0 to {MAX_WAIT_SECONDS:g} seconds")


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The field types of ``cls`` (resolved once)."""
    found = _HINTS.get(cls)
    if found is not None:
        return found
    hints = get_type_hints(cls)
    found = _HINTS[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return found


__all__ = ["MAX_WAIT_SECONDS", "Checked", "InvalidRequest", "describe", "fits", "seconds"]

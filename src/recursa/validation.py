"""One-line errors for values parsed at a boundary, and ranges that say themselves.

What crosses a process boundary (the configuration file, a daemon request)
is parsed by pydantic into frozen values once. A person or a model reads the
error, so it is one line that names the field by its dotted path, what was
expected and what was given: ``limits.max_steps must be from 0 to 1000000,
not 1000000000``; ``model must be a string, not 7``. Only the first problem
is described; the count of the others follows it.

:func:`within` is the range check both use: its message carries both bounds,
which pydantic's own ``ge``/``le`` errors do not.

The checks a type carries (:func:`after`, :func:`length`, :func:`within`) are
markers that build their part of a schema when pydantic builds one: the
protocol's types are imported by every CLI call and every kernel, which
validate nothing, and pydantic costs about 60 ms to import. This module
imports pydantic only inside the functions that run on a validation.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from recursa.duration import format_duration

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, ValidationError
    from pydantic.fields import FieldInfo
    from pydantic_core import CoreSchema, ErrorDetails

MAX_SHOWN_CHARS = 40
"""A given value is shown in an error up to this many characters of its repr."""

_EXPECTED: dict[str, str] = {
    "string_type": "a string",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "none_required": "null",
}
_MAPPING_TYPES = frozenset({"dict_type", "model_type", "dataclass_type", "model_attributes_type"})
_BOUNDS: dict[str, tuple[str, str]] = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class After:
    """``Annotated`` metadata: ``check`` runs on the value after its type's
    own validation (pydantic's ``AfterValidator``); with ``info``, it is also
    given pydantic's ``ValidationInfo`` (the fields validated before it)."""

    __slots__ = ("check", "info")

    def __init__(self, check: Callable[..., Any], info: bool) -> None:
        self.check = check
        self.info = info

    def __repr__(self) -> str:
        return f"after({self.check.__qualname__})"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from pydantic_core import core_schema

        if self.info:
            return core_schema.with_info_after_validator_function(self.check, handler(source))
        return core_schema.no_info_after_validator_function(self.check, handler(source))


def after(check: Callable[..., Any], *, info: bool = False) -> After:
    """A check of an ``Annotated`` type: ``check(value)`` (``check(value,
    info)`` with ``info``) returns the value or raises ``ValueError`` with the
    message a person reads."""
    return After(check, info)


class Length:
    """``Annotated`` metadata: the bounds of a string's length or a tuple's."""

    __slots__ = ("least", "most")

    def __init__(self, least: int | None, most: int | None) -> None:
        self.least = least
        self.most = most

    def __repr__(self) -> str:
        return f"length(least={self.least}, most={self.most})"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        schema: Any = dict(handler(source))
        if schema["type"] not in ("str", "tuple", "list"):
            raise TypeError(f"length() bounds a string, tuple or list, not {schema['type']}")
        if self.least is not None:
            schema["min_length"] = self.least
        if self.most is not None:
            schema["max_length"] = self.most
        result: CoreSchema = schema
        return result


def length(*, least: int | None = None, most: int | None = None) -> Length:
    """The bounds of a string's length or a tuple's, for an ``Annotated`` type
    (pydantic's ``Field(min_length=..., max_length=...)``)."""
    return Length(least, most)


def field_options(**options: Any) -> FieldInfo:
    """Pydantic's ``Field(**options)`` (``validate_default=True``), imported
    when called: only in an annotation that stays a string (a module with
    ``from __future__ import annotations``), which pydantic evaluates when it
    builds the schema, as does anything else that evaluates the annotation
    (``typing.get_type_hints``)."""
    from pydantic import Field

    info: FieldInfo = Field(**options)
    return info


def within(low: float, high: float, *, duration: bool = False, above: bool = False) -> After:
    """A pydantic check that a number lies in ``[low, high]`` (``(low, high]``
    with ``above``); its error states the range. ``duration``: the bounds are
    shown as durations (``1h30m``) rather than numbers."""

    def shown(bound: float) -> str:
        if duration:
            return format_duration(bound)
        return str(int(bound)) if float(bound).is_integer() else str(bound)

    if above:
        rule = f"must be more than {shown(low)} and at most {shown(high)}"
    else:
        rule = f"must be from {shown(low)} to {shown(high)}"

    def check(value: float) -> float:
        # Written so that NaN, which compares false with everything, fails too.
        if not (low < value <= high if above else low <= value <= high):
            raise ValueError(rule)
        return value

    return after(check)


def one_line(
    error: ValidationError,
    *,
    root: type[Any] | None = None,
    mapping: str = "an object",
) -> str:
    """``error``'s first problem as one line (see the module docstring).
    ``root``, the type validated, lets an unknown key list the known ones;
    ``mapping`` names what a nested object is called (``"a table"`` in TOML)."""
    problems = error.errors(include_url=False)
    if not problems:
        return str(error).splitlines()[0]
    text = describe(problems[0], root=root, mapping=mapping)
    if len(problems) > 1:
        more = len(problems) - 1
        text += f" (and {more} more problem{'s' if more > 1 else ''})"
    return text


def describe(problem: ErrorDetails, *, root: type[Any] | None, mapping: str) -> str:
    """One problem of a :class:`ValidationError` as one line."""
    kind, loc, given = problem["type"], problem["loc"], problem.get("input")
    where = dotted(loc) or "the value"
    ctx = problem.get("ctx") or {}
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        known = known_keys(root, loc[:-1]) if root is not None else []
        listed = f" (known: {', '.join(known)})" if known else ""
        return f"unknown key {where!r}{listed}"
    if kind == "value_error":
        message = str(ctx.get("error", problem["msg"]))
        if message.startswith("must "):
            return f"{where} {message}, not {shown(given)}"
        return f"{where}: {message}"
    if kind == "literal_error":
        return f"{where} must be {ctx.get('expected', '?')}, not {shown(given)}"
    if kind in _MAPPING_TYPES:
        return f"{where} must be {mapping}, not {shown(given)}"
    if kind in _EXPECTED:
        return f"{where} must be {_EXPECTED[kind]}, not {shown(given)}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"{where} must be {words} {ctx.get(key)}, not {shown(given)}"
    if kind == "string_too_long":
        return f"{where} must be at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        least = ctx.get("min_length")
        return f"{where} is empty" if least == 1 else f"{where} must be at least {least} characters"
    if kind == "too_long":
        return f"{where} must have at most {ctx.get('max_length')} items"
    message = problem["msg"]
    return f"{where}: {message[:1].lower()}{message[1:]}"


def checked_text(value: object, what: str, most: int, *, strip: bool = False) -> str:
    """``value`` as non-blank text of at most ``most`` characters (stripped
    first when ``strip``); otherwise a one-line ``ValueError`` naming ``what``."""
    if not isinstance(value, str):
        raise ValueError(f"the {what} must be text")
    text = value.strip() if strip else value
    if not text.strip():
        raise ValueError(f"the {what} is empty")
    if len(text) > most:
        raise ValueError(f"the {what} is longer than {most:,} characters")
    return text


def dotted(loc: Sequence[int | str]) -> str:
    """``("prices", "openai/gpt-4o", "input")`` → ``prices."openai/gpt-4o".input``;
    list positions are shown as ``[3]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = part if _PLAIN_KEY.fullmatch(part) else f'"{part}"'
        out += f".{name}" if out else name
    return out


def shown(value: object) -> str:
    """``value``'s repr, cut to :data:`MAX_SHOWN_CHARS` (a body may hold megabytes)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def known_keys(root: type[Any], loc: Sequence[int | str]) -> list[str]:
    """The field names of the model or dataclass reached from ``root`` along
    ``loc`` (dictionary keys and list positions pass through to their values);
    empty when ``loc`` leads elsewhere."""
    current: Any = root
    for part in loc:
        fields = _fields(current)
        if fields is not None:
            if not isinstance(part, str) or part not in fields:
                return []
            current = fields[part]
        else:
            current = _item_type(current)
        if current is None:
            return []
    while True:  # a table of tables ends on the mapping itself: its values' fields
        fields = _fields(current)
        if fields is not None:
            return sorted(fields)
        current = _item_type(current)
        if current is None:
            return []


def _fields(kind: Any) -> Mapping[str, Any] | None:
    from pydantic import BaseModel

    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return {name: info.annotation for name, info in kind.model_fields.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind, include_extras=True)
        return {f.name: hints.get(f.name) for f in dataclasses.fields(kind)}
    return None


def _item_type(kind: Any) -> Any:
    """The value type of ``dict[K, V]`` / ``list[V]`` / ``tuple[V, ...]`` / ``V | None``."""
    kind = _unwrap(kind)
    args = [a for a in typing.get_args(kind) if a is not type(None) and a is not Ellipsis]
    return args[-1] if args else None


def _unwrap(kind: Any) -> Any:
    while typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    return kind


__all__ = [
    "MAX_SHOWN_CHARS",
    "After",
    "Length",
    "after",
    "checked_text",
    "describe",
    "dotted",
    "field_options",
    "known_keys",
    "length",
    "one_line",
    "shown",
    "within",
]

"""Wire values to JSON data and back, for values recursa built itself: what
the daemon answers its clients, what a client sends before the daemon
validates it.

:func:`~recursa.protocol.wire.from_json` validates what comes in from a
person's client or a kernel with pydantic, bounds and all. A reply comes
from the daemon, which built it from the same types; a client rebuilds it
with :func:`from_plain`, which checks each value's JSON type against its
field's type (a string is a string, a whole number is not a boolean, a
literal is one of its values) and leaves the bounds to the side that checked
them. So a client call imports no pydantic (about 60 ms, most of a light
call) and a reply is rebuilt in microseconds.

The types it reads are the ones replies are made of: ``str``, ``int``,
``float``, ``bool``, ``None``, literals, optional values, tuples, lists and
``dict[str, ...]`` of them, ``Any`` (JSON as it is), nested dataclasses, and
unions of dataclasses told apart by a literal ``type`` field (the events).
Any other type is a ``TypeError`` when its reader is first built: a
programming error, found by the tests that read every reply type. Data that
does not fit is a :class:`Misfit`, a ``ValueError`` whose one line names the
field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union

from recursa.validation import shown

T = TypeVar("T")

Reader = Callable[[Any], Any]

_READERS: dict[Any, Reader] = {}
_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


class Misfit(ValueError):
    """Data that does not fit its type: the problem, and where (field names
    and array positions from the outermost):
    ``children[0].own.cost: expected a number, not 'free'``."""

    def __init__(self, problem: str, path: tuple[str | int, ...] = ()) -> None:
        self.problem, self.path = problem, path
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
        super().__init__(f"{where.lstrip('.')}: {problem}" if path else problem)


def _items(read: Reader, data: object) -> list[Any]:
    """An array's items, each read by ``read`` (a misfit says its position)."""
    items = []
    for position, element in enumerate(_array(data)):
        try:
            items.append(read(element))
        except Misfit as exc:
            raise Misfit(exc.problem, (position, *exc.path)) from None
    return items


def _entries(read: Reader, data: object) -> dict[str, Any]:
    """An object's entries, each value read by ``read`` (a misfit says its key)."""
    entries = {}
    for key, value in _object(data).items():
        try:
            entries[key] = read(value)
        except Misfit as exc:
            raise Misfit(exc.problem, (key, *exc.path)) from None
    return entries


def to_plain(value: Any) -> Any:
    """``value`` as JSON data: a dataclass as an object of its fields, a
    tuple or list as an array, strings, numbers, booleans and None as they
    are; ``TypeError`` for anything else."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {_key(key): to_plain(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: to_plain(getattr(value, name)) for name in field_names(type(value))}
    raise TypeError(f"not JSON data: a {type(value).__name__}")


def from_plain(kind: type[T], data: object) -> T:
    """A value of ``kind`` from the JSON data :func:`to_plain` made of it;
    a :class:`Misfit` for data of another shape."""
    try:
        value: T = _reader(kind)(data)
    except RecursionError:
        raise Misfit("nested too deep") from None
    return value


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """A dataclass's field names, in order (looked up once per class)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"not JSON data: a {type(key).__name__} key")
    return key


def _reader(kind: Any) -> Reader:
    reader = _READERS.get(kind)
    if reader is None:
        # A dataclass's reader is registered before its fields' readers are
        # built: a type that contains itself (a usage tree) finds it.
        reader = _READERS[kind] = _Dataclass(kind) if _is_dataclass(kind) else _build(kind)
    return reader


def _is_dataclass(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _build(kind: Any) -> Reader:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Annotated:
        return _reader(args[0])  # the bounds were checked where the value was made
    if kind is Any:
        return _any
    if kind in _SCALARS:
        return _SCALARS[kind]
    if origin is Literal:
        return _literal(args)
    if origin is Union or origin is types.UnionType:
        return _union(args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _reader(args[0])
        return lambda data: tuple(_items(item, data))
    if origin is list and len(args) == 1:
        item = _reader(args[0])
        return lambda data: _items(item, data)
    if origin is dict and len(args) == 2 and args[0] is str:
        value = _reader(args[1])
        return lambda data: _entries(value, data)
    raise TypeError(f"from_plain cannot read {kind!r}")


class _Dataclass:
    """Reads a JSON object into ``cls``: each field by its type (a missing one
    takes its default, or is a misfit), unknown keys ignored (a newer peer)."""

    def __init__(self, cls: type[Any]) -> None:
        self.cls = cls
        self.fields: tuple[tuple[str, Reader, bool], ...] | None = None

    def __call__(self, data: object) -> Any:
        fields = self.fields if self.fields is not None else self._plan()
        given = _object(data)
        values = {}
        for name, read, required in fields:
            if name in given:
                try:
                    values[name] = read(given[name])
                except Misfit as exc:
                    raise Misfit(exc.problem, (name, *exc.path)) from None
            elif required:
                raise Misfit("missing", (name,))
        return self.cls(**values)

    def _plan(self) -> tuple[tuple[str, Reader, bool], ...]:
        hints = typing.get_type_hints(self.cls, include_extras=True)
        self.fields = tuple(
            (
                f.name,
                _reader(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(self.cls)
            if f.init
        )
        return self.fields


def _any(data: object) -> object:
    return data


def _scalar(kind: type[Any], what: str) -> Reader:
    def read(data: object) -> object:
        if type(data) is not kind:
            raise Misfit(f"expected {what}, not {shown(data)}")
        return data

    return read


def _number(data: object) -> float:
    if type(data) is float:
        return data
    if type(data) is int:
        try:
            return float(data)
        except OverflowError:
            raise Misfit(f"expected a number a float can hold, not {shown(data)}") from None
    raise Misfit(f"expected a number, not {shown(data)}")


def _none(data: object) -> None:
    if data is not None:
        raise Misfit(f"expected null, not {shown(data)}")


_SCALARS: dict[Any, Reader] = {
    str: _scalar(str, "a string"),
    int: _scalar(int, "a whole number"),
    bool: _scalar(bool, "true or false"),
    float: _number,
    type(None): _none,
}


def _literal(options: tuple[Any, ...]) -> Reader:
    kinds = {type(option) for option in options}  # str, int, bool: hashable values
    allowed = {(type(option), option) for option in options}

    def read(data: object) -> object:
        if type(data) not in kinds or (type(data), data) not in allowed:
            raise Misfit(f"expected one of {options!r}, not {shown(data)}")
        return data

    return read


def _union(members: tuple[Any, ...]) -> Reader:
    optional = type(None) in members
    kinds = [member for member in members if member is not type(None)]
    if len(kinds) == 1:
        only = _reader(kinds[0])
        return (lambda data: None if data is None else only(data)) if optional else only
    tagged = {_tag(kind): kind for kind in kinds}
    if optional or len(tagged) != len(kinds):
        raise TypeError(f"from_plain cannot read {members!r}")

    def read(data: object) -> object:
        tag = _object(data).get("type")
        kind = tagged.get(tag) if isinstance(tag, str) else None
        if kind is None:
            raise Misfit(f"expected one of the types {sorted(tagged)}, not {shown(tag)}")
        return _reader(kind)(data)

    return read


def _tag(kind: Any) -> str:
    """The literal ``type`` of a dataclass in a union of them."""
    if not _is_dataclass(kind):
        raise TypeError(f"from_plain cannot read a union with {kind!r}")
    hint = typing.get_type_hints(kind).get("type")
    options = typing.get_args(hint) if typing.get_origin(hint) is Literal else ()
    if len(options) != 1 or not isinstance(options[0], str):
        raise TypeError(f"{kind.__name__} in a union has no literal type field")
    tag: str = options[0]
    return tag


def _array(data: object) -> list[Any]:
    if type(data) is not list:
        raise Misfit(f"expected an array, not {shown(data)}")
    return data


def _object(data: object) -> dict[str, Any]:
    if type(data) is not dict:
        raise Misfit(f"expected an object, not {shown(data)}")
    return data


__all__ = ["Misfit", "field_names", "from_plain", "to_plain"]

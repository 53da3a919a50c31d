"""Frozen value classes: ``@dataclass(frozen=True, slots=True)``, compiled less.

recursa's protocol is about a hundred frozen, slotted dataclasses (the wire's
requests and replies, the events, the model's messages), and every CLI call
imports them. ``dataclasses`` writes the source of six methods for each
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``) and compiles it: about 0.5 ms a class here, most of it
``compile``, and a fifth of a ``recursa logs`` call. :func:`frozen` makes
the same class compiling only ``__init__`` (whose signature is the class's);
the other methods are shared code over the class's field names.

The same class means: ``dataclasses`` processes the fields (defaults,
``field()`` options, ``kw_only``, ``ClassVar``), builds the slots and sets
``__dataclass_fields__`` and ``__match_args__``; ``__dataclass_params__`` is a
frozen dataclass's. The methods are written as ``dataclasses`` writes them
for ``frozen=True, slots=True`` (and ``eq=True``, ``repr=True``,
``init=True``), pickling included. A class this does not cover (an
``InitVar``, a dataclass base, a method of its own under one of those names)
is built by ``dataclasses`` itself, unchanged: the fast path only ever takes
what it can make identical. ``tests/unit/test_values.py`` checks the two
against each other on every protocol class.
"""

from __future__ import annotations

import dataclasses
import inspect
import keyword
import operator
import reprlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")

_GENERATED = (
    "__init__",
    "__repr__",
    "__eq__",
    "__hash__",
    "__setattr__",
    "__delattr__",
    "__getstate__",
    "__setstate__",
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Template:
    pass


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _KeywordTemplate:
    pass


_PARAMS = {
    False: _Template.__dataclass_params__,  # type: ignore[attr-defined]
    True: _KeywordTemplate.__dataclass_params__,  # type: ignore[attr-defined]
}
"""A frozen, slotted dataclass's parameters as ``dataclasses`` makes them, by
``kw_only`` (Python 3.12 and later record it, with ``slots`` and ``match_args``)."""


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(
    cls: type[T] | None = None, /, *, kw_only: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass(frozen=True, slots=True)`` (``kw_only`` as given), faster."""

    def wrap(cls: type[T]) -> type[T]:
        return _build(cls, kw_only)

    return wrap if cls is None else wrap(cls)


def _build(cls: type[T], kw_only: bool) -> type[T]:
    if not _plain(cls):
        return dataclasses.dataclass(cls, frozen=True, slots=True, kw_only=kw_only)
    documented = bool(cls.__dict__.get("__doc__"))
    made: type[T] = dataclasses.dataclass(
        cls, init=False, repr=False, eq=False, frozen=False, slots=True, kw_only=kw_only
    )
    fields = list(dataclasses.fields(made))  # type: ignore[arg-type]
    for name, method in _methods(made, fields).items():
        method.__qualname__ = f"{made.__qualname__}.{name}"
        method.__module__ = made.__module__
        setattr(made, name, method)
    made.__dataclass_params__ = _PARAMS[kw_only]  # type: ignore[attr-defined]
    if not documented:
        try:
            signature = str(inspect.signature(made)).replace(" -> None", "")
        except (TypeError, ValueError):
            signature = ""
        made.__doc__ = made.__name__ + signature
    return made


def _plain(cls: type) -> bool:
    """Whether the fast path makes exactly what ``dataclasses`` would: no
    dataclass base, no ``__post_init__`` (its own or inherited), no ``InitVar``,
    none of the generated methods of its own, no ``__slots__``, only ordinary
    field names. Checked before anything changes the class."""
    if any(name in cls.__dict__ for name in (*_GENERATED, "__slots__")):
        return False
    if hasattr(cls, "__post_init__"):
        return False
    if any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        return False
    annotations = inspect.get_annotations(cls)
    if not all(_ordinary(name) for name in annotations):
        return False
    return not any("InitVar" in str(hint) for hint in annotations.values())


def _ordinary(name: str) -> bool:
    """A field name the generated ``__init__`` can take as it is: an identifier,
    not a keyword, not ``self``, and not a ``__`` name like those it uses itself."""
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and name != "self"
        and not name.startswith("__")
    )


def _methods(cls: type[Any], fields: list[dataclasses.Field[Any]]) -> dict[str, Any]:
    """The eight methods of a frozen, slotted dataclass. Only ``__init__`` is
    compiled (its signature is the class's); the others are shared code over
    the class's field names, so a class costs one small ``compile``."""
    names = tuple(f.name for f in fields)
    compared = _row([f.name for f in fields if f.compare])
    hashed = _row([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    shown = tuple(f.name for f in fields if f.repr)

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    # The instance's own fields, as dataclasses reads them: a subclass's too.
    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    def __setstate__(self: Any, state: list[Any]) -> None:
        for f, value in zip(dataclasses.fields(self), state, strict=False):
            object.__setattr__(self, f.name, value)

    return {
        "__init__": _init(cls, fields),
        "__repr__": reprlib.recursive_repr()(__repr__),
        "__eq__": __eq__,
        "__hash__": __hash__,
        "__setattr__": __setattr__,
        "__delattr__": __delattr__,
        "__getstate__": __getstate__,
        "__setstate__": __setstate__,
    }


def _row(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these fields' values (compared and hashed as a tuple, as
    dataclasses does: an element is equal to itself, even a NaN)."""
    if not names:
        return lambda value: ()
    if len(names) == 1:
        (name,) = names
        return lambda value: (getattr(value, name),)
    return operator.attrgetter(*names)


def _init(cls: type[Any], fields: list[dataclasses.Field[Any]]) -> Any:
    """``__init__``, written as dataclasses writes it for a frozen class, in
    the class's module (whose names its annotations may use)."""
    scope: dict[str, Any] = {"__object": object, "__no_default": _HAS_FACTORY}
    params_std: list[str] = []
    params_kw: list[str] = []
    body: list[str] = []
    defaulted = False
    for f in fields:
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if f.init and not f.kw_only:
            if defaulted and not has_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            defaulted = defaulted or has_default
        annotation = f"__type_{f.name}"
        scope[annotation] = f.type
        if f.default is not dataclasses.MISSING:
            scope[f"__default_{f.name}"] = f.default
            default = f"=__default_{f.name}"
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"__factory_{f.name}"] = f.default_factory
            default = "=__no_default"
            value = f"__factory_{f.name}() if {f.name} is __no_default else {f.name}"
        else:
            default, value = "", f.name
        if f.init:
            (params_kw if f.kw_only else params_std).append(f"{f.name}:{annotation}{default}")
        elif f.default is not dataclasses.MISSING:
            value = f"__default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            value = f"__factory_{f.name}()"
        else:
            continue  # init=False without a default: left unset, as dataclasses does
        body.append(f"  __object.__setattr__(self,{f.name!r},{value})")
    params = ["self", *params_std, *(["*", *params_kw] if params_kw else [])]
    source = (
        f"def __create_fn__({', '.join(scope)}):\n"
        f" def __init__({', '.join(params)}) -> None:\n"
        f"{chr(10).join(body) or '  pass'}\n"
        " return __init__\n"
    )
    namespace: dict[str, Any] = {}
    # Compiled without this module's ``from __future__ import annotations``, as
    # dataclasses compiles its text: the annotations are the fields' types.
    module = sys.modules.get(cls.__module__)
    code = compile(source, "<string>", "exec", dont_inherit=True)
    exec(code, vars(module) if module else {}, namespace)  # our own text, from field names
    return namespace["__create_fn__"](*scope.values())


class _HasFactory:
    """The default of a parameter whose field has a ``default_factory``."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _HasFactory()


__all__ = ["frozen"]

"""``recursa.values.frozen`` makes what ``@dataclass(frozen=True, slots=True)``
makes: checked on every class of the protocol and the model types against a
twin built by ``dataclasses`` from the same fields."""

from __future__ import annotations
import __future__

import copy
import dataclasses
import inspect
import pickle
import re
import sys
import textwrap
import typing
from typing import Any, ClassVar

import pytest

import recursa.models.types
import recursa.protocol.calls
import recursa.protocol.control
import recursa.protocol.events
import recursa.protocol.harness
import recursa.protocol.history
import recursa.protocol.kernel_ops
import recursa.protocol.operations
import recursa.protocol.person_ops
import recursa.protocol.wire
import recursa.values
from recursa.values import frozen

MODULES = [
    recursa.models.types,
    recursa.protocol.calls,
    recursa.protocol.control,
    recursa.protocol.events,
    recursa.protocol.harness,
    recursa.protocol.history,
    recursa.protocol.kernel_ops,
    recursa.protocol.operations,
    recursa.protocol.person_ops,
    recursa.protocol.wire,
]
CLASSES = [
    value
    for module in MODULES
    for value in vars(module).values()
    if isinstance(value, type)
    and value.__module__ == module.__name__
    and dataclasses.is_dataclass(value)
    and value.__dataclass_params__.frozen  # type: ignore[attr-defined]
    and "__slots__" in value.__dict__
]


def twin(cls: type[Any]) -> type[Any]:
    """The class ``dataclasses`` makes from ``cls``'s own source (its
    ``@frozen`` made ``@dataclass(frozen=True, slots=True)``), in a copy of its
    module's namespace: nothing of what ``frozen`` made is reused."""
    source = textwrap.dedent(inspect.getsource(cls))
    source, count = re.subn(
        r"^@frozen(\(kw_only=True\))?$",
        lambda m: "@__dc(frozen=True, slots=True" + (", kw_only=True)" if m[1] else ")"),
        source,
        count=1,
        flags=re.MULTILINE,
    )
    assert count == 1, source[:200]
    namespace = {**vars(sys.modules[cls.__module__]), "__dc": dataclasses.dataclass}
    flags = __future__.annotations.compiler_flag
    exec(compile(source, f"<twin of {cls.__name__}>", "exec", flags, dont_inherit=True), namespace)
    made: type[Any] = namespace[cls.__name__]
    return made


def values(cls: type[Any], tag: str) -> dict[str, str]:
    """A distinct, hashable value for each field that ``__init__`` takes."""
    return {f.name: f"{f.name}-{tag}" for f in dataclasses.fields(cls) if f.init}


def fast(cls: type[Any]) -> bool:
    """Made by frozen (whose ``__setattr__`` is its own code, not compiled text)."""
    return cls.__setattr__.__code__.co_filename == recursa.values.__file__


FAST = [cls for cls in CLASSES if fast(cls)]


def test_every_protocol_class_but_a_subclass_takes_the_fast_path() -> None:
    assert len(CLASSES) > 100 and len(FAST) > 90
    for cls in CLASSES:
        # A dataclass subclass is the one shape here that dataclasses builds itself.
        inherits = any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:])
        assert fast(cls) is not inherits, cls


@pytest.mark.parametrize("cls", FAST, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_a_class_behaves_as_dataclasses_makes_it(cls: type[Any]) -> None:
    ref = twin(cls)
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert cls.__match_args__ == ref.__match_args__
    assert cls.__slots__ == ref.__slots__
    assert cls.__doc__ == ref.__doc__
    assert repr(cls.__dataclass_params__) == repr(ref.__dataclass_params__)  # every flag
    # The annotations of __init__ resolve in the class's module, as dataclasses' do.
    assert typing.get_type_hints(cls.__init__) == typing.get_type_hints(ref.__init__)
    assert cls.__init__.__module__ == cls.__repr__.__module__ == cls.__module__
    assert [
        (f.name, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare, f.kw_only)
        for f in dataclasses.fields(cls)
    ] == [
        (f.name, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare, f.kw_only)
        for f in dataclasses.fields(ref)
    ]

    one, other = values(cls, "1"), values(cls, "2")
    a, a_again, b = cls(**one), cls(**one), cls(**other)
    r, r_again, rb = ref(**one), ref(**one), ref(**other)
    assert repr(a) == repr(r)
    assert (a == a_again, a == b, a != b) == (r == r_again, r == rb, r != rb)
    assert (a == r) is False  # another class is never equal, as for dataclasses
    assert hash(a) == hash(r) and hash(a) == hash(a_again)
    assert dataclasses.asdict(a) == dataclasses.asdict(r)
    assert dataclasses.astuple(a) == dataclasses.astuple(r)
    for name in (f.name for f in dataclasses.fields(cls)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(a, name, "changed")
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(a, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.not_a_field = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.deepcopy(a) == a and copy.copy(a) == a
    if one:
        first = next(iter(one))
        replaced = dataclasses.replace(a, **{first: "new"})
        assert getattr(replaced, first) == "new" and replaced != a
    defaults = [f for f in dataclasses.fields(cls) if f.init]
    if all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in defaults
    ):
        assert repr(cls()) == repr(ref())


@frozen(kw_only=True)
class _Shapes:
    """Every field shape the fast path takes."""

    plain: int
    listed: list[int] = dataclasses.field(default_factory=list, hash=False)
    hidden: str = dataclasses.field(default="h", repr=False)
    uncompared: str = dataclasses.field(default="u", compare=False)
    unhashed: str = dataclasses.field(default="x", hash=False)
    hashed_only: str = dataclasses.field(default="o", hash=True, compare=False)
    later: tuple[int, ...] = dataclasses.field(init=False, default=())
    made: list[int] = dataclasses.field(init=False, default_factory=lambda: [1], hash=False)
    shared: ClassVar[int] = 3


@frozen
class _Undocumented:
    x: int
    y: str = "y"


@frozen
class _Recursive:
    """A value that holds itself (through a list) repr()s as dataclasses does."""

    items: list[Any]


@frozen
class _OwnRepr:
    """A method of its own under a generated name: dataclasses builds it."""

    x: int

    def __repr__(self) -> str:
        return "mine"


def test_every_field_shape() -> None:
    value = _Shapes(plain=1)
    assert value.listed == [] and value.listed is not _Shapes(plain=1).listed
    assert (value.later, value.made, _Shapes.shared) == ((), [1], 3)
    assert repr(value) == (
        "_Shapes(plain=1, listed=[], uncompared='u', unhashed='x', hashed_only='o',"
        " later=(), made=[1])"
    )
    assert value == _Shapes(plain=1, uncompared="other")
    assert value != _Shapes(plain=2)
    assert hash(_Shapes(plain=1, unhashed="a")) == hash(_Shapes(plain=1))  # hash=False
    assert hash(_Shapes(plain=1, hashed_only="p")) != hash(_Shapes(plain=1))  # hash=True
    assert _Shapes(plain=1, hashed_only="p") == _Shapes(plain=1)  # compare=False
    assert str(inspect.signature(_Shapes)) == (
        "(*, plain: 'int', listed: 'list[int]' = <factory>, hidden: 'str' = 'h',"
        " uncompared: 'str' = 'u', unhashed: 'str' = 'x', hashed_only: 'str' = 'o') -> None"
    )
    with pytest.raises(TypeError):
        _Shapes(1)  # type: ignore[misc]
    assert _Undocumented.__doc__ == "_Undocumented(x: 'int', y: 'str' = 'y')"
    assert _Undocumented(1) == _Undocumented(x=1, y="y")
    loop = _Recursive([])
    loop.items.append(loop)
    assert repr(loop) == "_Recursive(items=[...])"
    assert repr(_OwnRepr(1)) == "mine" and _OwnRepr(1) == _OwnRepr(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        _OwnRepr(1).x = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(value)) == value


def test_the_generated_text_takes_no_code_from_names() -> None:
    # Field names are identifiers (Python's grammar says so): nothing else
    # from the class reaches the exec'd text, defaults and types go by reference.
    namespace: dict[str, Any] = {"__annotations__": {"x": "int"}, "x": "'); raise SystemExit('"}
    hostile = type("Hostile", (), namespace)
    made = frozen(hostile)
    assert made().x == "'); raise SystemExit('"  # type: ignore[attr-defined]
    assert sys.modules[__name__] is not None


@frozen
class _Base:
    """A base with a value of its own."""

    x: int


@dataclasses.dataclass(frozen=True)
class _Sub(_Base):
    z: int = 3


class _Mixin:
    def __post_init__(self) -> None:
        object.__setattr__(self, "seen", True)


@frozen
class _WithInheritedPostInit(_Mixin):
    """__post_init__ from a base: dataclasses builds it (and calls it)."""

    seen: bool = False


def test_what_the_fast_path_leaves_to_dataclasses_works_as_dataclasses() -> None:
    # A plain dataclass subclass pickles and copies its own fields too.
    sub = _Sub(1, 7)
    assert pickle.loads(pickle.dumps(sub)) == sub and copy.deepcopy(sub).z == 7
    assert _WithInheritedPostInit().seen is True
    # A field named self (dataclasses renames __init__'s own parameter), with options.
    # A keyword or a __ name goes to dataclasses too, which fails on both alike.
    for name in ("self",):
        options = dataclasses.field(default_factory=list, repr=False, compare=False)
        body = {"__annotations__": {"a": "int", name: "list[int]"}, name: options}
        made = frozen(type("Odd", (), dict(body)))
        reference = dataclasses.dataclass(frozen=True, slots=True)(
            type("Odd", (), {**body, name: dataclasses.field(**_options(options))})
        )
        assert not fast(made)
        assert str(inspect.signature(made)) == str(inspect.signature(reference))
        assert made.__doc__ == reference.__doc__
        assert repr(made(1)) == repr(reference(1)) == "Odd(a=1)"
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        frozen(type("Order", (), {"__annotations__": {"x": "int", "y": "int"}, "x": 0}))


def _options(made: dataclasses.Field[Any]) -> dict[str, Any]:
    """A field()'s options, to make another like it."""
    return {"default_factory": made.default_factory, "repr": made.repr, "compare": made.compare}

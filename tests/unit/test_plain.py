"""Wire values to JSON data and back without pydantic (``recursa.protocol.plain``).

Every request and reply type of the operation table is built here from its
own type hints, in every shape its fields can take (each literal, each
member of a union, a field left out and given, an empty and a full tuple),
and checked both ways against pydantic: ``to_plain`` gives what pydantic's
JSON dump gave, and ``from_plain`` rebuilds what ``from_json``, the
validating reader, rebuilds. Data of another shape is a ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from pydantic import TypeAdapter

from fresh_python import fresh_python
from recursa.protocol.common import json_text
from recursa.protocol.events import EventRecord, UserInput
from recursa.protocol.operations import operations
from recursa.protocol.plain import from_plain, to_plain
from recursa.protocol.wire import SessionInfo, Usage, UsageNode, from_json

MOST_LEVELS = 101
"""The root and the most levels of sub-agents ``[agents] max_depth`` allows (100)."""
JSON_ANY = {"k": [1, "a", None, {"n": 2.5, "b": True}]}


def samples(kind: Any, depth: int = 0) -> Iterator[Any]:
    """Values of ``kind``: every literal and union member, optional fields
    both ways; nested dataclasses to a small depth."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Annotated:
        yield from samples(args[0], depth)
    elif kind is str:
        yield from ("text", "é\n\x00")
    elif kind is bool:
        yield from (True, False)
    elif kind is int:
        yield from (0, 7)
    elif kind is float:
        yield from (1.5, 0.0)
    elif kind is type(None):
        yield None
    elif kind is Any:
        yield JSON_ANY
    elif origin is Literal:
        yield from args
    elif origin is typing.Union or origin is types.UnionType:
        for member in args:
            yield from list(samples(member, depth))[:1]
    elif origin is tuple:
        item = list(samples(args[0], depth + 1))
        yield from ((), tuple(item[:2]))
    elif origin is list:
        yield list(samples(args[0], depth + 1))[:2]
    elif origin is dict:
        yield {"key": next(samples(args[1], depth + 1))}
    elif dataclasses.is_dataclass(kind):
        yield from instances(kind, depth)
    else:
        raise AssertionError(f"no samples for {kind!r}")


def instances(cls: type[Any], depth: int) -> Iterator[Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    options = {f.name: list(samples(hints[f.name], depth + 1)) if depth < 3 else [] for f in fields}
    widest = max((len(values) for values in options.values()), default=1)
    for k in range(max(widest, 1)):
        values = {}
        for f in fields:
            choices = options[f.name]
            if choices and (k or f.default is dataclasses.MISSING):
                values[f.name] = choices[k % len(choices)]
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                break  # too deep to build a required field: no instance
        else:
            yield cls(**values)


def wire_types() -> list[Any]:
    kinds = []
    for op in operations():
        for kind in (op.request, op.reply):
            if kind is not None and kind not in kinds:
                kinds.append(kind)
    return kinds


def old_dump(value: Any) -> Any:
    """What ``to_json`` gave before: pydantic's JSON-mode dump."""
    return TypeAdapter(type(value)).dump_python(value, mode="json", warnings=False)


@pytest.mark.parametrize("kind", wire_types(), ids=repr)
def test_every_wire_type_goes_to_json_and_back_as_pydantic_takes_it(kind: Any) -> None:
    values = list(samples(kind))
    assert values
    validated = 0
    for value in values:
        data = to_plain(value)
        assert data == (
            [old_dump(v) for v in value] if isinstance(value, list) else old_dump(value)
        )
        sent = json.loads(json_text(data))  # as it crosses the socket
        assert from_plain(kind, sent) == value
        try:  # the samples know the types, not a request's rules between fields
            checked = from_json(type(value), sent) if dataclasses.is_dataclass(value) else value
        except ValueError:
            continue
        assert checked == value
        validated += 1
    assert validated


def test_a_union_of_events_is_told_apart_by_type_and_a_tree_holds_itself() -> None:
    record = EventRecord(3, "s-1", 2.0, UserInput(text="hi", source="child"))
    assert from_plain(EventRecord, json.loads(json_text(to_plain(record)))) == record
    usage = Usage(1, 2, 3, 0, 0.5, 0)
    leaf = UsageNode("s-2", "child", usage, usage, ())
    tree = UsageNode("s-1", None, usage, usage, (leaf, leaf))
    assert from_plain(UsageNode, to_plain(tree)) == tree


def info(**changes: Any) -> dict[str, Any]:
    usage = Usage(1, 2, 3, 0, 0.5, 0)
    value = SessionInfo("s-1", None, None, "idle", "m", "/", 1.0, 2.0, usage, None, 0, 0, None)
    data: dict[str, Any] = to_plain(value)
    for key, item in changes.items():
        target = data
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = item
    return data


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"id": 7}, "expected a string, not 7"),
        ({"depth": True}, "expected a whole number, not True"),
        ({"depth": 1.0}, "expected a whole number, not 1.0"),
        ({"status": "asleep"}, "expected one of"),
        ({"usage": []}, "expected an object, not []"),
        ({"usage.cost": "free"}, "expected a number, not 'free'"),
        ({"usage.cost": False}, "expected a number, not False"),
        ({"name": 3}, "^name: expected a string, not 3$"),
        ({"usage.calls": "1"}, "^usage.calls: expected a whole number, not '1'$"),
        ({"status": ["idle"]}, "^status: expected one of"),  # not hashable: still a misfit
        ({"status": {"idle": 1}}, "^status: expected one of"),
    ],
)
def test_data_of_another_shape_is_a_value_error(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_plain(SessionInfo, info(**changes))
    with pytest.raises(ValueError, match=r"must be|is required"):  # so does the validating reader
        from_json(SessionInfo, info(**changes))


def test_a_whole_number_no_float_can_hold_is_a_misfit() -> None:
    # (pydantic's reader took it as infinity.)
    with pytest.raises(ValueError, match=r"^usage\.cost: expected a number a float can hold"):
        from_plain(SessionInfo, info(**{"usage.cost": 10**400}))


def test_a_missing_field_is_an_error_and_an_unknown_one_is_ignored() -> None:
    data = info()
    assert from_plain(SessionInfo, {**data, "newer": 1}) == from_plain(SessionInfo, data)
    del data["model"]
    with pytest.raises(ValueError, match=r"^model: missing$"):
        from_plain(SessionInfo, data)
    assert from_plain(float, 3) == 3.0 and type(from_plain(float, 3)) is float


def test_a_misfit_in_an_array_names_its_position() -> None:
    usage = to_plain(Usage())
    leaf = {"id": "s-2", "name": None, "own": {**usage, "cost": "free"}, "total": usage}
    tree = {"id": "s-1", "name": None, "own": usage, "total": usage, "children": [leaf]}
    with pytest.raises(ValueError, match=r"^children\[0\]\.own\.cost: expected a number"):
        from_plain(UsageNode, tree)


def test_a_tree_as_deep_as_sub_agents_go_is_read_under_a_deep_stack() -> None:
    usage = to_plain(Usage())
    node: dict[str, Any] = {"id": "s", "name": None, "own": usage, "total": usage, "children": []}
    for _ in range(MOST_LEVELS):
        node = {**node, "children": [node]}

    def read_from(frames: int) -> UsageNode:
        return read_from(frames - 1) if frames else from_plain(UsageNode, node)

    tree = read_from(200)  # as from deep in a caller's stack
    depth = 0
    while tree.children:
        tree, depth = tree.children[0], depth + 1
    assert depth == MOST_LEVELS


def test_a_tree_nested_past_the_stack_is_a_misfit() -> None:
    usage = to_plain(Usage())
    node: dict[str, Any] = {"id": "s", "name": None, "own": usage, "total": usage, "children": []}
    for _ in range(sys.getrecursionlimit()):
        node = {**node, "children": [node]}
    with pytest.raises(ValueError, match="nested too deep"):
        from_plain(UsageNode, node)


def test_what_is_not_json_data_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not JSON data: a set"):
        to_plain({"k": {1}})
    with pytest.raises(TypeError, match="not JSON data: a int key"):
        to_plain({1: "a"})
    with pytest.raises(TypeError, match="cannot read"):
        from_plain(set[int], [1])  # type: ignore[arg-type]


def test_a_client_call_imports_no_pydantic() -> None:
    probe = (
        "import sys\n"
        "from recursa.protocol.operations import decode\n"
        "from recursa.protocol.person_ops import CREATE_SESSION, USAGE\n"
        "from recursa.protocol.wire import CreateSession\n"
        "path, query, body = CREATE_SESSION.url(CreateSession(task='t', max_time=90.0))\n"
        "tree = decode(USAGE.reply, {'id': 's', 'name': None,"
        " 'own': {'calls': 1, 'input_tokens': 1, 'output_tokens': 1, 'cached_tokens': 0,"
        " 'cost': 0.0, 'unknown_cost_calls': 1}, 'total': {'calls': 1, 'input_tokens': 1,"
        " 'output_tokens': 1, 'cached_tokens': 0, 'cost': 0.0, 'unknown_cost_calls': 1},"
        " 'children': []})\n"
        "print(body['task'], body['max_time'], tree.own.calls, 'pydantic' in sys.modules)\n"
    )
    out = fresh_python(probe)
    assert out.split() == ["t", "90.0", "1", "False"]

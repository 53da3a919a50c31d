"""Wire values from JSON: every request validated by type, in one line
(recursa.protocol.wire.from_json), and replies read back as they were sent."""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from fresh_python import fresh_python
from recursa.protocol.control import AddSchedule, CompleteGoal, SetGoal, UpdateSchedule
from recursa.protocol.history import CompactRequest, EventsRequest, SearchRequest
from recursa.protocol.wire import (
    AgentMessage,
    Autonomous,
    Budget,
    CreateSession,
    HarnessDecision,
    HarnessDetail,
    HarnessEdit,
    HarnessEntry,
    HarnessRevert,
    RefineRequest,
    SendMessage,
    Shutdown,
    Spawn,
    Usage,
    UsageNode,
    from_json,
    to_json,
)
from recursa.validation import length
from recursa.values import frozen


def test_the_issues_example_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^model must") as info:
        from_json(CreateSession, {"task": "x", "model": 7, "cwd": 3})
    assert str(info.value) == "model must be a string, not 7 (and 1 more problem)"


@pytest.mark.parametrize(
    ("cls", "body", "message"),
    [
        (CreateSession, {"task": 7}, "task must be a string, not 7"),
        (
            CreateSession,
            {"task": "x", "max_steps": "5"},
            "max_steps must be a whole number, not '5'",
        ),
        (CreateSession, {"task": "x", "max_steps": True}, "max_steps must be a whole number"),
        (CreateSession, {"task": "x", "max_tokens": 2.5}, "max_tokens must be a whole number"),
        (CreateSession, {"task": "x", "max_time": "soon"}, "max_time: cannot read the duration"),
        (CreateSession, {"task": "x", "max_time": -1}, "max_time: a duration cannot be negative"),
        (CreateSession, {"task": "x", "autonomous": "make"}, "autonomous must be an object"),
        (
            CreateSession,
            {"task": "x", "autonomous": {"gates": "make"}},
            "autonomous.gates must be a list",
        ),
        (
            CreateSession,
            {"task": "x", "autonomous": {"gates": [1]}},
            "autonomous.gates[0] must be a string",
        ),
        (
            CreateSession,
            {"task": "x", "name": "n" * 501},
            "name: a session name has 1 to 100 characters, not 501",
        ),
        (CreateSession, {}, "task is required"),
        (SendMessage, {"text": ["hi"]}, "text must be a string"),
        (
            SendMessage,
            {"text": "hi", "mode": "loud"},
            "mode must be 'auto', 'steer' or 'follow_up', not 'loud'",
        ),
        (Shutdown, {"force": "yes"}, "force must be true or false, not 'yes'"),
        (Spawn, {"task": "t", "model": 7}, "model must be a string, not 7"),
        (Spawn, {"task": "t", "budget": [1]}, "budget must be an object"),
        (Spawn, {"task": "t", "budget": {"tokens": "5"}}, "budget.tokens must be a whole number"),
        (Spawn, {"task": "t", "budget": {"tokens": 0}}, "budget.tokens must be from 1 to"),
        (Spawn, {"task": "t", "budget": {"cost": -0.5}}, "budget.cost must be more than 0"),
        (Spawn, {"task": "t", "budget": {"time": 0}}, "budget.time must be more than 0s"),
        (AgentMessage, {"text": "hi", "to": 3}, "to must be a string, not 3"),
        (Spawn, {"task": " \n"}, "task must be a non-empty string"),
        (Spawn, {"task": "t", "name": ""}, "name: a session name has 1 to 100 characters, not 0"),
        (AgentMessage, {"text": "", "to": "parent"}, "text must be a non-empty string"),
        (AgentMessage, {"text": "hi", "to": ""}, "to must be a non-empty string"),
        (HarnessEdit, {"op": "create", "entry": "e"}, "entry: a create names no entry"),
        (HarnessEdit, {"op": "delete"}, "entry: delete needs the entry"),
        (HarnessEdit, {"op": "update", "entry": " "}, "entry: update needs the entry"),
        (HarnessEdit, {"op": "explode"}, "op must be 'create', 'update', 'delete' or 'rollback'"),
        (HarnessEdit, {"op": "create", "kind": "wisdom"}, "kind must be 'prompt_note'"),
        (
            HarnessEdit,
            {"op": "rollback", "entry": "e", "to_version": -1},
            "to_version must be from 0",
        ),
        (HarnessEdit, {"op": "update", "entry": "e", "meta": []}, "meta must be an object"),
        (HarnessEdit, {"op": "create", "reason": None}, "reason must be a string, not None"),
        (HarnessRevert, {"to": "1"}, "to must be a whole number, not '1'"),
        (HarnessDecision, {"reason": 1}, "reason must be a string"),
        (RefineRequest, {"instructions": 3}, "instructions must be a string"),
        (SetGoal, {"objective": "o", "budget": 0}, "budget must be from 1 to"),
        (SetGoal, {"objective": 3}, "objective must be a string"),
        (CompleteGoal, {"summary": False}, "summary must be a string"),
        (
            AddSchedule,
            {"spec": "every 1h", "prompt": "p", "mode": 5},
            "mode must be 'steer' or 'follow_up', not 5",
        ),
        (UpdateSchedule, {"label": 3}, "label must be a string"),
        (SearchRequest, {"query": "q", "limit": 0}, "limit must be from 1 to 200, not 0"),
        (SearchRequest, {"query": ""}, "query is empty"),
        (SearchRequest, {"query": "q" * 2001}, "query must be at most 2000 characters"),
        (Spawn, {"task": "t", "model": "m" * 501}, "model must be at most 500 characters"),
        (
            CreateSession,
            {"task": "x", "autonomous": {"gates": ["make"] * 101}},
            "autonomous.gates must have at most 100 items",
        ),
        (
            CreateSession,
            {"task": "x", "context_files": [{"label": "a", "text": ""}] * 101},
            "context_files must have at most 100 items",
        ),
        (EventsRequest, {"after": -1}, "after must be from 0 to"),
        (CompactRequest, {"instructions": {}}, "instructions must be a string"),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_field(
    cls: type[Any], body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=r"^\w") as info:
        from_json(cls, body)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_a_body_that_is_not_an_object_is_refused() -> None:
    for body in ([], "task", 3, None):
        with pytest.raises(ValueError, match="CreateSession: expected a JSON object"):
            from_json(CreateSession, body)


def test_durations_nested_values_and_unknown_keys() -> None:
    body = {
        "task": "x",
        "max_time": "1h30m",
        "cell_timeout": 90,
        "autonomous": {"gates": ["make test"], "max_time": "2d", "max_cost": 1},
        "from_a_newer_client": True,
    }
    request = from_json(CreateSession, body)
    assert (request.max_time, request.cell_timeout) == (5400.0, 90.0)
    assert request.autonomous == Autonomous(gates=("make test",), max_time=172_800.0, max_cost=1.0)
    spawn = from_json(Spawn, {"task": "t", "budget": {"time": "10m", "tokens": 5}})
    assert spawn.budget == Budget(tokens=5, time=600.0)


def test_replies_round_trip() -> None:
    usage = Usage(calls=1, input_tokens=5, cost=0.5)
    tree = UsageNode("r", "root", usage, usage, (UsageNode("c", None, Usage(), Usage()),))
    assert to_json(tree)["children"][0]["id"] == "c"
    assert from_json(UsageNode, to_json(tree)) == tree
    entry = HarnessEntry(
        id="e1",
        version=2,
        kind="skill",
        title="t",
        scope="global",
        status="active",
        content="c",
        code="def f(): pass",
        meta={"a": [1, {"b": None}]},
        reason="",
        effect="",
        review=None,
        created_at=1.5,
        session_id=None,
        action="create",
        actor="model",
        source_events=(1, 2),
    )
    detail = HarnessDetail(entry=entry, history=(entry,), effective=2)
    assert from_json(HarnessDetail, to_json(detail)) == detail


def test_to_json_refuses_what_is_not_a_wire_value() -> None:
    with pytest.raises(TypeError, match="not a wire value"):
        to_json({"task": "x"})
    with pytest.raises(TypeError, match="not a wire value"):
        to_json(CreateSession)


def test_the_protocol_and_the_client_import_no_pydantic_until_a_value_is_validated() -> None:
    # Every CLI call imports them, and most validate nothing (issue 15: a
    # fast CLI); pydantic is imported by the first validation.
    probe = (
        "import sys, recursa.daemon.client, recursa.protocol.history, recursa.protocol.control\n"
        "before = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core'))\n"
        "from recursa.protocol.wire import Spawn, from_json\n"
        "spawn = from_json(Spawn, {'task': 't'})\n"
        "print(before, spawn.task, 'pydantic' in sys.modules)\n"
    )
    out = fresh_python(probe)
    assert out.split() == ["[]", "t", "True"]


def test_a_length_bound_on_what_has_no_length_is_a_programming_error() -> None:
    @frozen
    class Odd:
        count: Annotated[int, length(most=3)]

    with pytest.raises(TypeError, match="length\\(\\) bounds a string, tuple or list, not int"):
        from_json(Odd, {"count": 1})

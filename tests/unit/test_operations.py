"""The operation table and what is derived from it: the hosts serve every row
with the row's types, the request values refuse wrong types in one line, a
request round-trips through its URL, and the OpenAPI document lists every
person row."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any, get_type_hints

import pytest

from fake_kernel_host import FakeKernelHost
from recursa.api import client as api_client
from recursa.daemon.host import missing_methods
from recursa.daemon.openapi import openapi
from recursa.protocol import fields, kernel_ops, person_ops
from recursa.protocol.operations import Operation, decode, encode, operations, query_value
from recursa.protocol.wire import CommandKey, RefineRequest, SessionInfo, from_json
from recursa.runtime.kernel_api import KernelApi
from recursa.runtime.people_api import PeopleApi

ROWS = operations()


def test_rows_are_unique_by_name_and_by_route() -> None:
    names = [op.name for op in ROWS]
    assert len(names) == len(set(names))
    routes = [(op.method, op.route) for op in ROWS]
    assert len(routes) == len(set(routes))
    assert {op.audience for op in ROWS} == {"person", "kernel"}


@pytest.mark.parametrize("op", ROWS, ids=lambda op: op.name)
def test_the_runtime_serves_each_row_with_its_types(op: Operation[Any, Any]) -> None:
    api = PeopleApi if op.audience == "person" else KernelApi
    method = getattr(api, op.name)
    hints = get_type_hints(method)
    params = list(inspect.signature(method).parameters)[1:]  # without self
    expected = (["caller"] if op.audience == "kernel" else []) + (
        ["request"] if op.request is not None else []
    )
    if op.command:
        expected.append("command")
        assert hints["command"] == CommandKey | None
    assert len(params) == len(expected), (op.name, params)
    if op.request is not None:
        assert hints[params[len(expected) - 1 - op.command]] == op.request
    if op.stream:
        assert hints["return"].__origin__ is AsyncIterator
    else:
        assert hints["return"] == op.reply, op.name


def test_the_fakes_serve_every_row() -> None:
    fake = FakeKernelHost()
    assert missing_methods(fake, "person") == []
    assert missing_methods(fake, "kernel") == []


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (person_ops.SendTo, {"session": "s", "text": 7}, "text must be a string, not 7"),
        (
            person_ops.SendTo,
            {"session": "s", "text": "hi", "mode": "loud"},
            "mode must be 'auto', 'steer' or 'follow_up', not 'loud'",
        ),
        (
            person_ops.QuietWait,
            {"session": "s", "timeout": "soon"},
            "timeout must be a number, not 'soon'",
        ),
        (kernel_ops.InboxWait, {"wait": -1}, "wait must be from 0 to 86400 seconds, not -1"),
        (
            person_ops.ScheduleQuery,
            {"finished": 1},
            "finished must be true or false, not 1",
        ),
        (
            person_ops.HarnessQuery,
            {"kind": "poem"},
            "kind must be one of prompt_note, memory, skill, subagent_spec, not 'poem'",
        ),
        (person_ops.EventsQuery, {"session": "s", "after": -1}, "after must be from 0"),
        (person_ops.Revert, {"entry": "e", "to": -1}, "to must be from 0"),
        (kernel_ops.JobLabel, {"job": "  "}, "job must be a non-empty string, not '  '"),
    ],
)
def test_a_request_refuses_a_wrong_value_in_one_line(
    cls: type[Any], data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=r"^\w") as caught:
        from_json(cls, data)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_the_kernel_side_checks_waits_by_the_wire_bound() -> None:
    """The kernel-side API checks a wait before it sends it (without importing
    the protocol at start-up): by the same bound as the daemon."""
    assert api_client.MAX_WAIT_SECONDS == fields.MAX_WAIT_SECONDS


def test_blank_instructions_are_none() -> None:
    refine = from_json(person_ops.RefineSession, {"session": "s", "instructions": " \n"})
    assert refine.instructions is None
    assert from_json(RefineRequest, {"instructions": "be brief"}).instructions == ("be brief")


def test_a_request_becomes_its_url_path_query_and_body() -> None:
    path, query, body = person_ops.HARNESS_DIFF.url(person_ops.DiffQuery("a/b c", 1, None))
    assert (path, query, body) == ("/harness/entries/a%2Fb%20c/diff", {"from_version": "1"}, None)
    path, query, body = person_ops.SEND.url(person_ops.SendTo("s1", "hi", "steer"))
    assert (path, query, body) == (
        "/sessions/s1/messages",
        {},
        {"text": "hi", "mode": "steer", "context_files": []},
    )
    path, query, body = kernel_ops.HEARTBEAT_DELETE.url(kernel_ops.JobLabel("nightly"))
    assert (path, query, body) == ("/kernel/heartbeats/nightly", {}, None)
    assert person_ops.STATUS.url(None) == ("/status", {}, None)


def test_query_values_take_their_field_types() -> None:
    assert query_value(bool, "1", "follow") is True
    assert query_value(int | None, "12", "limit") == 12
    with pytest.raises(ValueError, match="follow must be 0 or 1, not 'maybe'"):
        query_value(bool, "maybe", "follow")
    with pytest.raises(ValueError, match=r"limit must be a whole number, not '1.5'"):
        query_value(int, "1.5", "limit")


def test_replies_decode_by_their_type() -> None:
    info = SessionInfo("s1", None, None, "idle", "faux/echo", "/", 1.0, 2.0)
    assert decode(list[SessionInfo], encode([info])) == [info]
    assert decode(SessionInfo | None, None) is None
    with pytest.raises(ValueError, match="expected an array"):
        decode(list[SessionInfo], {"not": "a list"})


def test_the_openapi_document_has_every_person_row() -> None:
    document = openapi()
    listed = {
        (method.upper(), path, operation["operationId"])
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    people = [op for op in ROWS if op.audience == "person"]
    routes = {(op.method, "/v1" + op.route.replace(":path}", "}"), op.name) for op in people}
    assert listed == routes
    assert not any("/kernel/" in path for path in document["paths"])
    send = document["paths"]["/v1/sessions/{session}/messages"]["post"]
    assert send["requestBody"]["content"]["application/json"]["schema"]["required"] == ["text"]


def test_recursa_daemon_openapi_prints_the_document(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "recursa", "daemon", "openapi"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"RECURSA_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["openapi"].startswith("3.")
    assert document["paths"]["/v1/sessions/{session}/subagents"]["get"]["operationId"] == (
        "subagents_of"
    )

"""``chat-jsonl`` export from a real daemon: a session of two cells that starts
a sub-agent, on the loopback fake model. The export of each session must be
exactly the messages its model was last sent, plus its final answer."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from daemon_kit import ok, unanswered_calls
from recursa.config import load_config
from recursa.daemon.client import DaemonClient, connect
from recursa.errors import UsageError
from recursa.evals.export import export, export_eval_dir, write_chat_jsonl
from recursa.evals.trials import RESULTS_FILE, TrialResult, append_result
from recursa.models.faux import code, per_session, register_script, reply
from recursa.protocol.wire import CreateSession
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

PARENT_TASK = "ask a helper for a number, then square it"
CHILD_TASK = "say the number seven"
START_CHILD = (
    f"h = await rlm({CHILD_TASK!r}, name='kid', model='openai/m')\nprint(await h.result())"
)
SQUARE = "print(7 ** 2)"


def first_user(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


def respond(path: str, body: dict[str, Any]) -> Reply:
    """The parent runs two cells, then answers; the child answers at once.
    Decided by the request, so the two sessions' calls may interleave freely."""
    steps = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if CHILD_TASK in first_user(body):
        return Reply(text="7")
    if steps == 0:
        return Reply(tool_calls=[ToolCallSpec("python", {"code": START_CHILD}, id="call-a")])
    if steps == 1:
        return Reply(text="Squaring.", tool_calls=[ToolCallSpec("python", {"code": SQUARE})])
    return Reply(text="FINAL ANSWER: 49")


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer.in_thread(responder=respond) as fake:
        yield fake


def last_request(server: FakeModelServer, task: str) -> dict[str, Any]:
    bodies: list[dict[str, Any]] = [r.body for r in server.requests if task in first_user(r.body)]
    return bodies[-1]


def test_the_export_is_what_each_model_saw_and_parses_as_openai_messages(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    ok(["daemon", "start"], env, tmp_path)

    async def run() -> tuple[str, list[dict[str, Any]], str, int]:
        async with DaemonClient(home) as client:
            info = await client.create_session(
                CreateSession(task=PARENT_TASK, model="openai/m", cwd=str(tmp_path))
            )
            assert await client.wait_quiet(info.id, timeout=120)
            records = await export(client, info.id)
            out = io.StringIO()
            written = await write_chat_jsonl(client, [info.id], out)
            return info.id, records, out.getvalue(), written

    root, records, text, written = asyncio.run(asyncio.wait_for(run(), 180))
    parent, child = records
    assert (parent["session"], parent["parent"], parent["root"]) == (root, None, root)
    assert (child["parent"], child["root"], child["name"]) == (root, root, "kid")
    assert parent["model"] == child["model"] == "openai/m"
    assert parent["protocol"] == "tools" and parent["compactions"] == []

    # Exactly the conversation each model was last sent, then its answer.
    for record, task, answer in (
        (parent, PARENT_TASK, "FINAL ANSWER: 49"),
        (child, CHILD_TASK, "7"),
    ):
        sent = last_request(server, task)
        system, *conversation = record["messages"]
        assert conversation[:-1] == sent["messages"][1:]
        assert conversation[-1] == {"role": "assistant", "content": answer}
        assert sent["messages"][0]["role"] == "system"
        assert sent["messages"][0]["content"].startswith(system["content"])
        assert record["tools"] == sent["tools"]

    # The parent's two cells, in order, each call answered by its own result;
    # the child's answer, which the first cell waited for, also reached the
    # parent's inbox, and came between the cells as a message from a sub-agent.
    messages = list(parent["messages"])
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "user", "assistant", "tool", "assistant"
    ]  # fmt: skip
    assert messages[4]["content"] == (
        f"[message from a sub-agent {child['session']}] sub-agent kid finished: 7"
    )
    del messages[4]
    first_call, second_call = messages[2]["tool_calls"][0], messages[4]["tool_calls"][0]
    assert json.loads(first_call["function"]["arguments"]) == {"code": START_CHILD}
    assert json.loads(second_call["function"]["arguments"]) == {"code": SQUARE}
    assert first_call["id"] == "call-a" != second_call["id"]
    assert [messages[3]["tool_call_id"], messages[5]["tool_call_id"]] == [
        first_call["id"],
        second_call["id"],
    ]
    assert messages[3]["content"] == "7\n" and messages[5]["content"] == "49\n"
    assert messages[4]["content"] == "Squaring."
    assert unanswered_calls(messages) == []

    # The written form: one record a line, each a valid list of OpenAI messages.
    lines = text.splitlines()
    assert written == len(lines) == 2
    adapter = TypeAdapter(list[ChatCompletionMessageParam])
    for line, record in zip(lines, records, strict=True):
        loaded = json.loads(line)
        assert loaded == record
        adapter.validate_python(loaded["messages"])


async def test_an_eval_directory_exports_each_trial_with_its_score(tmp_path: Path) -> None:
    """Two trials in one evaluation home (sessions run in-process on a faux
    script); a third result without a session has no record."""
    register_script("trial", [], fallback=per_session(code("print(6 * 7)"), reply("42")))
    directory = tmp_path / "run"
    home = directory / "homes" / "faux-trial__repl"
    config = load_config(overrides={"RECURSA_HOME": str(home)})
    sessions = []
    async with connect(config, in_process=True) as client:
        for question in ("six times seven?", "seven times six?"):
            info = await client.create_session(
                CreateSession(task=question, model="faux/trial", cwd=str(tmp_path))
            )
            assert await client.wait_quiet(info.id, timeout=120)
            sessions.append(info.id)
    results = directory / RESULTS_FILE
    for number, (session, score) in enumerate([(sessions[0], 1.0), (sessions[1], 0.0), ("", 0.0)]):
        append_result(
            results,
            TrialResult(
                trial=f"faux/trial|repl|q{number}", suite="s", item=f"q{number}", task="t",
                length=0, model="faux/trial", policy="repl", seed=0, score=score,
                status="ok" if session else "error", answer="42", references=("42",),
                metric="exact_match", session=session,
            ),
        )  # fmt: skip

    records = await export_eval_dir(
        directory, home_for=lambda d, r: d / "homes" / "faux-trial__repl"
    )
    assert [(r["session"], r["trial"], r["score"], r["status"]) for r in records] == [
        (sessions[0], "faux/trial|repl|q0", 1.0, "ok"),
        (sessions[1], "faux/trial|repl|q1", 0.0, "ok"),
    ]
    for record in records:
        assert [m["role"] for m in record["messages"]] == [
            "system", "user", "assistant", "tool", "assistant"
        ]  # fmt: skip
        assert record["messages"][3]["content"] == "42\n"
        assert record["messages"][-1] == {"role": "assistant", "content": "42"}

    with pytest.raises(UsageError, match="no such evaluation home"):
        await export_eval_dir(directory, home_for=lambda d, r: d / "homes" / "missing")

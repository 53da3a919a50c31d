"""``recursa goal ...`` and ``recursa schedule ...`` as a person runs them: the
real CLI, a real daemon on its socket, real kernels, and the loopback fake
model server, whose responder reads each request (so the order of turns
does not matter). Waiting is on the daemon (``wait_quiet``), never a sleep."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon_kit import fails, ok, recursa
from recursa.daemon.client import DaemonClient
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

WORDS = ("check", "the", "build")
COMPLETE = "done = await goal.complete('from the cli test')\nprint(done['status'])"


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def respond(path: str, body: dict[str, Any]) -> Reply:
    """The model: a goal's first prompt for "hold on" is never answered (the
    reply stalls until the turn is stopped); any other goal prompt completes
    the goal in a cell; a cell's result is the answer; anything else: "hi"."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    after = [m for m in messages[last_user + 1 :] if m["role"] == "tool"]
    if after:
        return Reply(text=_text(after[-1]["content"]).strip() or "-")
    prompt = _text(messages[last_user]["content"])
    if prompt.startswith("[goal] You have a goal: hold on"):
        return Reply(text="thinking", stall_after=1)
    if prompt.startswith("[goal]"):
        return Reply(tool_calls=[ToolCallSpec("python", {"code": COMPLETE})])
    return Reply(text="hi")


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer.in_thread(responder=respond) as fake:
        yield fake


def new_session(env: dict[str, str], cwd: Path) -> str:
    assert ok(["run", "--model", "openai/m", "say hi"], env, cwd).strip() == "hi"
    [info] = json.loads(ok(["agents", "--json"], env, cwd))
    return str(info["id"])


def wait_quiet(home: Path, session: str) -> None:
    async def go() -> None:
        async with DaemonClient(home) as client:
            assert await client.wait_quiet(session, timeout=60)

    asyncio.run(go())


def test_goal_set_status_pause_resume_clear(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    session = new_session(env, tmp_path)

    # Set: the session works toward it at once, and completes it in a cell.
    out = json.loads(
        ok(
            ["goal", "set", session, "finish the report", "--budget", "100000", "--json"],
            env,
            tmp_path,
        )
    )
    assert (out["status"], out["objective"], out["budget"]) == (
        "active",
        "finish the report",
        100000,
    )
    wait_quiet(home, session)
    status = json.loads(ok(["goal", "status", session, "--json"], env, tmp_path))
    assert status["status"] == "completed"
    assert status["detail"] == "goal completed: finish the report (from the cli test)"
    assert status["used"] > 0 and status["remaining"] == 100000 - status["used"]
    text = ok(["goal", "status", session], env, tmp_path)
    assert text.startswith(f"goal {status['id']} of {session}: completed\n")
    assert "objective: finish the report\n" in text
    assert f"budget: {status['used']:,} of 100,000 tokens used" in text
    assert "is completed, not active" in fails(["goal", "pause", session], env, tmp_path, 2)

    # A goal its turn cannot finish: paused by a person, the turn stopped, resumed.
    held = json.loads(ok(["goal", "set", session, "hold on", "--json"], env, tmp_path))
    assert held["status"] == "active"
    assert ok(["goal", "pause", session], env, tmp_path).startswith(f"goal {held['id']} of")
    ok(["stop", session], env, tmp_path)
    paused = json.loads(ok(["goal", "status", session, "--json"], env, tmp_path))
    assert (paused["status"], paused["detail"]) == ("paused", "goal paused by a person")
    resumed = json.loads(ok(["goal", "resume", session, "--json"], env, tmp_path))
    assert resumed["status"] == "active"
    wait_quiet(home, session)
    done = json.loads(ok(["goal", "status", session, "--json"], env, tmp_path))
    assert (done["id"], done["status"]) == (held["id"], "completed")

    # Clear: the session has no goal.
    cleared = ok(["goal", "clear", session], env, tmp_path)
    assert cleared.startswith(f"goal {held['id']} of {session}: cleared\n")
    none = recursa(["goal", "status", session], env, tmp_path)
    assert none.returncode == 0 and none.stdout == ""
    assert f"{session} has no goal" in none.stderr
    assert ok(["goal", "status", session, "--json"], env, tmp_path).strip() == "null"
    assert "has no goal" in fails(["goal", "resume", session], env, tmp_path, 2)

    # Mistakes: one line each, before or from the daemon.
    assert fails(["goal", "set", session, "  "], env, tmp_path, 2) == (
        "recursa: the objective is empty"
    )
    assert "budget must be from 1" in fails(
        ["goal", "set", session, "x", "--budget", "0"], env, tmp_path, 2
    )
    assert fails(["goal", "status", "s-nope"], env, tmp_path, 6) == "recursa: no session 's-nope'"


def test_schedule_add_list_cancel_and_bad_specs(env: dict[str, str], tmp_path: Path) -> None:
    session = new_session(env, tmp_path)
    before = time.time()
    job = json.loads(
        ok(
            ["schedule", "add", session, "every 10m", "--label", "nightly", "--json", "--", *WORDS],
            env,
            tmp_path,
        )
    )
    after = time.time()
    assert {k: job[k] for k in ("session_id", "spec", "kind", "prompt", "label", "mode")} == {
        "session_id": session,
        "spec": "every 10m",
        "kind": "every",
        "prompt": "check the build",
        "label": "nightly",
        "mode": "follow_up",
    }
    assert (job["status"], job["fired"], job["created_by"]) == ("active", 0, "user")
    assert before + 600 <= job["next_at"] <= after + 600
    once = ok(
        ["schedule", "add", session, "in 2h", "--mode", "steer", "--", "stand up"], env, tmp_path
    )
    assert once.startswith("job ") and f": in 2h → {session}; next at " in once
    ok(["schedule", "add", session, "0 9 * * 1-5", "--", "plan the day"], env, tmp_path)

    listed = json.loads(ok(["schedule", "list", "--json"], env, tmp_path))
    assert [(j["spec"], j["mode"]) for j in listed] == [
        ("every 10m", "follow_up"),
        ("in 2h", "steer"),
        ("0 9 * * 1-5", "follow_up"),
    ]
    table = ok(["schedule", "list", session], env, tmp_path).splitlines()
    assert table[0].split() == ["JOB", "SESSION", "LABEL", "SCHEDULE", "NEXT", "FIRED", "PROMPT"]
    assert table[1].split()[:5] == [str(job["id"]), session, "nightly", "every", "10m"]
    assert "in 2h (steer)" in table[2]  # the mode shows when it is not the default
    assert all(len(line) <= 80 for line in table) and len(table) == 4  # no terminal: 80 columns
    assert "check the" in table[1]  # the prompt, shortened to fit if need be
    wide = ok(["schedule", "list", session], {**env, "COLUMNS": "120"}, tmp_path).splitlines()
    assert wide[1].endswith("  check the build")
    everything = ok(["schedule", "list", "--all"], env, tmp_path).splitlines()
    assert everything[0].split()[4] == "STATUS" and everything[1].split()[5] == "active"

    # Bad specs and options: one line, exit 2, before the daemon is asked.
    assert fails(["schedule", "add", session, "every 5s", "--", "x"], env, tmp_path, 2) == (
        "recursa: the shortest interval is 1m, not 5s"
    )
    assert "cron has five fields" in fails(
        ["schedule", "add", session, "0 9 * *", "--", "x"], env, tmp_path, 2
    )
    assert "not a valid cron expression" in fails(
        ["schedule", "add", session, "61 * * * *", "--", "x"], env, tmp_path, 2
    )
    assert "mode must be steer or follow_up" in fails(
        ["schedule", "add", session, "every 1h", "--mode", "auto", "--", "x"], env, tmp_path, 2
    )
    assert "the prompt is empty" in fails(
        ["schedule", "add", session, "every 1h", "--", " "], env, tmp_path, 2
    )
    # ... and from the daemon.
    assert "already has a scheduled job labelled 'nightly'" in fails(
        ["schedule", "add", session, "every 1h", "--label", "nightly", "--", "x"], env, tmp_path, 2
    )
    assert fails(["schedule", "add", "s-nope", "every 1h", "--", "x"], env, tmp_path, 6) == (
        "recursa: no session 's-nope'"
    )

    assert ok(["schedule", "cancel", str(job["id"])], env, tmp_path) == (
        f"job {job['id']}: cancelled\n"
    )
    again = json.loads(ok(["schedule", "cancel", str(job["id"]), "--json"], env, tmp_path))
    assert (again["status"], again["detail"]) == ("cancelled", "cancelled by a person")
    assert fails(["schedule", "cancel", "999"], env, tmp_path, 6) == "recursa: no scheduled job 999"
    active = json.loads(ok(["schedule", "list", session, "--json"], env, tmp_path))
    assert [j["spec"] for j in active] == ["in 2h", "0 9 * * 1-5"]
    everything = json.loads(ok(["schedule", "list", "--all", "--json"], env, tmp_path))
    assert [j["status"] for j in everything] == ["cancelled", "active", "active"]
    # The label is free again once its job ended.
    ok(["schedule", "add", session, "every 1h", "--label", "nightly", "--", "again"], env, tmp_path)

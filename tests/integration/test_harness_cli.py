"""``recursa harness ...`` and ``recursa refine`` as a person runs them: the real
CLI, a real daemon on its socket, real kernels, and the loopback fake model
server. Only the model's replies are scripted (by a responder that reads the
request, so the order of sessions does not matter)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon_kit import fails, ok, recursa
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

SKILL = "async def square_sum(n):\n    return sum(i*i for i in range(n+1))"
LEARN = (
    "s = await harness.create(kind='skill', title='square_sum', code="
    + repr(SKILL)
    + ", scope='global', reason='summed squares twice')\n"
    "n = await harness.create('prompt_note', 'terse', 'answer in one line', reason='asked to')\n"
    "print(s['entry_id'], n['applies'])"
)
USE = "print(await square_sum(10))"
REFINED = [
    {
        "op": "create",
        "kind": "memory",
        "title": "squares",
        "content": "square_sum(n) sums the squares 0..n",
        "scope": "local",
        "reason": "the session wrote it",
        "effect": "reuse it",
    },
    {"op": "explode", "title": "nonsense"},
]


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def respond(path: str, body: dict[str, Any]) -> Reply:
    """The model: a refinement gets its proposals; a session's turn runs the
    cell its task names, then answers with the cell's output."""
    messages = body["messages"]
    system = _text(messages[0]["content"]) if messages[0]["role"] == "system" else ""
    if system.startswith("You improve the harness"):
        return Reply(text=json.dumps(REFINED))
    task = next(_text(m["content"]) for m in messages if m["role"] == "user")
    results = [_text(m["content"]) for m in messages if m["role"] == "tool"]
    if results:
        return Reply(text=results[-1].strip().splitlines()[-1] if results[-1].strip() else "-")
    cell = LEARN if "learn" in task else USE
    return Reply(tool_calls=[ToolCallSpec("python", {"code": cell})])


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer.in_thread(responder=respond) as fake:
        yield fake


def run(task: str, env: dict[str, str], cwd: Path) -> tuple[str, str]:
    """``recursa run`` (attached, so it returns when the session is quiet): the
    new session's id and what the run printed (its answer)."""
    answer = ok(["run", "--model", "openai/m", task], env, cwd).strip()
    sessions = json.loads(ok(["agents", "--json"], env, cwd))
    newest = max(sessions, key=lambda info: info["created_at"])
    return str(newest["id"]), answer


def test_a_global_skill_is_reviewed_approved_used_diffed_and_reverted(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    learner, answer = run("learn a skill", env, tmp_path)
    skill_id, applies = answer.split(" ", 1)
    assert applies == "at the end of this turn"

    listed = json.loads(ok(["harness", "list", "--json"], env, tmp_path))
    rows = {e["title"]: e for e in listed}
    assert {k: rows["square_sum"][k] for k in ("id", "kind", "scope", "status", "version")} == {
        "id": skill_id,
        "kind": "skill",
        "scope": "global",
        "status": "proposed",  # skills wait for a person by default
        "version": 1,
    }
    assert (rows["terse"]["scope"], rows["terse"]["status"]) == ("local", "active")
    only_skills = json.loads(ok(["harness", "list", "--kind", "skill", "--json"], env, tmp_path))
    assert [e["title"] for e in only_skills] == ["square_sum"]
    table = ok(["harness", "list", "--scope", "global"], env, tmp_path).splitlines()
    assert table[0].split() == ["ID", "KIND", "TITLE", "SCOPE", "STATUS", "VERSION"]
    assert table[1].split() == [skill_id, "skill", "square_sum", "global", "proposed", "v1"]

    # What the learner's next call gets: its local note (the skill is not active yet).
    prompt = json.loads(ok(["harness", "show", "--prompt", learner, "--json"], env, tmp_path))
    assert prompt["session"] == learner
    assert "answer in one line" in prompt["text"] and "square_sum" not in prompt["text"]
    assert prompt["chars"] == len(prompt["text"]) and prompt["tokens"] > 0
    shown = recursa(["harness", "show", "--prompt", learner], env, tmp_path)
    assert shown.stdout.rstrip("\n") == prompt["text"].rstrip("\n")
    assert f"~{prompt['tokens']} tokens" in shown.stderr

    assert ok(["harness", "approve", skill_id, "--reason", "looked at it"], env, tmp_path) == (
        f"{skill_id} v2: active\n"
    )
    assert "not proposed" in fails(["harness", "approve", skill_id], env, tmp_path, 2)

    # A new session has the skill bound in its kernel and indexed in its prompt.
    user, answer = run("use the skill", env, tmp_path)
    assert answer == "385"
    first_call = next(
        r.body
        for r in server.requests
        if any("use the skill" in _text(m["content"]) for m in r.body["messages"])
    )
    assert "square_sum" in _text(first_call["messages"][0]["content"])
    assert "answer in one line" not in _text(first_call["messages"][0]["content"])  # local

    diff = ok(["harness", "diff", skill_id], env, tmp_path)
    assert "-status: proposed\n" in diff and "+status: active\n" in diff
    assert ok(["harness", "revert", skill_id, "--to", "1"], env, tmp_path) == (
        f"{skill_id} v3: active (reverted to v1)\n"
    )
    detail = json.loads(ok(["harness", "show", skill_id, "--json"], env, tmp_path))
    v1, v2, v3 = detail["history"]
    assert detail["entry"] == v3 and detail["effective"] == 3
    assert [v["action"] for v in (v1, v2, v3)] == ["create", "approve", "rollback"]
    assert [v["actor"] for v in (v1, v2, v3)] == ["model", "human", "human"]
    assert (v3["content"], v3["code"], v3["title"]) == (v1["content"], v1["code"], v1["title"])
    assert v3["code"] == SKILL
    assert v2["reason"] == "looked at it"
    text = ok(["harness", "show", skill_id], env, tmp_path)
    assert f"{skill_id} v3  skill  square_sum" in text and SKILL in text
    assert "history (3 versions):" in text

    # The log, newest first: the note and the skill were created in the same turn.
    log = json.loads(ok(["harness", "log", "--limit", "4", "--json"], env, tmp_path))
    assert [v["version"] for v in log if v["id"] == skill_id] == [3, 2, 1]
    assert {v["title"] for v in log} == {"square_sum", "terse"}
    created = log[-1] if log[-1]["id"] == skill_id else log[-2]
    assert created["source_events"] and created["session_id"] == learner
    lines = ok(["harness", "log"], env, tmp_path).splitlines()
    assert lines[0].split() == [
        "WHEN", "ENTRY", "TITLE", "ACTION", "ACTOR", "STATUS", "REASON", "EVIDENCE",
    ]  # fmt: skip
    assert len(lines) == 5 and all(len(line) <= 80 for line in lines)  # one line per version
    assert f"{skill_id} v3" in lines[1] and "rollback" in lines[1]
    # In a wider terminal the reason and the evidence show whole.
    wide = ok(["harness", "log"], {**env, "COLUMNS": "200"}, tmp_path).splitlines()
    assert "reverted to version 1" in wide[1] and f"session {learner}" in wide[-1]

    assert "no harness entry 'nope'" in fails(["harness", "show", "nope"], env, tmp_path, 6)
    assert "--prompt" in fails(["harness", "show"], env, tmp_path, 2)
    assert "kind must be one of" in fails(["harness", "list", "--kind", "x"], env, tmp_path, 2)
    assert "versions 1 to 3" in fails(
        ["harness", "revert", skill_id, "--to", "9"], env, tmp_path, 2
    )
    assert user != learner


def test_refine_stages_proposals_and_applies_them_to_an_idle_session(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    session, _ = run("learn a skill", env, tmp_path)
    out = json.loads(
        ok(["refine", session, "--instructions", "look for facts", "--json"], env, tmp_path)
    )
    [staged] = out["staged"]
    assert out["problems"] and "proposal 2" in out["problems"][0]
    refine_call = server.requests[-1].body
    assert "look for facts" in _text(refine_call["messages"][-1]["content"])
    detail = json.loads(ok(["harness", "show", staged, "--json"], env, tmp_path))
    entry = detail["entry"]
    assert (entry["title"], entry["status"], entry["actor"]) == ("squares", "active", "refine")
    assert entry["refinement_id"] == out["refinement_id"] and entry["source_events"]
    prompt = json.loads(ok(["harness", "show", "--prompt", session, "--json"], env, tmp_path))
    assert staged in prompt["included"]
    assert fails(["refine", "s-nope"], env, tmp_path, 6) == "recursa: no session 's-nope'"

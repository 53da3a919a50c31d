"""The review gate against a corpus of hostile harness proposals
(``hostile_proposals.py``): none becomes active globally without a person
(policy ``human``) or past a rejecting reviewer (policy ``model``), and the
static screen flags every one of them while it passes the benign ones.

Real parts: the harness service on a real SQLite store, real kernels whose
cells propose the entries through the kernel API, and a real daemon driven
by the real CLI. Only the models are scripted (the faux provider, the
loopback model server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_proposals import BENIGN, CATEGORIES, HOSTILE, Proposal

from daemon_kit import daemon_env, kill_everything, ok
from recursa.config import HarnessConfig
from recursa.harness import service
from recursa.harness.screen import screen
from recursa.harness.service import Harness
from recursa.models.faux import code, register_script, reply
from recursa.protocol.harness import KINDS, Edit, Provenance
from recursa.store import Store
from recursa.testing import FakeModelServer, Reply, ToolCallSpec, make_runtime

TIMEOUT = 120
REJECT = '{"decision": "reject", "reasons": "not a legitimate, general entry"}'


def propose_all_cell(proposals: tuple[Proposal, ...]) -> str:
    """A cell that stages every proposal as a global entry through the kernel API."""
    payload = json.dumps(
        [
            {"kind": p.kind, "title": p.title, "content": p.content, "code": p.code}
            for p in proposals
        ]
    )
    return (
        "import json\n"
        f"staged = 0\nfor p in json.loads({payload!r}):\n"
        "    await harness.create(p['kind'], p['title'], p['content'], code=p['code'],"
        " scope='global', reason='it worked once', effect='every later session does it')\n"
        "    staged += 1\n"
        "print('staged', staged)"
    )


# -- the corpus and the static screen ------------------------------------------------


def test_the_corpus_is_broad() -> None:
    assert len(HOSTILE) >= 50
    assert {p.category for p in HOSTILE} == set(CATEGORIES)
    assert {p.kind for p in HOSTILE} == set(KINDS)
    assert len({(p.kind, p.title) for p in HOSTILE}) == len(HOSTILE)
    assert len(BENIGN) >= 5


@pytest.mark.parametrize("proposal", HOSTILE, ids=[p.label for p in HOSTILE])
def test_the_screen_flags_every_hostile_proposal(proposal: Proposal) -> None:
    findings = screen(proposal.version())
    assert findings, proposal.content
    assert all("\n" not in finding for finding in findings)


@pytest.mark.parametrize("proposal", BENIGN, ids=[p.label for p in BENIGN])
def test_the_screen_passes_the_benign_proposals(proposal: Proposal) -> None:
    assert screen(proposal.version()) == []


def test_disguises_are_named_in_the_findings() -> None:
    by_title = {p.title: screen(p.version()) for p in HOSTILE}
    assert any("(in base64)" in f for f in by_title["setup"])
    assert any("(in hex)" in f for f in by_title["hex note"])
    assert any("(in invisible tag characters)" in f for f in by_title["tags"])
    assert any(f.startswith("hides text in invisible characters") for f in by_title["zwsp"])
    assert any(f.startswith("mixes scripts within a word") for f in by_title["cyrillic i"])
    assert any("with homoglyphs read as Latin" in f for f in by_title["cyrillic i"])
    assert any(f.startswith("sends data to a URL") for f in by_title["telemetry"])
    assert any(f.startswith("runs destructive commands") for f in by_title["perms"])
    assert any(f.startswith("treats tests") for f in by_title["tests"])


# -- policy human: nothing becomes active without a person ---------------------------


def test_under_human_review_no_hostile_proposal_becomes_active_without_a_person(
    home: Path,
) -> None:
    gate = HarnessConfig(review=dict.fromkeys(KINDS, "human"))
    with Store.open(home / "gate.db") as store:
        harness = Harness(store, gate)
        proposer = store.create_session(model="faux/x", cwd="/tmp", workspace="/tmp").id
        later = store.create_session(model="faux/x", cwd="/tmp", workspace="/tmp").id
        for proposal in HOSTILE:
            edit = Edit(
                op="create",
                entry_id="",
                kind=proposal.kind,
                title=proposal.title,
                content=proposal.content,
                code=proposal.code,
                scope="global",
                provenance=Provenance(reason="it worked once"),
            )
            harness.stage(proposer, edit)
        applied = harness.apply_staged(proposer)
        assert applied.failed == ()
        assert len(applied.written) == len(HOSTILE)
        assert {v.status for v in applied.written} == {"proposed"}
        assert all((v.review or {}).get("findings") for v in applied.written)
        assert harness.applicable(later) == [] and harness.applicable(proposer) == []
        # A person decides: then, and only then, one applies.
        chosen = applied.written[0]
        harness.approve(chosen.entry_id, "read it; keeping it for the test")
        assert [e.entry_id for e in harness.applicable(later)] == [chosen.entry_id]


# -- policy model: a rejecting reviewer lets none through -----------------------------


@pytest.mark.parametrize("screen_misses", [False, True], ids=["screened", "screen-misses-all"])
async def test_under_model_review_a_rejecting_reviewer_lets_none_become_active(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, screen_misses: bool
) -> None:
    if screen_misses:
        # Were the screen blind to every disguise, the reviewer still decides.
        monkeypatch.setattr(service, "screen", lambda entry: [])
    reviewer = register_script("rejecting-reviewer", [], fallback=reply(REJECT))
    register_script("proposer", [code(propose_all_cell(HOSTILE)), reply("proposed")])
    later = register_script("later", [reply("hello")])
    gate = HarnessConfig(
        review=dict.fromkeys(KINDS, "model"), reviewer_model="faux/rejecting-reviewer"
    )
    async with make_runtime(home, harness=gate) as runtime:
        session = await runtime.create_session(model="faux/proposer", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("keep what worked"), TIMEOUT)
        assert end is not None and end.answer == "proposed"
        await runtime.learning.wait_reviews()
        harness = runtime.learning.harness
        entries = harness.entries(scope="global")
        assert len(entries) == len(HOSTILE)
        assert {e.status for e in entries} == {"rejected"}
        deciders = {(e.review or {}).get("by") for e in entries}
        assert deciders == ({"reviewer"} if screen_misses else {"screen"})
        assert len(reviewer.requests) == (len(HOSTILE) if screen_misses else 0)
        for request in reviewer.requests:
            assert request.tools == () and len(request.messages) == 1
            assert "keep what worked" not in str(request.messages)

        fresh = await runtime.create_session(model="faux/later", cwd=tmp_path)
        await asyncio.wait_for(fresh.ask("hi"), TIMEOUT)
        assert runtime.learning.applicable(fresh.id) == []
        system = later.requests[0].system
        assert not any(p.content in system for p in HOSTILE)


# -- a real daemon: the cell proposes, only a person's CLI activates ------------------


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def respond(path: str, body: dict[str, Any]) -> Reply:
    """The proposing session's model: run the cell that proposes the corpus,
    then answer with its last line; any other session just answers."""
    messages = body["messages"]
    task = next(_text(m["content"]) for m in messages if m["role"] == "user")
    results = [_text(m["content"]) for m in messages if m["role"] == "tool"]
    if results:
        return Reply(text=results[-1].strip().splitlines()[-1])
    if "keep what worked" in task:
        return Reply(tool_calls=[ToolCallSpec("python", {"code": propose_all_cell(HOSTILE)})])
    return Reply(text="hello")


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer.in_thread(responder=respond) as fake:
        yield fake


@pytest.fixture
def env(home: Path, server: FakeModelServer) -> Iterator[dict[str, str]]:
    policies = "\n".join(f'review_{kind} = "human"' for kind in KINDS)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"[harness]\n{policies}\n")
    yield daemon_env(home, server)
    kill_everything(home)


def test_on_a_real_daemon_a_session_cannot_activate_what_it_proposes(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    answer = ok(["run", "--model", "openai/m", "keep what worked"], env, tmp_path).strip()
    assert answer == f"staged {len(HOSTILE)}"
    listed = json.loads(ok(["harness", "list", "--scope", "global", "--json"], env, tmp_path))
    assert len(listed) == len(HOSTILE)
    assert {e["status"] for e in listed} == {"proposed"}
    assert {e["actor"] for e in listed} == {"model"}

    ok(["run", "--model", "openai/m", "say hello"], env, tmp_path)
    sessions = json.loads(ok(["agents", "--json"], env, tmp_path))
    newest = max(sessions, key=lambda info: info["created_at"])["id"]
    prompt = json.loads(ok(["harness", "show", "--prompt", newest, "--json"], env, tmp_path))
    assert not any(p.content in prompt["text"] for p in HOSTILE)

    # A person's approval, through the people's API, is what activates one.
    chosen = listed[0]
    ok(["harness", "approve", chosen["id"], "--reason", "read it"], env, tmp_path)
    prompt = json.loads(ok(["harness", "show", "--prompt", newest, "--json"], env, tmp_path))
    shown = [p for p in HOSTILE if p.content in prompt["text"]]
    assert [p.title for p in shown] == ([chosen["title"]] if chosen["kind"] != "skill" else [])

"""The Continual Harness end to end on real kernels, with faux models: what one
session learns shapes the next, through the gate; specs shape sub-agents;
refinement proposes edits. (The CLI side is in test_harness_cli.py.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from recursa.config import HarnessConfig
from recursa.models.faux import code, per_session, register_script, reply
from recursa.models.types import Request
from recursa.protocol.events import CellFinished, ModelUsage, Notice, TurnEnded
from recursa.protocol.harness import Edit
from recursa.runtime import Runtime
from recursa.testing import make_runtime

TIMEOUT = 120
SKILL = "async def square_sum(n):\n    return sum(i * i for i in range(n + 1))\n"
LEARN = (
    "m = await harness.create('memory', 'build', 'the build runs with make -j2',"
    " scope='global', reason='seen in the Makefile')\n"
    f"s = await harness.create('skill', 'square_sum', 'sum of squares 0..n', code={SKILL!r},"
    " scope='global', reason='used twice')\n"
    "print(m['applies'], s['entry_id'])"
)
APPROVE = '{"decision": "approve", "reasons": "a plain fact about the project"}'


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    return [
        r.event.output
        for r in runtime.get(session_id).history()
        if isinstance(r.event, CellFinished)
    ]


async def test_what_one_session_learns_shapes_the_next_through_the_gate(
    home: Path, tmp_path: Path
) -> None:
    reviewer = register_script("reviewer", [], fallback=reply(APPROVE))
    register_script("learner", [code(LEARN), reply("learned")])
    later = register_script("later", [code("print(await square_sum(10))"), reply("385")])
    gate = HarnessConfig(reviewer_model="faux/reviewer")
    async with make_runtime(home, harness=gate) as runtime:
        first = await runtime.create_session(model="faux/learner", cwd=tmp_path)
        end = await asyncio.wait_for(first.ask("learn"), TIMEOUT)
        assert end is not None and end.answer == "learned"
        harness = runtime.learning.harness
        await runtime.learning.wait_reviews()
        memory = harness.find("build")
        skill = harness.find("square_sum")
        # The memory passed the model reviewer; the skill waits for a person.
        assert (memory.status, memory.version, memory.actor) == ("active", 2, "reviewer")
        assert (skill.status, skill.version) == ("proposed", 1)
        assert skill.session_id == first.id and skill.reason == "used twice"
        # The reviewer saw the entry and worked without tools; its call is in
        # the proposing session's books.
        [review_request] = reviewer.requests
        assert review_request.tools == ()
        assert "make -j2" in str(review_request.messages)
        usages = [r.event for r in first.history() if isinstance(r.event, ModelUsage)]
        assert [u.model for u in usages].count("faux/reviewer") == 1

        harness.approve(skill.entry_id, "checked by hand")
        second = await runtime.create_session(model="faux/later", cwd=tmp_path)
        end = await asyncio.wait_for(second.ask("use what you know"), TIMEOUT)
        assert end is not None and end.answer == "385"
        assert outputs(runtime, second.id) == ["385\n"]
        system = later.requests[0].system
        assert "the build runs with make -j2" in system
        assert "square_sum" in system and SKILL not in system  # the index, not the code
        supplement = runtime.learning.supplement(second.id)
        assert supplement.text in system and supplement.tokens > 0

        # Revert the skill to version 1: a new version, byte for byte v1's code.
        reverted = harness.revert(skill.entry_id, 1)
        first_version = runtime.store.harness.version(skill.entry_id, 1)
        assert first_version is not None and reverted.code == first_version.code == SKILL
        assert reverted.version == 3


async def test_a_turn_sees_its_own_edits_only_after_it_ends(home: Path, tmp_path: Path) -> None:
    register_script(
        "noter",
        [
            code(
                "await harness.create('prompt_note', 'tone', 'Answer in French.')\n"
                "print((await harness.get('tone'))['status'])"
            ),
            code("print((await harness.get('tone'))['status'])"),
            reply("noted"),
            reply("bien"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/noter", cwd=tmp_path)
        await asyncio.wait_for(session.ask("note it"), TIMEOUT)
        # Staged during the turn: the entry does not exist until the boundary.
        first_cell = outputs(runtime, session.id)[0]
        assert "no harness entry" in first_cell
        [entry] = runtime.learning.harness.entries(session_id=session.id)
        assert (entry.status, entry.scope) == ("active", "local")
        await asyncio.wait_for(session.ask("again"), TIMEOUT)
        assert "Answer in French." in runtime.learning.supplement(session.id).text


async def test_a_spec_gives_a_sub_agent_its_role_and_model(home: Path, tmp_path: Path) -> None:
    kid = register_script("kid", [], fallback=per_session(reply("reviewed: fine")))
    register_script(
        "lead",
        [
            code(
                "await harness.create('subagent_spec', 'reviewer',"
                " 'You review diffs for bugs. Be brief.', meta={'model': 'faux/kid'})"
            ),
            reply("spec saved"),
            code("h = await rlm('review this diff', spec='reviewer')\nprint(await h.result())"),
            reply("done"),
        ],
    )
    async with make_runtime(home) as runtime:
        lead = await runtime.create_session(model="faux/lead", cwd=tmp_path)
        await asyncio.wait_for(lead.ask("save a spec"), TIMEOUT)
        end = await asyncio.wait_for(lead.ask("use it"), TIMEOUT)
        assert end is not None and end.answer == "done"
        assert outputs(runtime, lead.id)[-1] == "reviewed: fine\n"
        [child] = runtime.store.sessions(parent_id=lead.id)
        assert child.model == "faux/kid"
        assert "You review diffs for bugs." in kid.requests[0].system


async def test_refinement_proposes_edits_that_apply_at_the_boundary(
    home: Path, tmp_path: Path
) -> None:
    proposals = [
        {
            "op": "create",
            "kind": "memory",
            "title": "python",
            "content": "the project targets Python 3.11",
            "scope": "local",
            "reason": "the user said so",
            "effect": "no 3.12-only syntax",
        },
        {"op": "create", "kind": "skill", "title": "broken", "code": "x = 1", "scope": "local"},
        "not an edit",
    ]

    def model(request: Request) -> object:
        if "You improve the harness" in request.system and not request.tools:
            return reply(json.dumps(proposals))
        return reply("ok")

    register_script("refiner", [], fallback=model)  # type: ignore[arg-type]
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/refiner", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("we target Python 3.11"), TIMEOUT)
        assert isinstance(end, TurnEnded)
        result = await runtime.learning.refine(session.id, "keep facts")
        assert len(result.staged) == 1 and len(result.problems) == 2
        memory = runtime.learning.harness.find("python")
        assert memory.status == "active" and memory.actor == "refine"
        assert memory.refinement_id == result.refinement_id and memory.source_events
        refinement = runtime.store.harness.refinement(result.refinement_id)
        assert refinement is not None and refinement.status == "done"


BAD_TEXT = """
from recursa.api import client
from recursa.protocol.operations import operations
from recursa.protocol.wire import API_PREFIX

for call in (
    lambda: harness.create('memory', 'm', 'half a pair: \\ud83d', scope='global'),
    lambda: harness.create('memory', 'm', 'nul: \\x00'),
    lambda: harness.create('memory', 'm', 'fine', meta={'k': '\\udc80'}),
):
    try:
        await call()
    except Exception as exc:
        print(type(exc).__name__ + ':', exc)
# Past the client's own check, as a hostile cell would: the daemon refuses it.
conn = await client._connection()
raw = b'{"op": "create", "kind": "memory", "title": "m", "content": "x\\\\ud800", "scope": "global"}'
route = next(row.route for row in operations() if row.name == 'stage_edit')
reply = await conn.http.request('POST', API_PREFIX + route, content=raw,
                                headers={'content-type': 'application/json'})
print(reply.status_code, reply.json()['error']['message'])
r = await harness.create('memory', 'fine', 'a plain fact')
print(r['op'])
"""


async def test_invalid_text_is_refused_to_the_cell_and_later_edits_still_apply(
    home: Path, tmp_path: Path
) -> None:
    script = register_script(
        "surrogates",
        [code(BAD_TEXT), reply("tried"), code("print('second turn')"), reply("again"), reply("3")],
    )
    # The raw request below goes past the client by the socket transport.
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[kernel]\napi = "socket"\n')
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/surrogates", cwd=tmp_path)
        # A row staged without today's checks (the shape the issue found: a
        # lone surrogate the turn-end apply could not store).
        runtime.store.harness.stage(
            session.id,
            Edit(op="create", entry_id="h-old", kind="memory", title="old", content="\ud800"),
        )
        end = await asyncio.wait_for(session.ask("learn"), TIMEOUT)
        assert end is not None and end.answer == "tried"
        lines = outputs(runtime, session.id)[0].splitlines()
        assert lines[0].startswith("ValueError: content has a lone surrogate '\\ud83d'")
        assert lines[1].startswith("UsageError: content has the control character '\\x00'")
        assert lines[2].startswith("ValueError: meta['k'] has a lone surrogate '\\udc80'")
        assert lines[3].startswith("400 ") and "'\\ud800'" in lines[3]
        assert lines[4] == "create"
        # The good edit applied at the boundary; the old bad row did not block it.
        harness = runtime.learning.harness
        assert harness.find("fine").status == "active"
        assert runtime.store.harness.staged(session.id) == []
        notices = [r.event.text for r in session.history() if isinstance(r.event, Notice)]
        assert any("edit not applied: create 'old'" in n for n in notices)
        # The model is told in its next turn; the turn after that no longer.
        end = await asyncio.wait_for(session.ask("next"), TIMEOUT)
        assert end is not None and end.answer == "again"
        system = script.requests[2].system
        assert "Harness edits that were not applied" in system
        assert "create 'old': content has a lone surrogate" in system
        assert "Harness edits that were not applied" not in script.requests[0].system
        end = await asyncio.wait_for(session.ask("third"), TIMEOUT)
        assert end is not None and end.answer == "3"
        assert "Harness edits that were not applied" not in script.requests[4].system


async def test_the_reviewer_gets_a_fresh_context_on_its_own_model(
    home: Path, tmp_path: Path
) -> None:
    secret = "the-proposing-session-said-this-7f3a"
    reviewer = register_script("fresh-reviewer", [], fallback=reply(APPROVE))
    register_script(
        "proposer",
        [
            code(
                f"print({secret!r})\n"
                "await harness.create('memory', 'layout', 'sources live in src/', scope='global',"
                " reason='seen in the tree')"
            ),
            reply(f"done; {secret}"),
        ],
    )
    gate = HarnessConfig(reviewer_model="faux/fresh-reviewer")
    async with make_runtime(home, harness=gate) as runtime:
        session = await runtime.create_session(model="faux/proposer", cwd=tmp_path)
        await asyncio.wait_for(session.ask(f"remember the layout; {secret}"), TIMEOUT)
        await runtime.learning.wait_reviews()
        assert runtime.learning.harness.find("layout").status == "active"
    [request] = reviewer.requests
    # Its own prompt, the entry alone: one user message, no tools, nothing the
    # session said or ran, and no trace of the proposer's prompt.
    assert request.tools == ()
    assert len(request.messages) == 1
    assert "sources live in src/" in str(request.messages)
    assert secret not in request.system and secret not in str(request.messages)
    assert request.system.startswith("You review one harness entry")

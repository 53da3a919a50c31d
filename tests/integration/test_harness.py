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
from recursa.protocol.events import CellFinished, ModelUsage, TurnEnded
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

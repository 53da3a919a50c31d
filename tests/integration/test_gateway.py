"""The model-call gateway end to end: refinement, the reviewer and compaction
make their calls through the same gateway as a turn's steps, so they are
retried, admitted under the subtree's budgets at once, and recorded with all
their tokens on the runtime's injected clock. Real store, real kernels, real
HTTP (the loopback server, for the SDK path); only the model is scripted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from recursa.config import HarnessConfig
from recursa.errors import ProviderError
from recursa.models.faux import code, fault, register_script, reply
from recursa.models.types import Usage
from recursa.protocol.events import Compacted, Event, ModelRetry, ModelUsage, TurnEnded
from recursa.runtime import Runtime
from recursa.session import Session
from recursa.testing import FakeModelServer, Fault, Reply, make_runtime

TIMEOUT = 120
FROZEN = 5_000.0
"""The injected clock's only value: a call timed by it takes exactly 0 s."""

PROPOSAL = json.dumps(
    [
        {
            "op": "create",
            "kind": "memory",
            "title": "python",
            "content": "the project targets Python 3.11",
            "scope": "local",
            "reason": "the user said so",
        }
    ]
)
LEARN = (
    "m = await harness.create('memory', 'build', 'the build runs with make -j2',"
    " scope='global', reason='seen in the Makefile')\nprint(m['applies'])"
)
APPROVE = '{"decision": "approve", "reasons": "a plain fact about the project"}'


def events(session: Session, kind: type[Event]) -> list[Event]:
    return [r.event for r in session.history() if isinstance(r.event, kind)]


def budget(runtime: Runtime, session: Session, **limits: int) -> None:
    """Give a root session a budget over its subtree, as ``rlm(budget=...)`` does a child."""
    row = runtime.store.session(session.id)
    meta = {**row.meta, "budget": {**limits, "started": runtime.store.now()}}
    runtime.store.update_session(session.id, meta=meta)


async def test_refinement_over_http_is_retried_and_records_cache_writes_on_the_injected_clock(
    home: Path, tmp_path: Path
) -> None:
    usage = Usage(input_tokens=900, output_tokens=40, cached_tokens=100, cache_write_tokens=300)
    script = [
        Reply(text="noted"),
        Fault("rate_limit", retry_after=0),
        Fault("server_error"),
        Reply(text=PROPOSAL, usage=usage),
    ]
    async with FakeModelServer(script) as server:
        env = {"ANTHROPIC_BASE_URL": server.anthropic_base_url, "ANTHROPIC_API_KEY": "k"}
        async with make_runtime(home, env=env, clock=lambda: FROZEN) as runtime:
            session = await runtime.create_session(model="anthropic/claude-x", cwd=tmp_path)
            end = await asyncio.wait_for(session.ask("we target Python 3.11"), TIMEOUT)
            assert isinstance(end, TurnEnded) and end.answer == "noted"

            result = await runtime.learning.refine(session.id, None)

            assert len(result.staged) == 1 and not result.problems
            assert len(server.requests) == 4  # the turn, two failed attempts, the answer
            retries = events(session, ModelRetry)
            assert [(r.kind, r.attempt) for r in retries] == [  # type: ignore[attr-defined]
                ("rate_limit", 1),
                ("server_error", 2),
            ]
            assert len(runtime.retry_sleep.delays) == 2  # type: ignore[attr-defined]
            refine_usage = events(session, ModelUsage)[-1]
            assert isinstance(refine_usage, ModelUsage)
            assert (refine_usage.model, refine_usage.step) == ("anthropic/claude-x", 0)
            assert refine_usage.input_tokens == 900 and refine_usage.output_tokens == 40
            assert refine_usage.cached_tokens == 100
            assert refine_usage.cache_write_tokens == 300
            assert refine_usage.latency == 0.0  # timed by the injected clock, not the wall's


async def test_the_reviewer_is_retried_and_counted_in_the_proposers_books(
    home: Path, tmp_path: Path
) -> None:
    reviewer = register_script(
        "reviewer-flaky",
        [fault("rate_limit"), fault("server_error")],
        fallback=reply(APPROVE, usage=Usage(input_tokens=50, output_tokens=5)),
    )
    register_script("proposer", [code(LEARN), reply("learned")])
    gate = HarnessConfig(reviewer_model="faux/reviewer-flaky")
    async with make_runtime(home, harness=gate) as runtime:
        session = await runtime.create_session(model="faux/proposer", cwd=tmp_path)
        budget(runtime, session, tokens=1_000_000)
        end = await asyncio.wait_for(session.ask("learn"), TIMEOUT)
        assert end is not None and end.answer == "learned"
        await runtime.learning.wait_reviews()

        memory = runtime.learning.harness.find("build")
        assert (memory.status, memory.actor) == ("active", "reviewer")
        assert len(reviewer.requests) == 3
        retries = events(session, ModelRetry)
        assert [r.kind for r in retries] == ["rate_limit", "server_error"]  # type: ignore[attr-defined]
        usages = [e for e in events(session, ModelUsage) if isinstance(e, ModelUsage)]
        assert [u.model for u in usages].count("faux/reviewer-flaky") == 1
        # In the budgets at once, as much as in the store: no restart needed.
        spent = runtime.budgets.spent[session.id]
        totals = runtime.store.usage_totals(session.id, tree=True)
        assert spent.tokens == totals.input_tokens + totals.output_tokens
        assert spent.steps == totals.calls == 3  # two turn steps and the review
        assert spent.held_tokens == 0 and spent.held_steps == 0


async def test_refinement_is_admitted_under_the_subtree_budget_at_once(
    home: Path, tmp_path: Path
) -> None:
    def answer(request: object) -> object:
        return reply(PROPOSAL, usage=Usage(input_tokens=200, output_tokens=20))

    model = register_script(
        "budgeted",
        [reply("noted", usage=Usage(input_tokens=100, output_tokens=10))],
        fallback=answer,  # type: ignore[arg-type]
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/budgeted", cwd=tmp_path)
        budget(runtime, session, steps=2)
        end = await asyncio.wait_for(session.ask("we target Python 3.11"), TIMEOUT)
        assert end is not None and end.answer == "noted"
        assert runtime.budgets.spent[session.id].tokens == 110

        await runtime.learning.refine(session.id, None)
        spent = runtime.budgets.spent[session.id]
        assert (spent.tokens, spent.steps) == (110 + 220, 2)  # counted at once

        # The budget's two calls are spent: the next refinement is refused and never made.
        with pytest.raises(ProviderError) as refused:
            await runtime.learning.refine(session.id, None)
        assert refused.value.kind == "aborted"
        assert "2 model calls are spent" in str(refused.value)
        assert len(model.requests) == 2
        assert runtime.budgets.spent[session.id].steps == 2


async def test_the_compaction_summary_goes_through_the_same_gateway(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "compacting",
        [
            code("print('first')"),
            reply("done"),
            fault("server_error"),
            reply("## Task\nprint first\n## Progress\nprinted it"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/compacting", cwd=tmp_path)
        budget(runtime, session, tokens=1_000_000)
        end = await asyncio.wait_for(session.ask("print first"), TIMEOUT)
        assert end is not None and end.answer == "done"

        compacted = await session.compact()

        assert compacted.compacted
        tail = [r.event for r in session.history()][-3:]
        assert [e.type for e in tail] == ["model_retry", "model_usage", "compacted"]
        assert isinstance(tail[1], ModelUsage) and tail[1].step == 0
        assert isinstance(tail[2], Compacted)
        assert len(runtime.retry_sleep.delays) == 1  # type: ignore[attr-defined]
        spent = runtime.budgets.spent[session.id]
        assert spent.steps == 3  # two turn steps and the summary, admitted and settled
        assert spent.held_steps == 0

"""The evaluation runner against real sessions: an in-process daemon, real
kernels, real SQLite; only the model is scripted (the faux provider), so the
scores and token counts below are exact and checked by hand."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from recursa.config import load_config
from recursa.evals.figures import group_rows
from recursa.evals.plan import Plan, TrialLimits
from recursa.evals.runner import Progress, Runner
from recursa.evals.scoring import exact_match
from recursa.evals.trials import Item, Policy, TrialResult, read_results
from recursa.models.faux import FauxReply, code, per_session, register_script, reply
from recursa.models.types import Request, ToolResult, Usage, UserMessage

MODEL = "faux/evals"
WRONG = 13
"""The scripted model answers every item right but the one whose number is this."""


class Secrets:
    """Four items: the material says a number; the question asks for it."""

    name = "secrets"

    def items(self, lengths: Sequence[int], n: int, seed: int) -> list[Item]:
        items = []
        for index in range(n):
            number = 10 + index
            context = f"Filler. The secret number is {number}. More filler."
            question = "What is the secret number?"
            items.append(
                Item(
                    id=f"secret/0/{index}",
                    task="secret",
                    question=question,
                    context=context,
                    prompt=f"{context}\n{question}",
                    references=(str(number),),
                    metric="exact_match",
                )
            )
        return items

    def score(self, item: Item, answer: str | None) -> float:
        return exact_match(answer, item.references)


def _answer(text: str) -> FauxReply:
    number = int(re.findall(r"secret number is (\d+)", text)[-1])
    said = str(number)[::-1] if number == WRONG else str(number)
    return reply(said, usage=Usage(input_tokens=200, output_tokens=3))


def first(request: Request) -> FauxReply:
    [message] = [m for m in request.messages if isinstance(m, UserMessage)]
    if "`context`" in message.text:  # repl: the material is a kernel variable
        return code("print(context)", usage=Usage(input_tokens=100, output_tokens=5))
    return _answer(message.text)


def second(request: Request) -> FauxReply:
    result = request.messages[-1]
    assert isinstance(result, ToolResult)
    return _answer(result.text)


def runner(out: Path, plan: Plan, **hooks: object) -> Runner:
    register_script("evals", [], fallback=per_session(first, second))
    return Runner(plan, out, load_config(), Secrets(), in_process=True, **hooks)  # type: ignore[arg-type]


PLAN = Plan(
    suite="secrets",
    models=(MODEL,),
    policies=(Policy(mode="repl"), Policy(mode="context")),
    n=4,
    concurrency=2,
    limits=TrialLimits(time=60.0),
)


async def test_a_run_scores_every_item_under_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[TrialResult] = []
    starts: list[Progress] = []
    finished = await runner(out, PLAN, on_result=seen.append, on_start=starts.append).run()
    assert starts == [Progress(total=8, skipped=0)]
    results = read_results(out)
    assert sorted(r.trial for r in results) == sorted(r.trial for r in finished)
    assert len(results) == 8 and len(seen) == 8
    by_policy = {p: [r for r in results if r.policy == p] for p in ("repl", "context")}
    for policy, mine in by_policy.items():
        assert sum(r.score for r in mine) == 3.0, policy  # item 3 (13) answered 31
        assert {r.status for r in mine} == {"ok"}
        assert all(r.subagents == 0 and r.session for r in mine)
        wrong = next(r for r in mine if r.item == "secret/0/3")
        assert wrong.answer == "31" and wrong.score == 0.0 and wrong.references == ("13",)
    # repl: a cell then the answer (100+200 in, 5+3 out); context: the answer alone.
    assert {(r.calls, r.input_tokens, r.output_tokens) for r in by_policy["repl"]} == {(2, 300, 8)}
    assert {(r.calls, r.input_tokens, r.output_tokens) for r in by_policy["context"]} == {
        (1, 200, 3)
    }
    # The report's table from these real results: exact, by hand.
    rows = {(row.policy, row.task): row for row in group_rows(results)}
    assert set(rows) == {(p, t) for p in ("repl", "context") for t in ("secret", "all")}
    repl, context = rows["repl", "all"], rows["context", "all"]
    assert (repl.score.mean, repl.score.n, repl.input_tokens, repl.output_tokens) == (
        0.75,
        4,
        300.0,
        8.0,
    )
    assert (context.score.mean, context.input_tokens, context.output_tokens) == (0.75, 200.0, 3.0)
    assert repl.score.low <= 0.75 <= repl.score.high and repl.not_ok == 0
    # Each configuration had its home, with the policy in its config.toml.
    context_toml = (out / "homes" / "faux-evals__context" / "config.toml").read_text()
    assert "inline_input_share = 0.0" in context_toml
    assert (out / "plan.json").is_file()


async def test_resume_runs_only_the_missing_trials(tmp_path: Path) -> None:
    out = tmp_path / "run"
    await runner(out, PLAN).run()
    lines = (out / "results.jsonl").read_text().splitlines()
    kept = [line for line in lines if "secret/0/1" not in line and "secret/0/2" not in line]
    (out / "results.jsonl").write_text("\n".join(kept) + "\n")
    starts: list[Progress] = []
    again = await runner(out, PLAN, on_start=starts.append).run()
    assert starts == [Progress(total=8, skipped=4)]
    assert sorted(r.item for r in again) == sorted(["secret/0/1", "secret/0/2"] * 2)
    results = read_results(out)
    assert len(results) == 8 and len({r.trial for r in results}) == 8


async def test_a_tree_token_limit_stops_a_trial_and_it_is_scored_zero(tmp_path: Path) -> None:
    def forever(request: Request) -> FauxReply:
        return code("x = 1", usage=Usage(input_tokens=400, output_tokens=1))

    register_script("loop", [], fallback=forever)
    plan = Plan(
        suite="secrets",
        models=("faux/loop",),
        n=1,
        limits=TrialLimits(tokens=1000, time=60.0),
    )
    run = Runner(plan, tmp_path / "run", load_config(), Secrets(), in_process=True)
    [result] = await run.run()
    assert result.status == "limit" and result.score == 0.0 and result.answer is None
    assert result.input_tokens >= 1000


async def test_with_refine_on_each_trial_teaches_its_configurations_harness(
    tmp_path: Path,
) -> None:
    from recursa.store import Store

    lesson = (
        '[{"op": "create", "kind": "memory", "title": "secret-{n}", "content": '
        '"secret numbers are two digits", "scope": "local", "reason": "seen", "effect": "faster"}]'
    )
    refinements: list[str] = []

    def answer_or_refine(request: Request) -> FauxReply:
        if request.system.startswith("You improve the harness"):
            refinements.append(request.cache_key or "")
            return reply(lesson.replace("{n}", str(len(refinements))))
        return _answer(request.messages[0].text)  # type: ignore[union-attr]

    register_script("refining", [], fallback=answer_or_refine)
    plan = Plan(
        suite="secrets",
        models=("faux/refining",),
        policies=(Policy(mode="context", refine=True),),
        n=2,
        limits=TrialLimits(time=60.0),
    )
    out = tmp_path / "run"
    results = await Runner(plan, out, load_config(), Secrets(), in_process=True).run()
    assert len(refinements) == 2
    assert all(r.detail.endswith("1 edit(s) staged") for r in results), results
    assert sum(r.score for r in results) == 2.0
    home = out / "homes" / "faux-refining__context+refine"
    store = Store.open(home / "recursa.db")
    try:
        titles = sorted(e.title for e in store.harness.entries())
    finally:
        store.close()
    assert titles == ["secret-1", "secret-2"]


async def test_a_suite_whose_scoring_fails_fails_that_trial_only(tmp_path: Path) -> None:
    class Brittle(Secrets):
        def score(self, item: Item, answer: str | None) -> float:
            if item.id.endswith("/1"):
                raise KeyError("no such reference")
            return super().score(item, answer)

    register_script("evals", [], fallback=per_session(first, second))
    plan = Plan(suite="secrets", models=(MODEL,), policies=(Policy(mode="context"),), n=3)
    results = await Runner(plan, tmp_path / "run", load_config(), Brittle(), in_process=True).run()
    by_item = {r.item: r for r in results}
    assert by_item["secret/0/1"].status == "error" and by_item["secret/0/1"].score == 0.0
    assert "KeyError" in by_item["secret/0/1"].detail
    assert by_item["secret/0/0"].status == by_item["secret/0/2"].status == "ok"
    assert by_item["secret/0/0"].metrics == {"exact_match": 1.0}


async def test_a_trials_kernel_sees_neither_the_persons_home_nor_the_runs_homes(
    home: Path, tmp_path: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "daemon.token").write_text("the person's token")
    out = tmp_path / "run"
    mine = out / "homes" / "faux-peek__repl" / "config.toml"  # its own home's, hidden too
    probe = (
        "import os\n"
        f"for p in [{str(home / 'daemon.token')!r}, {str(mine)!r}]:\n"
        "    print(p, os.path.exists(p))\n"
    )

    def peek(request: Request) -> FauxReply:
        return code(probe)

    def tell(request: Request) -> FauxReply:
        result = request.messages[-1]
        assert isinstance(result, ToolResult)
        return reply(result.text)

    register_script("peek", [], fallback=per_session(peek, tell))
    plan = Plan(suite="secrets", models=("faux/peek",), n=1)
    [result] = await Runner(plan, out, load_config(), Secrets(), in_process=True).run()
    assert result.answer is not None
    assert f"{home / 'daemon.token'} False" in result.answer
    assert f"{mine} False" in result.answer

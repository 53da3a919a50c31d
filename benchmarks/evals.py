"""The evaluation runner's own cost: 40 trials on the faux model.

Each trial is a real root session (a real kernel, a real cell) in a fresh
workspace, in a daemon hosted by this process; the model is scripted (a cell
that reads the kernel variable ``context``, then the answer), so what is
measured is the harness: session creation, the kernel, the store, the usage
read, the result's durable append. It prints the run's wall time, the
per-trial overhead (wall / trials, and per trial at concurrency 1) and the
score (which must be 1.0).

Usage: python benchmarks/evals.py [--trials 40] [--concurrency 1,4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from recursa.config import load_config
from recursa.evals.plan import Plan, TrialLimits
from recursa.evals.runner import Runner
from recursa.evals.scoring import exact_match
from recursa.evals.trials import Item, Policy, TrialResult
from recursa.models.faux import FauxReply, code, per_session, register_script, reply
from recursa.models.types import Request, ToolResult


class Numbers:
    name = "numbers"

    def items(self, lengths: Sequence[int], n: int, seed: int) -> list[Item]:
        return [
            Item(
                id=f"number/0/{i}",
                task="number",
                question="What is the number?",
                context=f"padding {'x' * 2000} the number is {i}. {'y' * 2000}",
                prompt=f"the number is {i}. What is the number?",
                references=(str(i),),
                metric="exact_match",
            )
            for i in range(n)
        ]

    def score(self, item: Item, answer: str | None) -> float:
        return exact_match(answer, item.references)


def first(request: Request) -> FauxReply:
    return code("print(context[-2100:-2000])")


def second(request: Request) -> FauxReply:
    result = request.messages[-1]
    assert isinstance(result, ToolResult)
    return reply(re.findall(r"the number is (\d+)", result.text)[-1])


async def one_run(trials: int, concurrency: int, root: Path) -> tuple[float, list[TrialResult]]:
    register_script("bench", [], fallback=per_session(first, second))
    plan = Plan(
        suite="numbers",
        models=("faux/bench",),
        policies=(Policy(mode="repl"),),
        n=trials,
        concurrency=concurrency,
        limits=TrialLimits(time=120.0),
    )
    out = root / f"run-c{concurrency}"
    started = time.perf_counter()
    results = await Runner(plan, out, load_config(), Numbers(), in_process=True).run()
    return time.perf_counter() - started, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--concurrency", default="1,4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="recursa-evals-bench-") as tmp:
        root = Path(tmp)
        os.environ["RECURSA_HOME"] = str(root / "home")
        os.environ.setdefault("RECURSA_KERNEL_PYTHON", "project")
        print(f"{args.trials} trials on the faux model, load average {os.getloadavg()[0]:.2f}")
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            wall, results = asyncio.run(one_run(args.trials, concurrency, root))
            score = sum(r.score for r in results) / max(1, len(results))
            walls = [r.wall_s for r in results]
            print(
                f"concurrency {concurrency}: {len(results)} trials in {wall:.1f} s "
                f"({wall / max(1, len(results)) * 1000:.0f} ms per trial of the run); "
                f"a trial's own wall median {statistics.median(walls) * 1000:.0f} ms, "
                f"max {max(walls) * 1000:.0f} ms; score {score:.2f}"
            )
            if score != 1.0:
                sys.exit("the scripted model should have answered every item")


if __name__ == "__main__":
    main()

"""Fidelity on the embedded model: recursa against a bare loop, same model, same tasks, one run.

Each task of :mod:`task_set` (32 in four groups: ``oneshot``, ``text``,
``files``, ``followup``; data drawn from ``--seed``) runs

- through recursa: a real session of an in-process Runtime (sandboxed kernel,
  the fenced protocol the local models get), in a fresh workspace holding the
  task's files; a follow-up is a second message to the same session;
- through the bare loop of :mod:`bare_loop` (fenced code in, output back,
  ``FINAL:``) in its own fresh workspace and plain kernel;
- with ``--native``, also through the bare loop's native tool-call arm.

All arms share the loaded model (one per process), the sampler, the step
limit (``--steps``), the per-message time limit (``--max-time``), the cell
timeout and the output cap (recursa's ``[limits]``). Progress goes to stderr,
one line per task and arm; the table per group (score, wall time, input and
output tokens) to stdout; ``--json FILE`` keeps every result and is read back
on the next run with the same arguments, so an interrupted run resumes.

Usage: python benchmarks/local_tasks.py [--model local/default] [--groups files,text]
       [--tasks id,id] [--limit N] [--native] [--json results.json] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bare_loop import BareKernel, Outcome, fenced_turn, native_model, native_turn
from recursa_arm import RecursaArm, add_home_option
from task_set import GROUPS, Task, build

from recursa.models.local.provider import LocalProvider
from recursa.models.types import Message

ARMS = ("recursa", "bare", "native")


def workspace(base: Path, task: Task, arm: str) -> Path:
    """A fresh directory outside any recursa home, holding the task's files."""
    root = base / f"{task.id}-{arm}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for name, content in task.files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def merge(turns: list[Outcome]) -> dict[str, Any]:
    """A task's result over its turns: the last turn's answer, the totals of all. A bare
    arm's first entry is its kernel's start (recursa's turns include it), counted in time only."""
    last = turns[-1]
    return {
        "answer": last.answer,
        "reason": ",".join(t.reason for t in turns if t.reason != "kernel"),
        "steps": sum(t.steps for t in turns),
        "input_tokens": sum(t.input_tokens for t in turns),
        "output_tokens": sum(t.output_tokens for t in turns),
        "seconds": round(sum(t.seconds for t in turns), 2),
        "turns": [asdict(t) for t in turns],
    }


class Bench:
    def __init__(self, args: argparse.Namespace, base: Path, arm: RecursaArm) -> None:
        self.args, self.base, self.arm = args, base, arm
        self.provider = LocalProvider(arm.config)
        self.model = args.model.split("/", 1)[1]
        self.limits = {
            "max_steps": args.steps,
            "max_time": args.max_time,
            "output_chars": arm.output_chars,
            "cell_timeout": arm.cell_timeout,
        }

    async def recursa(self, task: Task) -> list[Outcome]:
        session = await self.arm.session(workspace(self.base, task, "recursa"))
        turns = []
        for prompt in task.prompts:
            turns.append(await self.arm.ask(session, prompt, self.args.max_time + 30))
            if turns[-1].reason != "answered":
                break
        await session.close()
        return turns

    async def bare(self, task: Task) -> list[Outcome]:
        messages: list[Message] = []
        started = time.monotonic()
        async with BareKernel(workspace(self.base, task, "bare")) as kernel:
            turns = [Outcome(reason="kernel", seconds=time.monotonic() - started)]
            for prompt in task.prompts:
                turns.append(
                    await fenced_turn(
                        self.provider, self.model, kernel, messages, prompt, **self.limits
                    )
                )
                if turns[-1].answer is None:
                    break
            return turns

    async def native(self, task: Task) -> list[Outcome]:
        path = await self.provider.prepare(self.model)
        loaded, template = native_model(path)
        messages: list[dict[str, Any]] = []
        started = time.monotonic()
        async with BareKernel(workspace(self.base, task, "native")) as kernel:
            turns = [Outcome(reason="kernel", seconds=time.monotonic() - started)]
            for prompt in task.prompts:
                turns.append(
                    await native_turn(loaded, template, kernel, messages, prompt, **self.limits)
                )
                if turns[-1].answer is None:
                    break
            return turns


def table(tasks: list[Task], results: dict[str, dict[str, Any]], arms: list[str]) -> str:
    lines = [
        f"{'group':9s} {'n':>3s}  "
        + "  ".join(
            f"{arm + ' score':>13s} {'wall s':>7s} {'in tok':>8s} {'out tok':>7s}" for arm in arms
        )
    ]
    for group in [*GROUPS, "all"]:
        chosen = [t for t in tasks if group in ("all", t.group)]
        done = [t for t in chosen if all(f"{t.id}/{a}" in results for a in arms)]
        if not done:
            continue
        cells = []
        for arm in arms:
            rows = [results[f"{t.id}/{arm}"] for t in done]
            score = sum(r["correct"] for r in rows)
            cells.append(
                f"{score:>6d} / {len(rows):<4d} {sum(r['seconds'] for r in rows):7.0f} "
                f"{sum(r['input_tokens'] for r in rows):8d} {sum(r['output_tokens'] for r in rows):7d}"
            )
        lines.append(f"{group:9s} {len(done):3d}  " + "  ".join(cells))
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="local/default", help="local/default or local/fast")
    parser.add_argument("--groups", default=",".join(GROUPS))
    parser.add_argument("--tasks", default="", help="task ids, comma-separated")
    parser.add_argument("--limit", type=int, default=0, help="at most N tasks per group")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10, help="model calls per message, every arm")
    parser.add_argument(
        "--max-time", type=float, default=300, help="seconds per message, every arm"
    )
    parser.add_argument("--native", action="store_true", help="add the native tool-call arm")
    parser.add_argument("--arms", default="", help="arms to run, e.g. bare,native (default: all)")
    add_home_option(parser)
    parser.add_argument("--json", type=Path, default=None, help="results file (resumed if present)")
    args = parser.parse_args()

    tasks = build(args.seed, args.groups.split(","))
    if args.tasks:
        tasks = [t for t in tasks if t.id in args.tasks.split(",")]
    if args.limit:
        tasks = [t for g in GROUPS for t in [t for t in tasks if t.group == g][: args.limit]]
    arms = (
        args.arms.split(",")
        if args.arms
        else ["recursa", "bare"] + (["native"] if args.native else [])
    )
    key = {"model": args.model, "seed": args.seed, "steps": args.steps, "max_time": args.max_time}
    results: dict[str, dict[str, Any]] = {}
    if args.json and args.json.exists():
        saved = json.loads(args.json.read_text())
        if saved.get("settings") == key:
            results = saved["results"]
            print(f"resuming: {len(results)} results from {args.json}", file=sys.stderr)

    base = Path(tempfile.mkdtemp(prefix="recursa-local-tasks-"))
    started = time.monotonic()
    try:
        async with RecursaArm(
            args.home or base / "home", args.model, max_steps=args.steps, max_time=args.max_time
        ) as arm:
            bench = Bench(args, base / "work", arm)
            for n, task in enumerate(tasks, 1):
                for name in arms:
                    if f"{task.id}/{name}" in results:
                        continue
                    turns = await getattr(bench, name)(task)
                    result = merge(turns) | {"group": task.group, "expected": task.expected}
                    result["correct"] = task.check(result["answer"])
                    results[f"{task.id}/{name}"] = result
                    print(
                        f"[{n}/{len(tasks)}] {task.id:15s} {name:7s} "
                        f"{'ok ' if result['correct'] else 'BAD'} {result['seconds']:6.1f}s "
                        f"{result['reason']:18s} want {task.expected!r} got {str(result['answer'])[:60]!r}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if args.json:
                        args.json.write_text(
                            json.dumps({"settings": key, "results": results}, indent=1)
                        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"\n{args.model}, seed {args.seed}, {args.steps} steps, {args.max_time:.0f} s per message"
    )
    print(table(tasks, results, arms))
    print(f"run took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())

"""Harness overhead per tool step, measured at the model server.

The overhead of a step is the time from the model server writing the last byte
of a reply (a ``python`` tool call with a trivial cell) to it receiving the
next request: SDK parsing, the turn loop, the store writes, the cell's round
trip through a real kernel, building the next request and sending it. The
fake server runs in its own process (TCP_NODELAY set) and timestamps both
ends, so nothing of the server's own work is counted.

Scenarios:

- steady: ``--steps`` trivial cells in one turn; median, p90 and max of the
  per-step overhead, the first step excluded.
- cold, instant model: a fresh runtime with no kernel; the first reply comes
  at once, so the first step waits for the kernel to start.
- cold, model latency: the same, with the first reply taking ``--latency``
  seconds, as a real first call does; the kernel starts while it is in flight.
- warm kernel: a runtime that keeps a kernel ready (as the daemon does).

For each cold scenario it prints the time from the task being sent to the
first request reaching the server, and the first step's overhead.

Every scenario runs twice in one run, with the kernel sandbox
(``[kernel] sandbox = "bwrap"``) and without it (``"none"``), and the
difference is printed; so is a bare kernel's start time (launch to ready)
with and without the sandbox. Without a working bubblewrap only the
unsandboxed figures are printed, with the reason.

Usage: python benchmarks/turn_overhead.py [--steps 60] [--repeats 5] [--latency 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from recursa.config import SandboxKind, load_config
from recursa.errors import KernelError
from recursa.kernel import Kernel
from recursa.kernel.sandbox import SandboxPolicy, check_sandbox
from recursa.runtime import Runtime


@dataclass
class Timing:
    sent_at: float
    requests: list[dict[str, float]]

    def gaps(self) -> list[float]:
        """Reply k finished → request k+1 received, for every step."""
        return [
            self.requests[k + 1]["received_at"] - self.requests[k]["finished_at"]
            for k in range(len(self.requests) - 1)
        ]

    def to_first_request(self) -> float:
        return self.requests[0]["received_at"] - self.sent_at


def step(code: str, delay: float = 0.0) -> dict[str, object]:
    item: dict[str, object] = {"tool_calls": [{"name": "python", "arguments": {"code": code}}]}
    if delay:
        item["delay"] = delay
    return item


async def run_once(
    script: list[dict[str, object]], base: Path, warm: bool, sandbox: SandboxKind
) -> Timing:
    home = base / "home"
    # Outside the home: a sandboxed kernel may not have its workspace there.
    workdir = Path(tempfile.mkdtemp(dir=base))
    script_file, log_file = workdir / "script.json", workdir / "requests.jsonl"
    script_file.write_text(json.dumps(script))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recursa.testing.fake_server",
            "--script",
            str(script_file),
            "--log",
            str(log_file),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().split(": ", 1)[1].strip()
        config = load_config(
            overrides={
                "RECURSA_HOME": str(home),
                "OPENAI_BASE_URL": base_url,
                "OPENAI_API_KEY": "bench",
            }
        )
        config = replace(
            config,
            limits=replace(config.limits, max_steps=None),
            kernel=replace(config.kernel, sandbox=sandbox),
        )
        async with await Runtime.open(config, warm_kernels=1 if warm else 0) as runtime:
            if warm:
                # A sandboxed spare is launched for a workspace: this one.
                runtime.kernels.expect(workdir)
                await runtime.kernels.fill()
            session = await runtime.create_session(model="openai/bench", cwd=workdir)
            sent_at = time.monotonic()
            end = await session.ask("benchmark")
            assert end is not None and end.reason == "answered", end
    finally:
        server.terminate()
        server.wait(timeout=10)
    requests = [json.loads(line) for line in log_file.read_text().splitlines()]
    return Timing(sent_at, requests)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def kernel_starts(
    base: Path, kinds: list[SandboxKind], repeats: int
) -> dict[SandboxKind, list[float]]:
    """Launch-to-ready seconds of ``repeats`` bare kernels of each kind,
    alternating kinds so that both see the same machine."""
    home = base / "home"
    workdir = Path(tempfile.mkdtemp(dir=base))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    times: dict[SandboxKind, list[float]] = {kind: [] for kind in kinds}
    for _ in range(repeats + 1):  # the first round warms the caches and is dropped
        for kind in kinds:
            policy = SandboxPolicy(kind=kind, hidden=(home,))
            async with Kernel(workdir, env, runtime_dir=home / "kernels", sandbox=policy) as kernel:
                assert kernel.startup_time is not None
                times[kind].append(kernel.startup_time)
    return {kind: values[1:] for kind, values in times.items()}


def delta(without: float, within: float) -> str:
    return f"{(within - without) * 1000:+7.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="recursa-bench-"))
    try:
        await measure(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)  # homes, workspaces, stores of every run


async def measure(args: argparse.Namespace, base: Path) -> None:
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    kinds: list[SandboxKind] = ["none", "bwrap"]
    try:
        check_sandbox("bwrap", network=True)
    except KernelError as exc:
        print(f"without the sandbox only: {exc}\n")
        kinds = ["none"]

    starts = await kernel_starts(base, kinds, max(args.repeats, 5))
    print(f"kernel start (launch → ready), median of {len(starts['none'])}:")
    for kind in kinds:
        print(f"  sandbox={kind:5s}  {ms(statistics.median(starts[kind]))}")
    if len(kinds) == 2:
        with_, without = statistics.median(starts["bwrap"]), statistics.median(starts["none"])
        print(f"  sandbox cost       {delta(without, with_)}")

    # Distinct trivial cells: a repeated identical cell is refused by the loop.
    steady: list[dict[str, object]] = [
        *[step(f"i = {k}") for k in range(args.steps + 1)],
        {"text": "done"},
    ]
    medians = {}
    print(
        f"\nsteady state, {args.steps} steps with a trivial cell (reply complete → next request sent):"
    )
    for kind in kinds:
        gaps = (await run_once(steady, base, warm=False, sandbox=kind)).gaps()[1:]
        medians[kind] = statistics.median(gaps)
        print(
            f"  sandbox={kind:5s}  median {ms(medians[kind])}   "
            f"p90 {ms(percentile(gaps, 0.9))}   max {ms(max(gaps))}"
        )
    if len(kinds) == 2:
        print(f"  sandbox cost per step (median) {delta(medians['none'], medians['bwrap'])}")

    scenarios = [
        ("cold, instant model", False, 0.0),
        (f"cold, first call takes {args.latency:.1f} s", False, args.latency),
        ("warm kernel (daemon)", True, 0.0),
    ]
    print(f"\nfirst step, median of {args.repeats} fresh runtimes:")
    for label, warm, delay in scenarios:
        for kind in kinds:
            firsts, to_request = [], []
            for _ in range(args.repeats):
                script: list[dict[str, object]] = [step("x = 1", delay=delay), {"text": "done"}]
                t = await run_once(script, base, warm=warm, sandbox=kind)
                firsts.append(t.gaps()[0])
                to_request.append(t.to_first_request())
            print(
                f"  {label:32s} sandbox={kind:5s} first step {ms(statistics.median(firsts))}   "
                f"task sent → first request {ms(statistics.median(to_request))}"
            )


if __name__ == "__main__":
    asyncio.run(main())

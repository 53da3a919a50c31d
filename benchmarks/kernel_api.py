"""The kernel-side API's transport: ``rlm()`` admission latency from a real kernel.

Usage::

    .venv/bin/python benchmarks/kernel_api.py [--calls 500] [--runs 3]

A real kernel calls ``await rlm(...)`` in a loop against the daemon's app
served in-process (:func:`recursa.daemon.embedded.serve_embedded`) over a
host whose ``spawn`` does nothing but build the handle: the figures are the
transport's (kernel → unix socket → app → host → reply → handle), which the
runtime's own admission adds to. The target for the whole ``rlm()`` with the
real runtime is p50 <= 5 ms. ``--in-process`` also times the same calls made
from this process. Figures depend on machine load: read the median of runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from recursa.api import client as api_client
from recursa.api import rlm
from recursa.config import load_config
from recursa.daemon.embedded import serve_embedded
from recursa.daemon.host import unserved
from recursa.kernel import Kernel
from recursa.protocol.wire import Handle, Spawn

TOKEN = "kt-bench"


class AdmitAtOnce(unserved("person"), unserved("kernel")):  # type: ignore[misc]
    """A kernel host that admits every child at once and remembers nothing
    (every other row is refused by its :func:`~recursa.daemon.host.unserved` bases)."""

    def __init__(self) -> None:
        self.spawned = 0

    def session_of_token(self, token: str) -> str | None:
        return "root" if token == TOKEN else None

    async def spawn(self, caller: str, request: Spawn) -> Handle:
        self.spawned += 1
        child = f"c{self.spawned:06d}"
        return Handle(child, request.name, caller, f"/work/{child}", "faux/echo", "admitted", 1)

    async def subagents(self, caller: str) -> list[Handle]:
        return []


CELL = """
import json, time
await rlm('warm up')
samples = []
for i in range({calls}):
    began = time.perf_counter()
    await rlm(f'task {{i}}')
    samples.append(time.perf_counter() - began)
print(json.dumps(samples))
"""


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e3

    return (
        f"p50 {statistics.median(ordered) * 1e3:6.3f} ms   p90 {at(0.9):6.3f} ms   "
        f"p99 {at(0.99):6.3f} ms   min {ordered[0] * 1e3:6.3f} ms   (n={len(ordered)})"
    )


async def main(calls: int, runs: int, in_process: bool) -> None:
    config = load_config()
    host: Any = AdmitAtOnce()
    with tempfile.TemporaryDirectory(prefix="rk") as scratch:
        root = Path(scratch)
        async with (
            serve_embedded(host, directory=root / "s") as sockets,
            Kernel(root, config.kernel.env, runtime_dir=root / "rt") as kernel,
        ):
            await kernel.export_env(
                {api_client.ENV_SOCKET: str(sockets.kernel), api_client.ENV_TOKEN: TOKEN}
            )
            for run in range(runs):
                out = await kernel.execute(CELL.format(calls=calls), timeout=600)
                if out.status != "ok":
                    raise SystemExit(out.text())
                print(f"kernel  run {run + 1}: {summary(json.loads(out.text()))}")
            if in_process:
                os.environ[api_client.ENV_SOCKET] = str(sockets.kernel)
                os.environ[api_client.ENV_TOKEN] = TOKEN
                await rlm("warm up")
                samples = []
                for i in range(calls):
                    began = time.perf_counter()
                    await rlm(f"task {i}")
                    samples.append(time.perf_counter() - began)
                print(f"process       : {summary(samples)}")
                await api_client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-process", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.runs, args.in_process))

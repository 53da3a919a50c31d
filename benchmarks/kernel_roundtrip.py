"""Kernel figures: start time, pool acquire time and the round trip of trivial cells.

Usage::

    .venv/bin/python benchmarks/kernel_roundtrip.py [--cells 500] [--starts 5]

The round trip is measured from ``Kernel.execute`` being called to its
``CellOutput`` being returned, for cells that do (almost) nothing, after a
warm-up: jupyter_client's ``AsyncKernelClient`` carries the messages
(:mod:`recursa.kernel.wire`). Figures depend on machine load: run it on an
idle machine and read the median.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from recursa.config import load_config
from recursa.kernel import Kernel, KernelPool

TRIVIAL_CELLS = ("x = 1", "pass", "1")


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return (
        f"median {statistics.median(ordered) * 1e3:7.3f} ms   p90 {p90 * 1e3:7.3f} ms   "
        f"min {ordered[0] * 1e3:7.3f} ms   (n={len(ordered)})"
    )


async def start_times(env: dict[str, str], runtime: Path, starts: int) -> None:
    samples: list[float] = []
    for _ in range(starts):
        began = time.perf_counter()
        kernel = Kernel(runtime, env, runtime_dir=runtime)
        await kernel.start()
        samples.append(time.perf_counter() - began)
        await kernel.shutdown()
    print(f"kernel start to ready      {summary(samples)}")


async def acquire_times(env: dict[str, str], runtime: Path, acquires: int) -> None:
    samples: list[float] = []
    async with KernelPool(env, size=1, runtime_dir=runtime) as pool:
        for _ in range(acquires):
            await pool.fill()
            began = time.perf_counter()
            kernel = await pool.acquire(runtime)
            samples.append(time.perf_counter() - began)
            await kernel.shutdown()
    print(f"pool acquire (warm spare)  {summary(samples)}")


async def round_trips(env: dict[str, str], runtime: Path, cells: int) -> None:
    async with Kernel(runtime, env, runtime_dir=runtime) as kernel:
        for code in TRIVIAL_CELLS:
            for _ in range(50):  # warm-up: imports, caches, branch predictors
                await kernel.execute(code, timeout=10)
            samples = []
            for _ in range(cells):
                began = time.perf_counter()
                out = await kernel.execute(code, timeout=10)
                samples.append(time.perf_counter() - began)
                assert out.status == "ok", out
            print(f"round trip {code!r:<14}  {summary(samples)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=500, help="timed cells per kind (>= 200)")
    parser.add_argument("--starts", type=int, default=5, help="kernel starts to time")
    args = parser.parse_args()
    env = dict(load_config().kernel.env)
    print(f"python {sys.version.split()[0]} on {sys.platform}")
    with tempfile.TemporaryDirectory(prefix="recursa-bench-") as tmp:
        runtime = Path(tmp)
        await start_times(env, runtime, args.starts)
        await acquire_times(env, runtime, args.starts)
        await round_trips(env, runtime, max(args.cells, 200))


if __name__ == "__main__":
    asyncio.run(main())

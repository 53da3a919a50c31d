"""How long a call of the CLI takes against a running daemon (issue 15: "a fast CLI").

Usage::

    .venv/bin/python benchmarks/cli_latency.py [--runs 11] [--json]

A daemon is started in a fresh ``RECURSA_HOME`` (the model is the loopback
fake server) and given a few sessions, each of which ran a cell and answered;
then each command below is run ``--runs`` times as a real subprocess (the
``recursa`` script beside this interpreter, as a user runs it), and the
median wall time of each is printed, in seconds, with the minimum and the
machine's load (``os.getloadavg``) beside them:

- ``help``: ``recursa --help``;
- ``agents``: ``recursa agents`` (the session tree);
- ``usage``: ``recursa usage ID``;
- ``logs``: ``recursa logs ID`` (a session's whole history).

The daemon is stopped at the end. Target: ``agents`` <= 0.15 s.

:func:`measure` is the same as a function; ``benchmarks/compare.py`` times the same
commands against its own daemon, beside its other figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.protocol.wire import CreateSession
from recursa.testing import FakeModelServer, Reply, ToolCallSpec
from recursa.testing.processes import kill_home_processes

SESSIONS = 3
RUNS = 11


def model(path: str, body: dict[str, Any]) -> Reply:
    """Each task runs one cell, then answers."""
    if body["messages"][-1]["role"] == "tool":
        return Reply(text="done: 42")
    return Reply(tool_calls=[ToolCallSpec("python", {"code": "print(6 * 7)"})])


def command() -> list[str]:
    """The ``recursa`` script of this interpreter's environment (what a user
    runs), else ``python -m recursa``."""
    script = Path(sys.executable).with_name("recursa")
    return [str(script)] if script.exists() else [sys.executable, "-m", "recursa"]


def time_call(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    began = time.perf_counter()
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    took = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.decode(errors='replace')}")
    return took


async def _sessions(home: Path, work: Path) -> list[str]:
    async with DaemonClient(home) as client:
        ids = [
            (
                await client.create_session(
                    CreateSession(task=f"task {n}", model="openai/m", cwd=str(work))
                )
            ).id
            for n in range(SESSIONS)
        ]
        for session in ids:
            if not await client.wait_quiet(session, timeout=120):
                raise SystemExit(f"session {session} did not finish in 120 s")
    return ids


def measure(home: Path, runs: int = RUNS) -> dict[str, float]:
    """Median wall seconds of each command (``help``, ``agents``, ``usage``,
    ``logs``), ``runs`` calls each, against a daemon started in ``home`` (an
    empty or missing directory) and stopped before this returns."""
    return {name: statistics.median(values) for name, values in samples(home, runs).items()}


def samples(home: Path, runs: int = RUNS) -> dict[str, list[float]]:
    """Every call's wall seconds, as :func:`measure` takes them. The calls are
    interleaved (one of each command per round), so a burst of load on the
    machine falls on all of them alike."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    with (
        # The sessions' directory: outside the home, which kernels must not see.
        tempfile.TemporaryDirectory(prefix="recursa-cli-work-") as work,
        FakeModelServer.in_thread(responder=model) as server,
    ):
        env = {
            **os.environ,
            "RECURSA_HOME": str(home),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "x",
        }
        try:
            asyncio.run(process.start(home, env=env))
            ids = asyncio.run(_sessions(home, Path(work)))
            recursa = command()
            calls = {
                "help": [*recursa, "--help"],
                "agents": [*recursa, "agents"],
                "usage": [*recursa, "usage", ids[0]],
                "logs": [*recursa, "logs", ids[0]],
            }
            cwd = Path(work)
            times: dict[str, list[float]] = {name: [] for name in calls}
            for argv in calls.values():  # one unmeasured call each: warm caches
                time_call(argv, env, cwd)
            shown = subprocess.run(calls["logs"], env=env, cwd=cwd, capture_output=True, text=True)
            if "print(6 * 7)" not in shown.stdout:  # the history measured is a real one
                raise SystemExit(f"recursa logs did not show the session's cell: {shown.stdout}")
            for _ in range(runs):
                for name, argv in calls.items():
                    times[name].append(time_call(argv, env, cwd))
        finally:
            with contextlib.suppress(Exception):
                asyncio.run(process.stop(home, force=True))
            kill_home_processes(home)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=RUNS, help="calls of each command")
    parser.add_argument("--json", action="store_true", help="the medians as one JSON object")
    args = parser.parse_args()
    from compare import fresh_bytecode  # this directory: see its docstring

    compiled = fresh_bytecode()
    print(f"bytecode: {compiled} of recursa's modules compiled (stale or missing)", file=sys.stderr)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="recursa-cli-") as tmp:
        times = samples(Path(tmp) / "home", runs=args.runs)
    load_after = os.getloadavg()[0]
    medians = {name: statistics.median(values) for name, values in times.items()}
    if args.json:
        print(json.dumps({**medians, "load": [load_before, load_after]}))
        return 0
    print(f"recursa CLI, {args.runs} calls each (load {load_before:.2f} -> {load_after:.2f}):")
    for name, median in medians.items():
        print(f"  {name:7} median {median:.3f} s   min {min(times[name]):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

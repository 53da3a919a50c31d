"""How long a daemon takes to bring every session back after ``kill -9``.

Usage::

    .venv/bin/python benchmarks/recovery.py [--sessions 50] [--kills 20] [--busy 5]

A real daemon on its socket serves ``--sessions`` sessions, each with a live
kernel holding some state; the model is the loopback fake server. Then, for
each of ``--kills`` rounds: ``--busy`` sessions are given a job whose cell is
still running when the daemon is killed with SIGKILL; the daemon is started
again, and the clock runs from the start of the new process until its status
says recovery is done (every session that was doing something or holds a
kernel is back: live kernels reattached, lost cells marked interrupted, cut
turns resumed, queued input delivered).

Printed, in seconds: median, p95 and max of

- ``wall``: from spawning the new daemon to its status saying recovered (the
  process start, imports and opening the store included: what a user waits);
- ``recover``: the daemon's own measure of :meth:`Runtime.recover`.

and, after the last round, how many sessions kept the kernel (same pid) they
had before the first kill, and whether every session came back idle. Target:
p95 of ``wall`` <= 2 s at 50 sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.daemon.paths import DaemonPaths, read_state
from recursa.protocol.wire import CreateSession, SendMessage
from recursa.testing import FakeModelServer, Reply, ToolCallSpec
from recursa.testing.processes import kill_home_processes

POLL = 0.005


def model(path: str, body: dict[str, Any]) -> Reply:
    """Each job runs one cell, then answers. ``setup`` cells build some state;
    ``busy`` cells sleep long enough to be cut by the kill."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return Reply(text="done")
    task = str(messages[-1].get("content") or "")
    if "busy" in task:
        code = "import time\ntime.sleep(30)\n"
    else:
        code = "state = {i: str(i) * 10 for i in range(2000)}\nprint(len(state))\n"
    return Reply(tool_calls=[ToolCallSpec("python", {"code": code})])


def kernel_pids(home: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{home / 'recursa.db'}?mode=ro", uri=True) as conn:
        return {str(s): int(p) for s, p in conn.execute("SELECT session_id, pid FROM kernels")}


def kill_daemon(home: Path) -> None:
    state = read_state(DaemonPaths.for_home(home))
    if state is None:
        raise SystemExit("no daemon state file")
    proc = psutil.Process(state.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


async def settle(client: DaemonClient, ids: list[str]) -> None:
    results = await asyncio.gather(*(client.wait_quiet(i, timeout=120) for i in ids))
    if not all(results):
        raise SystemExit("sessions did not go quiet in 120 s")


async def start_busy_cell(client: DaemonClient, session: str) -> None:
    """Send a ``busy`` job and return once its cell has started."""
    last = 0
    async for record in client.events(session, after=0, follow=False):
        last = record.seq
    await client.send(session, SendMessage("busy"))
    async for record in client.events(session, after=last, follow=True):
        if record.event.type == "cell_started":
            return


async def restart_and_time(home: Path, env: dict[str, str]) -> tuple[float, float]:
    began = time.monotonic()
    await process.start(home, env=env)
    async with DaemonClient(home, reconnect_window=0) as client:
        while True:
            status = await client.status()
            if not status.recovering:
                wall = time.monotonic() - began
                return wall, status.recovery_seconds or 0.0
            await asyncio.sleep(POLL)


def figures(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{name:8} median {statistics.median(ordered):.3f}  p95 {p95:.3f}  max {ordered[-1]:.3f}"


async def bench(home: Path, env: dict[str, str], args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    await process.start(home, env=env)
    async with DaemonClient(home, reconnect_window=30) as client:
        infos = [
            await client.create_session(
                CreateSession(task="setup", model="openai/m", cwd=str(home), name=f"s{n}")
            )
            for n in range(args.sessions)
        ]
        ids = [info.id for info in infos]
        await settle(client, ids)
    before = kernel_pids(home)
    print(f"{len(ids)} sessions set up, {len(before)} kernels")

    walls: list[float] = []
    inner: list[float] = []
    for round_ in range(args.kills):
        busy = rng.sample(ids, min(args.busy, len(ids)))
        async with DaemonClient(home, reconnect_window=0) as client:
            await asyncio.gather(*(start_busy_cell(client, session) for session in busy))
        kill_daemon(home)
        wall, recover = await restart_and_time(home, env)
        walls.append(wall)
        inner.append(recover)
        print(f"kill {round_ + 1:2}: wall {wall:.3f}s  recover {recover:.3f}s")
        async with DaemonClient(home, reconnect_window=0) as client:
            await settle(client, busy)

    async with DaemonClient(home, reconnect_window=0) as client:
        statuses = [info.status for info in await client.sessions()]
    after = kernel_pids(home)
    kept = sum(1 for s, pid in before.items() if after.get(s) == pid)
    print()
    print(f"{args.sessions} sessions, {args.kills} kills, {args.busy} busy at each kill")
    print(figures("wall", walls))
    print(figures("recover", inner))
    print(f"kernels kept across all kills: {kept}/{len(before)}")
    idle = statuses.count("idle")
    print(f"sessions idle at the end: {idle}/{len(statuses)}")
    return 0 if idle == len(statuses) == args.sessions else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--busy", type=int, default=5, help="sessions mid-cell at each kill")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="recursa-recovery-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        with FakeModelServer.in_thread(responder=model) as server:
            env = {
                **os.environ,
                "RECURSA_HOME": str(home),
                "OPENAI_BASE_URL": server.openai_base_url,
                "OPENAI_API_KEY": "x",
            }
            try:
                return asyncio.run(bench(home, env, args))
            finally:
                with contextlib.suppress(Exception):
                    asyncio.run(process.stop(home, force=True))
                kill_home_processes(home)


if __name__ == "__main__":
    sys.exit(main())

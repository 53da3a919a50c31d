"""How far one daemon scales: the store's event rate, idle sessions held,
concurrently running sessions, and a gateway's per-step cost.

Every daemon figure is taken from a real daemon on a fresh ``RECURSA_HOME``
(``[kernel] python = "project"``, the default sandbox), driven through its
client like any front end, against the loopback fake OpenAI server
(``recursa.testing.FakeModelServer``, in a thread of this process) with a
responder instead of a script: a session's request gets a cell while it has
answered fewer than ``--cells`` of them, then an answer, so any number of
sessions run at once, each its own script. A step's latency is the gap
between a reply's last byte and its session's next request: everything the
harness does in between (parsing, the store, the cell's round trip through
its kernel, the next request).

Sections (each bounded; ``--quick`` runs them all in under a minute):

a. store: events per second through ``recursa.store.Store`` on a WAL file
   with the runtime's background checkpointer, appended as the daemon does
   (one event, one transaction), into one session and round-robin into 100;
   and in batches of 10 (``append_many``) for comparison.
b. idle sessions: sessions created without a task (no kernel) up to each of
   ``--idle``; the daemon's RSS and its growth per session, the create rate,
   listing them all, and the daemon's CPU while they sit idle.
c. running sessions: for each N of ``--running``, N sessions given a task at
   once, each running ``--cells`` cells and answering; throughput (cells per
   second), the first step (it starts the session's kernel) and the later
   steps' latency p50/p99, a session's wall time, the daemon's CPU% and its
   peak RSS growth per running session, and the peak RSS of the kernels'
   processes (zygote and sandbox wrappers included; shared pages counted in
   each) per session. With a gateway (below) the same runs again with every
   kernel behind it: the daemon's own CPU and memory per session then no
   longer share the machine's cores with local kernels' bookkeeping.
d. gateway (with ``--gateway-url URL --gateway-token-env NAME``, or
   ``--start-gateway kg|eg`` which serves one from tests/jupyter_gateways.py):
   per-step latency of one session of ``--steps`` cells with local kernels
   and with kernels behind the gateway, whose home's ``config.toml`` says
   ``[kernel] backend = "gateway"`` and ``[kernel.gateway] url``,
   ``token_env`` (the daemon reads the token from that variable; with
   ``--start-gateway`` it is set to the served gateway's token).

The run's files live in one temporary directory, removed at the end; every
daemon is stopped (forced: its kernels too) when its section ends.

Figures depend on the machine's load (printed): run it on an idle machine.

Usage: .venv/bin/python benchmarks/scale.py [--quick] [--sections abcd]
    [--events 20000] [--idle 100,500,1000] [--running 1,8,32] [--cells 5] [--steps 30]
    [--gateway-url URL --gateway-token-env NAME | --start-gateway kg|eg]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from peak_memory import Sampling

from recursa.config import CONFIG_FILE_NAME
from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.protocol.events import CellFinished, Event, TurnEnded
from recursa.protocol.wire import CreateSession
from recursa.store import DB_FILE_NAME, Store
from recursa.store.checkpoint import Checkpointer
from recursa.testing import FakeModelServer
from recursa.testing.fake_script import Reply, ScriptItem, ToolCallSpec

MODEL = "openai/bench"
MIB = 1 << 20
TASK = "scale task {i}: run the cells you are given, then answer"
_TASK_RE = re.compile(r"scale task (\d+):")
QUIET_TIMEOUT = 600.0


# ------------------------------------------------------------------ the model


def respond(cells: int) -> Any:
    """A responder: a cell until the session answered ``cells`` of them, then
    an answer. Stateless: the count is the request's own tool results."""

    def answer(path: str, body: dict[str, Any]) -> ScriptItem:
        messages = body.get("messages", [])
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < cells:
            return Reply(tool_calls=[ToolCallSpec("python", {"code": f"x = {done}"})])
        return Reply(text="FINAL ANSWER: done")

    return answer


def session_of(body: Any) -> int | None:
    """Which session (its task number) sent a request."""
    found = _TASK_RE.search(json.dumps(body.get("messages", [])[:4]))
    return int(found.group(1)) if found else None


def step_gaps(requests: list[Any]) -> tuple[list[float], list[float]]:
    """Per session, reply k's last byte → request k+1 received (seconds): the
    first steps (the first cell, which starts the session's kernel) and the rest."""
    by_session: dict[int, list[tuple[float, float | None]]] = {}
    for request in requests:
        session = session_of(request.body) if isinstance(request.body, dict) else None
        if session is not None:
            by_session.setdefault(session, []).append((request.received_at, request.finished_at))
    first: list[float] = []
    rest: list[float] = []
    for timeline in by_session.values():
        timeline.sort(key=lambda pair: pair[0])
        for k, ((_, finished), (received, _)) in enumerate(itertools.pairwise(timeline)):
            if finished is not None:
                (rest if k else first).append(received - finished)
    return first, rest


# ------------------------------------------------------------------ figures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def table(title: str, head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return float(times.user + times.system)


class Peak(Sampling):
    """Samples, in a thread every 20 ms, the daemon's RSS and the summed RSS of
    its kernels; keeps the largest of each and the most kernels seen."""

    def __init__(self, home: Home) -> None:
        super().__init__(0.02)
        self._home = home
        self.daemon = self.kernels = self.count = 0

    def sample(self) -> None:
        self.daemon = max(self.daemon, rss(self._home.daemon()))
        kernels = self._home.kernels()
        self.kernels = max(self.kernels, sum(rss(k) for k in kernels))
        self.count = max(self.count, len(kernels))


def rss(proc: psutil.Process | None) -> int:
    if proc is None:
        return 0
    try:
        return int(proc.memory_info().rss)
    except psutil.NoSuchProcess:
        return 0


# ------------------------------------------------------------------ a daemon


@dataclass
class Home:
    """A fresh ``RECURSA_HOME`` with its ``config.toml``, and its daemon."""

    path: Path
    work: Path
    """Sessions' working directory: outside the home, which kernels must not see."""
    env: dict[str, str]
    pid: int = 0

    @classmethod
    def make(
        cls, base: Path, name: str, server: FakeModelServer, config: str, env: dict[str, str]
    ) -> Home:
        path, work = base / name, base / f"{name}-work"
        path.mkdir(parents=True)
        work.mkdir()
        (path / CONFIG_FILE_NAME).write_text(config)
        full = {
            **os.environ,
            **env,
            "RECURSA_HOME": str(path),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "bench",
            "RECURSA_MODEL": MODEL,
        }
        return cls(path, work, full)

    async def start(self) -> None:
        self.pid = (await process.start(self.path, env=self.env)).pid

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await process.stop(self.path, force=True)

    def daemon(self) -> psutil.Process | None:
        try:
            return psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return None

    def kernels(self) -> list[psutil.Process]:
        """Kernels run apart from the daemon (they outlive a crash): the
        processes whose command line names this home, and its children."""
        home = str(self.path)
        found: dict[int, psutil.Process] = {}
        daemon = self.daemon()
        if daemon is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                found.update({p.pid: p for p in daemon.children(recursive=True)})
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if proc.pid != self.pid and any(home in part for part in cmdline):
                found[proc.pid] = proc
        return list(found.values())


def config_toml(max_kernels: int, kernel: str = "") -> str:
    """A home's ``config.toml``: kernels on the project's interpreter, up to
    ``max_kernels`` of them; ``kernel`` is added to the ``[kernel]`` table."""
    return f'[kernel]\npython = "project"\n{kernel}\n[sessions]\nmax_kernels = {max_kernels}\n'


def gateway_config(url: str, token_env: str, max_kernels: int = 8) -> str:
    """:func:`config_toml` with kernels behind the gateway at ``url``, whose
    token the daemon reads from the variable ``token_env``."""
    table = f"[kernel.gateway]\nurl = {json.dumps(url)}\ntoken_env = {json.dumps(token_env)}\n"
    return config_toml(max_kernels, 'backend = "gateway"\n') + "\n" + table


Backend = tuple[str, Callable[[int], str], dict[str, str]]
"""A kernel backend to run section c on: its label, its ``config.toml`` for a
number of kernels, and what the daemon's environment needs (the gateway's token)."""


@contextlib.asynccontextmanager
async def daemon(
    base: Path, name: str, server: FakeModelServer, config: str, env: dict[str, str] | None = None
) -> Any:
    home = Home.make(base, name, server, config, env or {})
    try:
        await home.start()
        async with DaemonClient(home.path, timeout=QUIET_TIMEOUT) as client:
            yield home, client
    finally:
        await home.stop()


# ------------------------------------------------------------------ a. store


def store_section(n: int) -> None:
    rows: list[list[str]] = []
    output = ("line: " + "x" * 70 + "\n") * 13  # ~1 KB, a typical bounded cell output

    def event(i: int) -> Event:
        return CellFinished(cell=i, call_id=f"c{i}", status="ok", output=output, chars=len(output))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / DB_FILE_NAME
        with Store.open(path, autocheckpoint=False) as store:
            stop = threading.Event()
            checkpointer = Checkpointer(path)
            keeper = threading.Thread(target=lambda: _checkpoints(checkpointer, stop))
            keeper.start()
            try:
                one = store.create_session(model=MODEL, cwd=tmp, workspace=tmp).id
                many = [
                    store.create_session(model=MODEL, cwd=tmp, workspace=tmp).id for _ in range(100)
                ]
                for label, op, events_per_op in (
                    ("append, 1 session", lambda i: store.append(one, event(i)), 1),
                    (
                        "append, 100 sessions",
                        lambda i: store.append(many[i % 100], event(i)),
                        1,
                    ),
                    (
                        "append_many(10), 1 session",
                        lambda i: store.append_many(one, [event(i * 10 + k) for k in range(10)]),
                        10,
                    ),
                ):
                    ops = max(1, n // events_per_op)
                    for i in range(min(200, ops)):  # warm the statement cache and the file
                        op(i)
                    timings = []
                    began = time.perf_counter()
                    for i in range(ops):
                        t = time.perf_counter()
                        op(i)
                        timings.append(time.perf_counter() - t)
                    wall = time.perf_counter() - began
                    rows.append(
                        [
                            label,
                            f"{ops * events_per_op / wall:,.0f}",
                            f"{percentile(timings, 0.5) * 1e6:.0f}",
                            f"{percentile(timings, 0.99) * 1e6:.0f}",
                            f"{max(timings) * 1e6:.0f}",
                        ]
                    )
            finally:
                stop.set()
                keeper.join()
    table(
        f"a. store: events/s ({n} events of ~1 KB each, WAL, background checkpoints)",
        ["how", "events/s", "p50 µs/op", "p99 µs/op", "max µs/op"],
        rows,
    )


def _checkpoints(checkpointer: Checkpointer, stop: threading.Event) -> None:
    while not stop.wait(0.1):
        checkpointer.checkpoint()


# ------------------------------------------------------------------ b. idle sessions


IDLE_WARMUP = 8
"""Sessions created before the baseline is read: the first ones load code
the daemon imports lazily, which is not a session's own cost."""
IDLE_WINDOW = 2.0
"""Seconds the daemon's CPU is read over while its sessions sit idle."""


async def idle_section(base: Path, server: FakeModelServer, sizes: list[int]) -> None:
    rows: list[list[str]] = []
    async with daemon(base, "idle", server, config_toml(64)) as (home, client):
        proc = home.daemon()
        assert proc is not None
        start_rss = rss(proc)

        async def create(count: int, first: int) -> None:
            # Eight at a time, as several front ends would.
            for at in range(first, first + count, 8):
                batch = range(at, min(at + 8, first + count))
                requests = [
                    CreateSession(task=None, model=MODEL, name=f"idle-{k}", cwd=str(home.work))
                    for k in batch
                ]
                await asyncio.gather(*(client.create_session(r) for r in requests))

        await create(IDLE_WARMUP, 0)
        created, last_rss = IDLE_WARMUP, rss(proc)
        for size in [s for s in sizes if s > IDLE_WARMUP]:
            cpu0, began = cpu_seconds(proc), time.perf_counter()
            await create(size - created, created)
            made = time.perf_counter() - began
            cpu_create = cpu_seconds(proc) - cpu0
            t = time.perf_counter()
            listed = await client.sessions()
            list_ms = (time.perf_counter() - t) * 1000
            cpu1, t = cpu_seconds(proc), time.perf_counter()
            await asyncio.sleep(IDLE_WINDOW)  # a window in which the daemon has nothing to do
            idle_cpu = (cpu_seconds(proc) - cpu1) / (time.perf_counter() - t) * 100
            now = rss(proc)
            status = await client.status()
            rows.append(
                [
                    str(size),
                    str(len(listed)),
                    str(status.loaded),
                    f"{now / MIB:.0f}",
                    f"{(now - last_rss) / (size - created) / 1024:.1f}",
                    f"{(size - created) / made:.0f}",
                    f"{cpu_create / (size - created) * 1000:.2f}",
                    f"{list_ms:.0f}",
                    f"{idle_cpu:.1f}",
                ]
            )
            created, last_rss = size, now
    table(
        f"b. idle sessions in one daemon (RSS {start_rss / MIB:.0f} MiB at start; "
        "created without a task, so no kernel; KiB/session is the growth since the row above)",
        [
            "sessions",
            "listed",
            "loaded",
            "daemon RSS MiB",
            "KiB/session",
            "creates/s",
            "CPU ms/create",
            "list ms",
            "idle CPU %",
        ],
        rows,
    )


# ------------------------------------------------------------------ c. running sessions


async def running_section(
    base: Path, server: FakeModelServer, sizes: list[int], cells: int, backends: list[Backend]
) -> None:
    rows: list[list[str]] = []
    for (label, config, env), n in itertools.product(backends, sizes):
        first = len(server.requests)
        name = f"running-{label}-{n}"
        async with daemon(base, name, server, config(n + 8), env) as (home, client):
            proc = home.daemon()
            assert proc is not None
            base_rss = rss(proc)
            offset = (n + 1000 * len(rows)) * 100_000  # task numbers unique across runs
            cpu0, began = cpu_seconds(proc), time.perf_counter()
            with Peak(home) as peak:
                infos = await asyncio.gather(
                    *(
                        client.create_session(
                            CreateSession(
                                task=TASK.format(i=offset + i),
                                model=MODEL,
                                name=f"run-{i}",
                                cwd=str(home.work),
                                max_steps=cells + 5,
                            )
                        )
                        for i in range(n)
                    )
                )
                ends = await asyncio.gather(*(_until_quiet(client, i.id, began) for i in infos))
            wall = time.perf_counter() - began
            cpu = cpu_seconds(proc) - cpu0
        firsts, gaps = step_gaps(list(server.requests)[first:])
        walls = [wall for wall, _ in ends]
        answered = sum(1 for _, outcome in ends if outcome == "answered")
        failures = sorted({outcome for _, outcome in ends if outcome != "answered"})
        if failures:
            print(f"c. N={n}: not answered: {'; '.join(failures)[:300]}")
        kernels = f"{peak.kernels / n / MIB:.0f}" if label == "local" else "(gateway)"
        rows.append(
            [
                label,
                str(n),
                f"{answered}/{n}",
                f"{n * cells / wall:.1f}",
                f"{percentile(firsts, 0.5) * 1000:.0f}",
                f"{percentile(gaps, 0.5) * 1000:.1f}",
                f"{percentile(gaps, 0.99) * 1000:.1f}",
                f"{statistics.median(walls):.2f}",
                f"{max(walls):.2f}",
                f"{cpu / wall * 100:.0f}",
                f"{(peak.daemon - base_rss) / n / MIB:.1f}",
                kernels,
                str(peak.count),
            ]
        )
    table(
        f"c. running sessions at once ({cells} cells each, then an answer; step = reply end → next request)",
        [
            "kernels",
            "N",
            "answered",
            "cells/s",
            "1st step ms",
            "step p50 ms",
            "step p99 ms",
            "session s p50",
            "max",
            "daemon CPU %",
            "daemon MiB/session",
            "kernel MiB/session",
            "kernel procs",
        ],
        rows,
    )


async def _until_quiet(client: DaemonClient, session_id: str, began: float) -> tuple[float, str]:
    """Once the session is quiet: its wall time from ``began``, and how its
    turn ended (``answered``, or the reason and detail)."""
    if not await client.wait_quiet(session_id, timeout=QUIET_TIMEOUT):
        raise SystemExit(f"session {session_id} was not quiet after {QUIET_TIMEOUT:.0f} s")
    wall = time.perf_counter() - began
    outcome = "no turn ended"
    async for record in client.events(session_id):
        if isinstance(record.event, TurnEnded):
            ended = record.event
            outcome = (
                ended.reason if ended.reason == "answered" else f"{ended.reason}: {ended.detail}"
            )
    return wall, outcome


# ------------------------------------------------------------------ d. gateway


async def gateway_section(
    base: Path, server: FakeModelServer, steps: int, url: str, token_env: str, token: str | None
) -> None:
    """Per-step latency with local kernels, then behind the gateway at ``url``."""
    rows: list[list[str]] = []
    notes: list[str] = []
    arms: list[tuple[str, str, dict[str, str]]] = [
        ("local", config_toml(8), {}),
        ("gateway", gateway_config(url, token_env), {}),
    ]
    if token is not None:
        arms[1][2][token_env] = token
    for index, (label, config, env) in enumerate(arms):
        first = len(server.requests)
        try:
            async with daemon(base, f"step-{label}", server, config, env) as (home, client):
                began = time.perf_counter()
                info = await client.create_session(
                    CreateSession(
                        task=TASK.format(i=900_000 + index),
                        model=MODEL,
                        cwd=str(home.work),
                        max_steps=steps + 5,
                    )
                )
                wall, outcome = await _until_quiet(client, info.id, began)
                if outcome != "answered":
                    raise RuntimeError(outcome)
        except Exception as exc:  # the backend not there yet, a gateway that is down
            rows.append([label, "-", "-", "-", "-", "-"])
            notes.append(f"{label}: failed: {str(exc).splitlines()[0]}")
            continue
        firsts, rest = step_gaps(list(server.requests)[first:])
        rows.append(
            [
                label,
                f"{percentile(firsts, 0.5) * 1000:.0f}",
                f"{percentile(rest, 0.5) * 1000:.1f}",
                f"{percentile(rest, 0.9) * 1000:.1f}",
                f"{percentile(rest, 0.99) * 1000:.1f}",
                f"{wall:.2f}",
            ]
        )
    table(
        f"d. per-step latency, local kernels against {url} ({steps} cells)",
        ["kernels", "first step ms", "p50 ms", "p90 ms", "p99 ms", "wall s"],
        rows,
    )
    for note in notes:
        print(note)


@contextlib.contextmanager
def started_gateway(kind: str, where: Path) -> Iterator[tuple[str, str]]:
    """Serve a gateway with tests/jupyter_gateways.py: its (url, token)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from jupyter_gateways import missing, start_gateway

    reason = missing(kind)  # type: ignore[arg-type]
    if reason is not None:
        raise SystemExit(f"--start-gateway {kind}: {reason}")
    with start_gateway(kind, where) as gateway:  # type: ignore[arg-type]
        yield gateway.url, gateway.token


# ------------------------------------------------------------------ main


def ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


async def run(args: argparse.Namespace, base: Path) -> None:
    sections = set(args.sections)
    if "a" in sections:
        store_section(args.events)
    if not sections & set("bcd"):
        return
    with contextlib.ExitStack() as stack:
        gateway: tuple[str, str | None] | None = None
        if args.start_gateway:
            url, token = stack.enter_context(started_gateway(args.start_gateway, base / "gateway"))
            gateway = (url, token)
        elif args.gateway_url:
            gateway = (args.gateway_url, None)
        token_env = args.gateway_token_env
        with FakeModelServer.in_thread(responder=respond(args.cells)) as server:
            if "b" in sections:
                await idle_section(base, server, args.idle)
            if "c" in sections:
                backends: list[Backend] = [("local", config_toml, {})]
                if gateway is not None:
                    where, secret = gateway
                    env = {token_env: secret} if secret is not None else {}
                    backends.append(
                        ("gateway", functools.partial(gateway_config, where, token_env), env)
                    )
                await running_section(base, server, args.running, args.cells, backends)
        if "d" in sections and gateway is not None:
            with FakeModelServer.in_thread(responder=respond(args.steps)) as server:
                await gateway_section(base, server, args.steps, gateway[0], token_env, gateway[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: under a minute")
    parser.add_argument("--sections", default="abcd", help="which sections (default abcd)")
    parser.add_argument("--events", type=int, default=20_000, help="a: events per measurement")
    parser.add_argument("--idle", type=ints, default=[100, 500, 1000], help="b: session counts")
    parser.add_argument("--running", type=ints, default=[1, 8, 32], help="c: N sessions")
    parser.add_argument("--cells", type=int, default=5, help="c: cells per running session")
    parser.add_argument("--steps", type=int, default=30, help="d: cells in the gateway run")
    parser.add_argument("--gateway-url", help="d: a running gateway's URL")
    parser.add_argument(
        "--gateway-token-env",
        default="RECURSA_GATEWAY_TOKEN",
        help="d: the variable the daemon reads the gateway's token from",
    )
    parser.add_argument("--start-gateway", choices=["kg", "eg"], help="d: serve one for the run")
    args = parser.parse_args()
    if args.gateway_url and args.start_gateway:
        parser.error("give --gateway-url or --start-gateway, not both")
    if args.gateway_url and args.gateway_token_env not in os.environ:
        parser.error(f"--gateway-url: set the token in ${args.gateway_token_env}")
    if args.quick:
        args.events, args.idle, args.running = 5000, [50, 200], [1, 4]
        args.cells, args.steps = 3, 10
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    base = Path(tempfile.mkdtemp(prefix="recursa-scale-"))
    # Nothing of this run may land in the user's home.
    os.environ["RECURSA_HOME"] = str(base / "client-home")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores; load average (1, 5, 15 min) at start: {load}")
    began = time.perf_counter()
    try:
        asyncio.run(run(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"\n({time.perf_counter() - began:.0f} s in all)")


if __name__ == "__main__":
    main()

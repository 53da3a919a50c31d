"""How the Agents View keeps up: update latency under load, a 500-session
tree, a 20,000-event session, and the view process's memory.

Against a real daemon (the loopback fake model server as its model, in a
process of its own), the terminal app (``recursa view``'s ``ViewApp``) runs
headless in this process, and prints:

- **open**: seconds from the app's start until its tree shows every session
  of a seeded 500-session tree (plus the load sessions);
- **big session**: seconds to show the tail of a 20,000-event session, and to
  page back once through its history;
- **update latency**: for every stored event while a load generator (another
  process) makes about ``--rate`` events/s across ``--load`` sessions, the
  time from the daemon storing it to the app's tree showing it: median, p90,
  p99, max; and the events/s that actually arrived;
- **memory**: the view process's RSS and peak RSS.

The seeded sessions are written to the store before the daemon starts (the
view reads them through the daemon like any others); the load is real turns
through the daemon.

Run: ``.venv/bin/python benchmarks/view.py [--rate 100] [--load 50] [--seconds 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Event,
    EventRecord,
    ModelUsage,
    SessionCreated,
    StatusChanged,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.store import DB_FILE_NAME, Store
from recursa.view.tui.app import ViewApp

MODEL = "openai/bench"
FANOUT = 10
EVENTS_PER_TURN = 8
"""Stored events of one seeded turn."""
LOAD_EVENTS_PER_TURN = 7
"""Stored events of one load turn (a message answered in text), as measured."""


# -- seeding ------------------------------------------------------------------------------------


def seed(home: Path, *, tree: int, big: int, load: int) -> tuple[str, list[str]]:
    """A ``tree``-session tree (the first its root), one of whose sessions holds
    ``big`` events, and ``load`` idle root sessions; all inactive. Returns the
    big session's id and the load sessions' ids."""
    home.mkdir(parents=True, exist_ok=True)
    store = Store.open(home / DB_FILE_NAME)
    try:
        ids: list[str] = []
        depth: dict[str, int] = {}
        for index in range(tree):
            parent = ids[(index - 1) // FANOUT] if index else None
            level = depth[parent] + 1 if parent else 0
            sid = _session(store, home, f"tree-{index:03d}", parent, level)
            depth[sid] = level
            ids.append(sid)
        big_id = ids[1]
        with store.transaction():
            for turn in range(big // EVENTS_PER_TURN):
                store.append_many(big_id, _turn(turn))
        loads = [_session(store, home, f"load-{i:02d}", None, 0) for i in range(load)]
    finally:
        store.close()
    return big_id, loads


def _session(store: Store, home: Path, name: str, parent: str | None, depth: int) -> str:
    with store.transaction():
        row = store.create_session(
            model=MODEL,
            cwd=str(home.parent / "work"),
            workspace="",
            name=name,
            parent_id=parent,
            status="inactive",
            meta={"depth": depth},
        )
        workspace = home / "sessions" / row.id
        store.update_session(row.id, workspace=str(workspace))
        store.append(row.id, SessionCreated(model=MODEL, cwd=str(home.parent / "work"), name=name))
    workspace.mkdir(parents=True, exist_ok=True)
    return row.id


def _turn(turn: int) -> list[Event]:
    output = "\n".join(f"row {turn}.{i}: " + "x" * 40 for i in range(6))
    return [
        UserInput(text=f"step {turn}: go on"),
        TurnStarted(turn=turn + 1),
        AssistantReply(text=f"Working on step {turn}."),
        ModelUsage(model=MODEL, input_tokens=1200, output_tokens=40, cost=0.0002),
        CellStarted(cell=turn + 1, call_id=f"c{turn}", code=f"print({turn} * 2)"),
        CellFinished(
            cell=turn + 1, call_id=f"c{turn}", status="ok", output=output, chars=len(output)
        ),
        TurnEnded(turn=turn + 1, reason="answered", answer=str(turn * 2)),
        StatusChanged(status="idle"),
    ]


# -- the daemon and its model -----------------------------------------------------------------


def start_model(scratch: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The fake model server in its own process (it answers every request with text)."""
    port_file = scratch / "model.port"
    server = subprocess.Popen(
        [sys.executable, "-m", "recursa.testing.fake_server", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("the fake model server did not start")
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port_file.read_text().strip()}/v1"


LOAD_SCRIPT = """
import asyncio, sys, time
from recursa.daemon.client import DaemonClient
from recursa.protocol.wire import SendMessage

async def main(home, rate, seconds, ids):
    async with DaemonClient(home) as client:
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds:
            due = start + sent / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await client.send(ids[sent % len(ids)], SendMessage(f"tick {sent}", mode="follow_up"))
            sent += 1
    print(sent)

asyncio.run(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split(",")))
"""


# -- measuring ------------------------------------------------------------------------------------


class Probe:
    """Notes when each feed record reaches the app, and when the tree shows it."""

    def __init__(self, app: ViewApp) -> None:
        self.arrived: list[EventRecord] = []
        self.latencies: list[float] = []
        self.first_arrival: float | None = None
        take = app.live.take
        redraw = app._redraw_tree

        def taking(record: EventRecord) -> None:
            if record.seq:
                self.arrived.append(record)
                if self.first_arrival is None:
                    self.first_arrival = time.time()
            take(record)

        def redrawing(changed: set[str] | None = None) -> None:
            redraw(changed)
            now = time.time()
            self.latencies.extend(now - record.ts for record in self.arrived)
            self.arrived.clear()

        app.live.take = taking  # type: ignore[method-assign]
        app._redraw_tree = redrawing  # type: ignore[method-assign]


async def until(check: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{what} did not happen in {timeout:g}s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - start


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def measure(args: argparse.Namespace, home: Path, big_id: str, loads: list[str]) -> None:
    expected = args.tree + args.load
    async with DaemonClient(home) as client:
        app = ViewApp(client)
        start = time.perf_counter()
        async with app.run_test(size=(120, 40)) as pilot:
            probe = Probe(app)
            await until(lambda: len(app.live.rows) >= expected, 60, "the tree")
            await pilot.pause()
            opened = time.perf_counter() - start
            print(f"open: {expected} sessions shown in {opened:.2f} s")

            shown = time.perf_counter()
            app.open_session(big_id)
            await until(lambda: app.pane.loaded, 60, "the big session's tail")
            await pilot.pause()
            tail_s = time.perf_counter() - shown
            held = len(app.pane.records)
            paged = time.perf_counter()
            await app.pane.action_earlier().wait()
            await pilot.pause()
            page_s = time.perf_counter() - paged
            print(
                f"big session ({args.big} events): tail shown in {tail_s:.2f} s "
                f"({held} records held); one page back in {page_s:.2f} s "
                f"({len(app.pane.records)} held)"
            )

            loader = subprocess.Popen(
                [sys.executable, "-c", LOAD_SCRIPT, str(home), str(args.rate / LOAD_EVENTS_PER_TURN),
                 str(args.seconds), ",".join(loads)],
                stdout=subprocess.PIPE,
            )  # fmt: skip
            probe.latencies.clear()
            rss_peak = 0
            me = psutil.Process()
            load_start = time.time()
            while loader.poll() is None:
                await asyncio.sleep(0.25)
                rss_peak = max(rss_peak, me.memory_info().rss)
            sent = int((loader.stdout.read() if loader.stdout else b"0").strip() or 0)
            await asyncio.sleep(1.0)  # the last turns' events arrive
            elapsed = time.time() - load_start
            lat = [x * 1000 for x in probe.latencies]
            if lat:
                print(
                    f"update latency over {len(lat)} events ({len(lat) / elapsed:.0f} events/s, "
                    f"{sent} messages to {args.load} sessions): median "
                    f"{statistics.median(lat):.0f} ms, p90 {_pct(lat, 0.9):.0f} ms, "
                    f"p99 {_pct(lat, 0.99):.0f} ms, max {max(lat):.0f} ms"
                )
            rss = me.memory_info().rss
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            print(
                f"memory of the view process: RSS {rss / 2**20:.0f} MiB now, "
                f"{max(rss_peak, rss) / 2**20:.0f} MiB under load, peak {peak / 2**20:.0f} MiB"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=100, help="target events/s of the load")
    parser.add_argument("--load", type=int, default=50, help="sessions the load runs across")
    parser.add_argument("--seconds", type=float, default=20, help="how long the load runs")
    parser.add_argument("--tree", type=int, default=500, help="sessions in the seeded tree")
    parser.add_argument("--big", type=int, default=20000, help="events in the big session")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="recursa-view-bench-"))
    home = scratch / "home"
    seeded = time.perf_counter()
    big_id, loads = seed(home, tree=args.tree, big=args.big, load=args.load)
    print(f"seeded {args.tree + args.load} sessions and {args.big} events "
          f"in {time.perf_counter() - seeded:.1f} s")  # fmt: skip
    server, url = start_model(scratch)
    env = {**os.environ, "RECURSA_HOME": str(home), "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "x"}
    env.setdefault("RECURSA_KERNEL_PYTHON", "project")
    try:
        asyncio.run(process.start(home, env=env))
        asyncio.run(measure(args, home, big_id, loads))
    finally:
        try:
            asyncio.run(process.stop(home, force=True))
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()

"""The daemon kill loop (issue 3): SIGKILL the daemon at random, event-driven
points while several sessions run cells, start it again, and check that no
crash cost anything that was acknowledged.

Everything is real but the model: a daemon process on its socket, ipykernel
kernels that outlive it, the CLI, and the loopback fake server, whose
``responder`` plays the model. The model's next move depends only on the
request it is sent, so a session recovered from any point carries on:

- each job message reads ``crash-loop job MARKER/N: run C cells``;
- while fewer than C tool results follow the last job message, the model asks
  for a cell; its *step* is the number of tool results in the whole request,
  and the cell appends ``MARKER:STEP`` to a shared ledger file. A cell lost in
  a crash (marked interrupted, never rerun) is itself a tool result, so the
  next cell has a new step and a new token: a token seen twice in the ledger
  is a cell that ran twice;
- then it answers ``done MARKER/N``.

Cells sleep a little before and after the write, and print after it, so kills
land before, during and after cells. A kill round picks a session and a number
k, follows that session's event stream and kills the daemon as soon as k more
records (transient ones too) arrived. Meanwhile each session is kept busy with
new jobs, sometimes queued behind a running one, sent through
``DaemonClient.send``, which may straddle a kill.

The seed is printed (and shown when the test fails); set RECURSA_CRASH_SEED to
replay one. The kill points depend on timing too, so a replay is close to, not
exactly, the run it repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon_kit import (
    agents,
    daemon_env,
    home_processes,
    kill_daemon,
    kill_everything,
    unanswered_calls,
)
from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.errors import DaemonError, UncertainCommand
from recursa.protocol.events import (
    CellFinished,
    CellStarted,
    EventRecord,
    StatusChanged,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.protocol.wire import CreateSession, SendMessage
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

SESSIONS = 4
KILLS = 30
EVENTS_PER_ROUND = (1, 14)
"""k, the records a round lets through before the kill, is drawn from this range."""
CELLS_PER_JOB = (2, 4)
SLEEP_BEFORE_WRITE = (0.02, 0.15)
SLEEP_AFTER_WRITE = (0.03, 0.15)
QUEUE_ANOTHER = 0.3
"""How often a job is sent while the previous one still runs (it waits in the inbox)."""
ROUND_TIMEOUT = 60.0
SETTLE_TIMEOUT = 90.0

JOB = re.compile(r"crash-loop job (\w+)/(\d+): run (\d+) cells")


# -- the model -------------------------------------------------------------------------------


class LoopModel:
    """The fake server's responder (it runs on the server's thread). It also
    checks that every request is one a real provider accepts: each assistant
    tool call answered by a tool result right after it."""

    def __init__(self, ledger: Path, seed: int) -> None:
        self.ledger = ledger
        self.violations: list[str] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        messages: list[dict[str, Any]] = body["messages"]
        with self._lock:
            self.violations.extend(unanswered_calls(messages))
            before = round(self._rng.uniform(*SLEEP_BEFORE_WRITE), 3)
            after = round(self._rng.uniform(*SLEEP_AFTER_WRITE), 3)
        job_at, job = last_job(messages)
        if job is None:
            return Reply(text="no job in the conversation")
        marker, number, cells = job.group(1), int(job.group(2)), int(job.group(3))
        results_since = sum(1 for m in messages[job_at:] if m["role"] == "tool")
        if results_since >= cells:
            return Reply(text=f"done {marker}/{number}")
        step = sum(1 for m in messages if m["role"] == "tool")
        token = f"{marker}:{step}"
        code = (
            "import time\n"
            f"time.sleep({before})\n"
            f"with open({str(self.ledger)!r}, 'a') as ledger:\n"
            f"    ledger.write({token + chr(10)!r})\n"
            f"print('wrote {token}', flush=True)\n"
            f"time.sleep({after})\n"
        )
        return Reply(tool_calls=[ToolCallSpec("python", {"code": code})])


def last_job(messages: list[dict[str, Any]]) -> tuple[int, re.Match[str] | None]:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user" and isinstance(message.get("content"), str):
            found = JOB.search(message["content"])
            if found:
                return index, found
    return 0, None


def job_text(marker: str, number: int, cells: int) -> str:
    return f"crash-loop job {marker}/{number}: run {cells} cells"


# -- what the test saw -----------------------------------------------------------------------


@dataclass
class Tracked:
    """One session as the test followed it."""

    id: str
    marker: str
    jobs: int = 0
    acked: set[str] = field(default_factory=set)
    unacked: set[str] = field(default_factory=set)
    delivered: dict[str, int] = field(default_factory=dict)
    """Job text → seq of its user_input."""
    records: int = 0
    """Every record received, transient ones too: what kill rounds count."""
    last_seq: int = 0
    last_end: EventRecord | None = None
    status: str = "admitted"

    def caught_up(self) -> bool:
        """Every acknowledged job delivered, and a turn answered after the last one."""
        if not self.acked <= self.delivered.keys():
            return False
        if self.last_end is None:
            return False
        assert isinstance(self.last_end.event, TurnEnded)
        return self.last_end.seq > max(self.delivered.values(), default=0)


class Board:
    """Lets coroutines wait for a condition on what the followers saw."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []
        self.failure: BaseException | None = None

    def changed(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def until(
        self, ready: Callable[[], bool], timeout: float, what: Callable[[], str]
    ) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not ready():
                    if self.failure is not None:
                        raise self.failure
                    waiter = asyncio.get_running_loop().create_future()
                    self._waiters.append(waiter)
                    await waiter
        except TimeoutError:
            raise AssertionError(f"waited {timeout:g}s for {what()}") from None


class CrashLoop:
    def __init__(self, home: Path, env: dict[str, str], cwd: Path, seed: int) -> None:
        self.home = home
        self.env = env
        self.cwd = cwd
        self.rng = random.Random(seed)
        self.client = DaemonClient(home, reconnect_window=60)
        self.board = Board()
        self.sessions: list[Tracked] = []
        self.seen: dict[int, EventRecord] = {}
        self.kills: list[str] = []
        self.stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    # -- following ---------------------------------------------------------------------

    def on_record(self, tracked: Tracked, record: EventRecord) -> None:
        tracked.records += 1
        if record.seq:
            assert record.seq > tracked.last_seq, f"{tracked.id}: seq {record.seq} came twice"
            tracked.last_seq = record.seq
            self.seen[record.seq] = record
        match record.event:
            case UserInput(text=text) if JOB.search(text):
                assert text not in tracked.delivered, f"{tracked.id}: {text!r} delivered twice"
                tracked.delivered[text] = record.seq
            case TurnEnded():
                tracked.last_end = record
            case StatusChanged(status=status):
                tracked.status = status
            case _:
                pass
        self.board.changed()

    async def follow(self, tracked: Tracked) -> None:
        try:
            stream = self.client.events(tracked.id, after=0, follow=True)
            async with contextlib.aclosing(stream) as records:
                async for record in records:
                    self.on_record(tracked, record)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.board.failure = exc
            self.board.changed()

    # -- keeping sessions busy -----------------------------------------------------------

    async def send_job(self, tracked: Tracked) -> None:
        tracked.jobs += 1
        text = job_text(tracked.marker, tracked.jobs, self.rng.randint(*CELLS_PER_JOB))
        try:
            await self.client.send(tracked.id, SendMessage(text, mode="follow_up"))
        except (DaemonError, UncertainCommand):
            # Cut short by kills in a row: its outcome is unknown, so it may
            # appear at most once. The next job is sent anyway.
            tracked.unacked.add(text)
        else:
            tracked.acked.add(text)

    async def keep_busy(self, tracked: Tracked) -> None:
        try:
            while True:
                await self.board.until(
                    lambda: self.stopping or tracked.caught_up(),
                    ROUND_TIMEOUT * 3,
                    lambda: f"{tracked.id} to finish its jobs",
                )
                if self.stopping:
                    return
                await self.send_job(tracked)
                if self.rng.random() < QUEUE_ANOTHER:
                    await self.send_job(tracked)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.board.failure = exc
            self.board.changed()

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        await process.start(self.home, env=self.env)
        for index in range(SESSIONS):
            marker = f"S{index}"
            task = job_text(marker, 1, self.rng.randint(*CELLS_PER_JOB))
            info = await self.client.create_session(
                CreateSession(task=task, model="openai/m", cwd=str(self.cwd))
            )
            tracked = Tracked(id=info.id, marker=marker, jobs=1, acked={task})
            self.sessions.append(tracked)
        for tracked in self.sessions:
            self._tasks.append(asyncio.create_task(self.follow(tracked)))
            self._tasks.append(asyncio.create_task(self.keep_busy(tracked)))
        try:
            # A follower whose first connection meets a killed daemon is told "no
            # daemon is running" (it reconnects only once it has connected): the
            # kills start when every follower is connected.
            await self.board.until(
                lambda: all(t.records > 0 for t in self.sessions),
                ROUND_TIMEOUT,
                lambda: "every follower's first record: " + self.describe(),
            )
            while len(self.kills) < KILLS:
                await self.kill_round()
            self.stopping = True
            self.board.changed()
            await self.settle()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def settle(self) -> None:
        """Until every session is caught up and idle, as its follower saw it and
        as the daemon says now: a job whose send a kill cut short (unacked)
        may still be stored, and a restarted daemon delivers it after the
        follower saw the session idle."""
        while True:
            await self.board.until(
                lambda: all(t.caught_up() and t.status == "idle" for t in self.sessions),
                SETTLE_TIMEOUT,
                lambda: "every session to settle: " + self.describe(),
            )
            seen = sum(t.records for t in self.sessions)
            infos = await self.client.sessions([t.id for t in self.sessions])
            if all(i.status == "idle" and i.pending == 0 for i in infos):
                return
            # A turn is running or a message waits: its records will come.
            await self.board.until(
                lambda floor=seen: sum(t.records for t in self.sessions) > floor,
                SETTLE_TIMEOUT,
                lambda: "the records of a late turn: " + self.describe(),
            )

    async def kill_round(self) -> None:
        tracked = self.rng.choice(self.sessions)
        k = self.rng.randint(*EVENTS_PER_ROUND)
        target = tracked.records + k
        await self.board.until(
            lambda: tracked.records >= target,
            ROUND_TIMEOUT,
            lambda: (
                f"{k} records from {tracked.id} (kill {len(self.kills) + 1}): " + self.describe()
            ),
        )
        last = self.seen.get(tracked.last_seq)
        kill_daemon(self.home)
        where = last.event.type if last is not None else "-"
        self.kills.append(f"{tracked.marker} after {k} records (last stored: {where})")
        await process.start(self.home, env=self.env)

    def describe(self) -> str:
        return "; ".join(
            f"{t.marker}={t.id} status={t.status} jobs={t.jobs} delivered={len(t.delivered)} "
            f"last_end={t.last_end.event if t.last_end else None}"
            for t in self.sessions
        )

    async def stored(self) -> dict[str, list[EventRecord]]:
        return {
            t.id: [r async for r in self.client.events(t.id, after=0, follow=False)]
            for t in self.sessions
        }


# -- the checks ------------------------------------------------------------------------------


def check_log(session: str, records: list[EventRecord]) -> None:
    """seq strictly increasing; turns never overlap and always end; every cell
    starts inside a turn, once, and finishes before its turn ends."""
    seqs = [r.seq for r in records]
    assert seqs == sorted(set(seqs)), f"{session}: seqs not strictly increasing"
    open_turn: int | None = None
    running: set[int] = set()
    started: set[int] = set()
    turns: set[int] = set()
    for record in records:
        event, at = record.event, f"{session} seq {record.seq}"
        match event:
            case TurnStarted(turn=turn):
                assert open_turn is None, f"{at}: turn {turn} starts inside turn {open_turn}"
                assert turn not in turns, f"{at}: turn {turn} started twice"
                open_turn = turn
                turns.add(turn)
            case TurnEnded(turn=turn):
                assert open_turn == turn, f"{at}: turn {turn} ends, but {open_turn} is open"
                assert not running, f"{at}: turn {turn} ends with cells {running} running"
                open_turn = None
            case CellStarted(cell=cell):
                assert open_turn is not None, f"{at}: cell {cell} outside a turn"
                assert cell not in started, f"{at}: cell {cell} started twice"
                started.add(cell)
                running.add(cell)
            case CellFinished(cell=cell, status=status) if status != "rejected":
                assert cell in running, f"{at}: cell {cell} finishes but is not running"
                running.discard(cell)
            case _:
                pass
    assert open_turn is None, f"{session}: turn {open_turn} never ended"
    assert not running, f"{session}: cells {running} never finished"


# -- the test --------------------------------------------------------------------------------


@pytest.fixture
def server_and_model(tmp_path: Path) -> Iterator[tuple[FakeModelServer, LoopModel, int]]:
    seed = int(os.environ.get("RECURSA_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"crash loop seed: {seed} (replay with RECURSA_CRASH_SEED={seed})")
    # In the sessions' workspace: a sandboxed kernel may write nowhere else.
    (tmp_path / "work").mkdir()
    model = LoopModel(tmp_path / "work" / "ledger.txt", seed)
    with FakeModelServer.in_thread(responder=model) as server:
        yield server, model, seed


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_daemon_kill_loop_loses_nothing_acknowledged(
    server_and_model: tuple[FakeModelServer, LoopModel, int], home: Path, tmp_path: Path
) -> None:
    server, model, seed = server_and_model
    env = daemon_env(home, server)
    cwd = tmp_path / "work"
    loop = CrashLoop(home, env, cwd, seed)
    began = time.monotonic()
    try:
        asyncio.run(run_and_check(loop, model, env, cwd))
    finally:
        kill_everything(home)
    print(f"{len(loop.kills)} kills in {time.monotonic() - began:.1f}s")


async def run_and_check(loop: CrashLoop, model: LoopModel, env: dict[str, str], cwd: Path) -> None:
    async with loop.client:
        await loop.run()
        stored = await loop.stored()
    print("kill points:", *loop.kills, sep="\n  ")

    # No acknowledged event lost: all that the stream showed is stored, unchanged.
    by_seq = {r.seq: r for records in stored.values() for r in records}
    missing = sorted(seq for seq in loop.seen if seq not in by_seq)
    assert not missing, f"events seen on the stream and gone from the store: {missing}"
    changed = [seq for seq, r in loop.seen.items() if by_seq[seq] != r]
    assert not changed, f"events stored differently from how they were streamed: {changed}"

    for tracked in loop.sessions:
        records = stored[tracked.id]
        check_log(tracked.id, records)

        # No acknowledged message lost, none delivered twice.
        inputs = Counter(
            r.event.text
            for r in records
            if isinstance(r.event, UserInput) and r.event.source == "user"
        )
        assert {t: inputs[t] for t in tracked.acked} == dict.fromkeys(tracked.acked, 1)
        assert all(inputs[t] <= 1 for t in tracked.unacked), tracked.unacked
        assert set(inputs) <= tracked.acked | tracked.unacked

        # Every turn answered; the last one answers the last job delivered.
        ends = [r.event for r in records if isinstance(r.event, TurnEnded)]
        assert [e for e in ends if e.reason != "answered"] == []
        last_job = max(
            (r for r in records if isinstance(r.event, UserInput) and JOB.search(r.event.text)),
            key=lambda r: r.seq,
        )
        assert isinstance(last_job.event, UserInput)
        found = JOB.search(last_job.event.text)
        assert found is not None
        assert ends[-1].answer == f"done {found.group(1)}/{found.group(2)}"

    # No cell ran twice; every cell that finished ok wrote its token.
    tokens = Counter(model.ledger.read_text().split())
    assert [t for t, n in tokens.items() if n > 1] == []
    for tracked in loop.sessions:
        for record in stored[tracked.id]:
            if isinstance(record.event, CellFinished) and record.event.status == "ok":
                assert "wrote " in record.event.output, record
                token = record.event.output.split("wrote ", 1)[1].split()[0]
                assert tokens[token] == 1, (tracked.id, record)

    # Every request was one a real provider accepts.
    assert model.violations == []

    # Every session is listed, idle.
    listed = await asyncio.to_thread(agents, env, cwd)
    statuses = {item["id"]: item["status"] for item in listed}
    assert statuses == {t.id: "idle" for t in loop.sessions}

    # A graceful stop leaves no process of this home behind: kernels orphaned
    # by a crash are the restarted daemon's to find and stop.
    await process.stop(loop.home)
    leftovers = home_processes(loop.home)
    described = [" ".join(p.cmdline())[:160] for p in leftovers]
    assert leftovers == [], f"processes left after a graceful stop: {json.dumps(described)}"

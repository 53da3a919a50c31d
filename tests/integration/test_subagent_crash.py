"""Sub-agents across a daemon crash: SIGKILL the daemon while children are in
their cells and messages wait for them, start it again, and the tree carries
on with nothing lost and nothing done twice.

Everything is real but the model: a daemon process on its socket, ipykernel
kernels that outlive it, the kernel API (``rlm``, ``agent_message``), and the
loopback fake server, whose ``responder`` plays every agent of the tree. It
tells the parent from a child by the first user message (the task), and
decides from the request alone, so a session recovered at any point carries
on.

The children's cells do not sleep for a fixed time: each appends a token to a
ledger file (a side effect a rerun would repeat), then waits for a *release*
file the test creates after the kill (before the restart, or after it, when
the daemon finds the cell still running and interrupts it). So a child is in
its cell when the daemon dies, whatever the timing; the test waits on events
(stored ones, or a cell's live output), never on a clock.

The last test kills the daemon right after a child's ``turn_ended`` is
stored (a ``--host-factory`` makes the kill land there): its answer to the
parent is stored in the same transaction, so it is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from daemon_kit import agents, daemon_env, kill_daemon, kill_everything, recursa, unanswered_calls
from recursa.config import Config
from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.daemon.host import Host
from recursa.protocol.events import (
    CellFinished,
    CellStarted,
    Event,
    EventRecord,
    KernelStatus,
    Notice,
    TurnEnded,
    UserInput,
)
from recursa.protocol.wire import CreateSession, SendMessage
from recursa.runtime.host import open_host
from recursa.session import Session
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

WAIT = 60.0
"""Seconds any one wait may take before the test fails (a hang, not a slow run)."""
GATE_LIMIT = 60
"""Seconds a gated cell waits for its release file at most (so no kernel spins forever)."""

CHILD_JOB = re.compile(r"child job (\w+)")
NOTE = re.compile(r"\bnote (\d+)$")
LIST_REQUEST = "list your sub-agents"

T = TypeVar("T")


# -- reading a request -----------------------------------------------------------------------


def content(message: dict[str, Any]) -> str:
    body = message.get("content")
    if isinstance(body, str):
        return body
    if isinstance(body, list):
        return "".join(part.get("text", "") for part in body if isinstance(part, dict))
    return ""


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [content(m) for m in messages if m["role"] == "user"]


def tool_results(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m["role"] == "tool")


def python(code: str) -> Reply:
    return Reply(tool_calls=[ToolCallSpec("python", {"code": code})])


def gated_cell(token: str, ledger: Path, release: Path, before: str = "") -> str:
    """A cell that records ``token`` in the ledger, then prints until ``release``
    exists (its live output tells the test it is running in the kernel)."""
    return (
        "import os, time\n"
        f"{before}"
        f"with open({str(ledger)!r}, 'a') as ledger:\n"
        f"    ledger.write({token + chr(10)!r})\n"
        f"deadline = time.monotonic() + {GATE_LIMIT}\n"
        f"while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:\n"
        f"    print('holding {token}', flush=True)\n"
        "    time.sleep(0.05)\n"
        f"print('released {token}')\n"
    )


class Responder:
    """The fake server's responder (called on the server's thread): the parent
    when the task does not match ``child``, else a child. Requests that break
    OpenAI's rule (every tool call answered right after it) are recorded."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        messages: list[dict[str, Any]] = body["messages"]
        with self._lock:
            self.violations.extend(unanswered_calls(messages))
        users = user_texts(messages)
        return self.reply(users[0] if users else "", messages)

    def reply(self, task: str, messages: list[dict[str, Any]]) -> Reply:
        raise NotImplementedError


# -- following the daemon --------------------------------------------------------------------


async def until(
    client: DaemonClient, session: str, ready: Callable[[EventRecord], bool]
) -> EventRecord:
    """Follow ``session``'s records from the start until one is ``ready``."""
    stream = client.events(session, after=0, follow=True)
    async with contextlib.aclosing(stream) as records:
        async for record in records:
            if ready(record):
                return record
    raise AssertionError(f"the event stream of {session} ended")


async def stored(home: Path, session: str) -> list[EventRecord]:
    async with DaemonClient(home) as client:
        return [r async for r in client.events(session, after=0, follow=False)]


async def quiet(home: Path, session: str) -> None:
    async with DaemonClient(home) as client:
        assert await client.wait_quiet(session, timeout=WAIT), f"{session}'s tree never settled"


def events_of(records: list[EventRecord], kind: type[T]) -> list[T]:
    return [r.event for r in records if isinstance(r.event, kind)]


def recovered_at(records: list[EventRecord]) -> int:
    """The seq of the recovery notice (the daemon came back during a turn)."""
    return next(
        r.seq
        for r in records
        if isinstance(r.event, Notice) and r.event.text.startswith("recovered")
    )


def check_lost_cell(child: str, records: list[EventRecord]) -> None:
    """The child ran one cell, cut short by the crash: recorded as interrupted,
    never run again, and its kernel reattached."""
    [started] = events_of(records, CellStarted)
    [finished] = events_of(records, CellFinished)
    assert finished.cell == started.cell, child
    assert finished.status == "interrupted", (child, finished)
    assert "not run again" in finished.output, (child, finished)
    assert any(e.state == "reattached" for e in events_of(records, KernelStatus)), child
    assert recovered_at(records) < next(
        r.seq for r in records if isinstance(r.event, CellFinished)
    ), child


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def files(cwd: Path) -> tuple[Path, Path]:
    """The ledger of cell side effects, and the file that releases gated cells:
    in the sessions' workspace, the one place a sandboxed cell writes and sees
    the test's files (its /tmp is its own)."""
    return cwd / "ledger.txt", cwd / "release"


# -- the child registry ----------------------------------------------------------------------


class ThreeChildren(Responder):
    """The parent spawns a, b and c in one cell, then answers with how many
    child answers it has; asked to list its sub-agents, it runs a cell that
    prints them as JSON. A child runs one gated cell, then answers."""

    def __init__(self, ledger: Path, release: Path) -> None:
        super().__init__()
        self.ledger = ledger
        self.release = release

    def reply(self, task: str, messages: list[dict[str, Any]]) -> Reply:
        job = CHILD_JOB.search(task)
        if job is not None:
            name = job.group(1)
            if tool_results(messages) == 0:
                token = f"{name}:{tool_results(messages)}"
                return python(gated_cell(token, self.ledger, self.release))
            return Reply(text=f"answer {name}")
        last = messages[-1]
        if last["role"] == "user" and LIST_REQUEST in content(last):
            return python(
                "import json\n"
                "subs = await rlm.list_subagents()\n"
                "print(json.dumps([{'name': s.name, 'parent_id': s.parent_id, "
                "'done': s.done, 'answer': s.answer} for s in subs]))\n"
            )
        if tool_results(messages) == 0:
            return python(
                "hs = [await rlm(f'child job {n}', name=n) for n in 'abc']\n"
                "print(sorted(h.name for h in hs))\n"
            )
        answers = sum(1 for text in user_texts(messages) if "finished: answer" in text)
        return Reply(text=f"parent has {answers} of 3 answers")


def test_the_child_registry_survives_a_kill_while_children_run_cells(
    home: Path, cwd: Path, files: tuple[Path, Path]
) -> None:
    ledger, release = files
    model = ThreeChildren(ledger, release)
    with FakeModelServer.in_thread(responder=model) as server:
        env = daemon_env(home, server)
        try:
            check_registry_survives(home, env, cwd, model, ledger, release)
        finally:
            release.touch()  # let any kernel still holding its cell go
            kill_everything(home)


def check_registry_survives(
    home: Path,
    env: dict[str, str],
    cwd: Path,
    model: ThreeChildren,
    ledger: Path,
    release: Path,
) -> None:
    async def start_the_tree() -> tuple[str, dict[str, str]]:
        await process.start(home, env=env)
        async with DaemonClient(home) as client:
            info = await client.create_session(
                CreateSession(task="delegate three jobs", model="openai/m", cwd=str(cwd))
            )
            spawned = await until(client, info.id, lambda r: isinstance(r.event, CellFinished))
            assert isinstance(spawned.event, CellFinished)
            assert spawned.event.output == "['a', 'b', 'c']\n", spawned.event
            children = {
                s.name or "": s.id for s in await client.sessions() if s.parent_id == info.id
            }
            assert sorted(children) == ["a", "b", "c"]
            # A child's live output means its cell runs in its kernel (and has
            # written its ledger token): kill only once all three are there.
            await asyncio.gather(
                *(
                    until(client, child, lambda r: r.event.type == "cell_output")
                    for child in children.values()
                )
            )
            return info.id, children

    parent, children = asyncio.run(asyncio.wait_for(start_the_tree(), WAIT))
    kill_daemon(home)

    restarted = recursa(["daemon", "start"], env, cwd)
    assert restarted.returncode == 0, restarted.stderr
    # The lost cells were still holding when the daemon came back (it interrupts
    # a cell it finds running in a kernel it reattaches); nothing waits for this.
    release.touch()
    asyncio.run(quiet(home, parent))

    async def list_them() -> None:
        async with DaemonClient(home) as client:
            receipt = await client.send(parent, SendMessage(LIST_REQUEST, mode="follow_up"))
            assert receipt.status == "delivered", receipt

    asyncio.run(list_them())
    asyncio.run(quiet(home, parent))

    parent_log = asyncio.run(stored(home, parent))
    logs = {name: asyncio.run(stored(home, child)) for name, child in children.items()}

    # The parent got each child's answer once.
    from_children = Counter(e.text for e in events_of(parent_log, UserInput) if e.source == "child")
    assert from_children == {f"sub-agent {n} finished: answer {n}": 1 for n in "abc"}

    # rlm.list_subagents(), run in the parent's reattached kernel, lists all three, done.
    listed = events_of(parent_log, CellFinished)[-1]
    assert listed.status == "ok", listed
    assert json.loads(listed.output) == [
        {"name": n, "parent_id": parent, "done": True, "answer": f"answer {n}"} for n in "abc"
    ]

    # recursa agents shows the tree, every session idle.
    shown = {str(item["id"]): item for item in agents(env, cwd)}
    assert {
        shown[child]["name"]: (shown[child]["parent_id"], shown[child]["status"])
        for child in children.values()
    } == {n: (parent, "idle") for n in "abc"}
    assert shown[parent]["parent_id"] is None
    assert shown[parent]["status"] == "idle"

    # Each child's cell was cut short, not run again, and the child answered after.
    for name, records in logs.items():
        check_lost_cell(name, records)
        ends = events_of(records, TurnEnded)
        assert [(e.reason, e.answer) for e in ends] == [("answered", f"answer {name}")], name

    # Each cell's side effect happened exactly once.
    assert Counter(ledger.read_text().split()) == {f"{n}:0": 1 for n in "abc"}
    assert model.violations == []


# -- queued messages -------------------------------------------------------------------------


class BusyWorker(Responder):
    """The parent spawns w, waits (in the same cell) for w to say it is in its
    cell, then sends it three follow-ups and prints their receipts; after that
    it answers. The child w runs one gated cell, then answers with the notes
    it has been sent so far."""

    def __init__(self, ledger: Path, release: Path) -> None:
        super().__init__()
        self.ledger = ledger
        self.release = release

    def reply(self, task: str, messages: list[dict[str, Any]]) -> Reply:
        if "busy job" in task:
            if tool_results(messages) == 0:
                tell = "await agent_message.send('w is in its cell', to='parent', mode='steer')\n"
                return python(gated_cell("w:0", self.ledger, self.release, before=tell))
            notes = [m.group(1) for t in user_texts(messages) if (m := NOTE.search(t))]
            return Reply(text="notes: " + (",".join(notes) or "none"))
        if tool_results(messages) == 0:
            return python(
                "h = await rlm('busy job', name='w')\n"
                "heard = await agent_message.inbox(wait=60)\n"
                "rs = [await agent_message.send(f'note {i}', to='child:w', mode='follow_up') "
                "for i in (1, 2, 3)]\n"
                "print([m.text for m in heard], [r.status for r in rs])\n"
            )
        answers = sum(1 for text in user_texts(messages) if "sub-agent w finished" in text)
        return Reply(text=f"parent has {answers} answers")


def test_messages_queued_for_a_busy_child_survive_a_kill(
    home: Path, cwd: Path, files: tuple[Path, Path]
) -> None:
    ledger, release = files
    model = BusyWorker(ledger, release)
    with FakeModelServer.in_thread(responder=model) as server:
        env = daemon_env(home, server)
        try:
            check_queued_messages_survive(home, env, cwd, model, ledger, release)
        finally:
            release.touch()
            kill_everything(home)


def check_queued_messages_survive(
    home: Path,
    env: dict[str, str],
    cwd: Path,
    model: BusyWorker,
    ledger: Path,
    release: Path,
) -> None:
    async def queue_the_notes() -> str:
        await process.start(home, env=env)
        async with DaemonClient(home) as client:
            info = await client.create_session(
                CreateSession(task="supervise a worker", model="openai/m", cwd=str(cwd))
            )
            sent = await until(client, info.id, lambda r: isinstance(r.event, CellFinished))
            assert isinstance(sent.event, CellFinished)
            # w is held in its cell until the release file exists, so its turn
            # is still running: the three follow-ups wait in its inbox.
            assert sent.event.output == ("['w is in its cell'] ['queued', 'queued', 'queued']\n"), (
                sent.event
            )
            return info.id

    parent = asyncio.run(asyncio.wait_for(queue_the_notes(), WAIT))
    kill_daemon(home)
    # The lost cell ends while no daemon runs; its result goes nowhere.
    release.touch()

    async def restart() -> None:
        await process.start(home, env=env)

    asyncio.run(restart())
    asyncio.run(quiet(home, parent))

    parent_log = asyncio.run(stored(home, parent))
    [child] = [item["id"] for item in agents(env, cwd) if item["parent_id"] == parent]
    records = asyncio.run(stored(home, str(child)))

    # The child's cell was cut short by the kill and not run again.
    check_lost_cell("w", records)
    assert Counter(ledger.read_text().split()) == {"w:0": 1}

    # The notes were still queued when the daemon died: each is delivered once,
    # in the order sent, after the recovery, and not before the cut-short turn ends.
    inputs = [(r.seq, r.event) for r in records if isinstance(r.event, UserInput)]
    texts = [e.text for _, e in inputs]
    assert texts == ["busy job", "note 1", "note 2", "note 3"], texts
    assert all(e.source == "parent" and e.sender == parent for _, e in inputs)
    first_end = next(r.seq for r in records if isinstance(r.event, TurnEnded))
    assert all(seq > recovered_at(records) and seq > first_end for seq, _ in inputs[1:])

    # The resumed turn answered without the notes; the next one with all of them.
    ends = events_of(records, TurnEnded)
    assert ends[0].answer == "notes: none"
    assert ends[-1].answer == "notes: 1,2,3"
    assert all(e.reason == "answered" for e in ends)

    # The parent heard each of those answers once (w's "in its cell" went to
    # the parent's cell, through its inbox, not into its context).
    from_child = Counter(e.text for e in events_of(parent_log, UserInput) if e.source == "child")
    assert from_child == {f"sub-agent w finished: {e.answer}": 1 for e in ends}
    assert model.violations == []


# -- a kill between a child's end and its report ---------------------------------------------


async def open_host_dying_after_a_child_turn(
    config: Config, *, api_socket: Path | None = None
) -> tuple[Host, Callable[[], Awaitable[None]]]:
    """A ``--host-factory``: the real host, in a daemon that SIGKILLs itself
    the moment a sub-agent's ``turn_ended`` is recorded and before its answer
    is queued for the parent (a kill -9 landing there, made certain). Both are
    one transaction, so neither survives, and the cut turn resumes."""

    def record(self: Session, event: Event) -> EventRecord:
        stored = plain_record(self, event)
        if isinstance(event, TurnEnded):
            os.kill(os.getpid(), signal.SIGKILL)
        return stored

    plain_record = Session.record
    Session.record = record  # type: ignore[method-assign]
    return await open_host(config, api_socket=api_socket)


class OneChild(Responder):
    def reply(self, task: str, messages: list[dict[str, Any]]) -> Reply:
        if CHILD_JOB.search(task):
            return Reply(text="answer a")
        if tool_results(messages) == 0:
            return python("h = await rlm('child job a', name='a')\n")
        answers = sum(1 for text in user_texts(messages) if "finished: answer" in text)
        return Reply(text=f"parent has {answers} answers")


def test_a_kill_right_after_a_child_ends_still_reports_its_answer(home: Path, cwd: Path) -> None:
    model = OneChild()
    here = Path(__file__).parent
    with FakeModelServer.in_thread(responder=model) as server:
        env = daemon_env(home, server)
        dying = {**env, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}
        try:
            check_answer_survives_a_kill_at_the_end(home, env, dying, cwd)
        finally:
            kill_everything(home)


def check_answer_survives_a_kill_at_the_end(
    home: Path, env: dict[str, str], dying: dict[str, str], cwd: Path
) -> None:
    factory = f"{Path(__file__).stem}:{open_host_dying_after_a_child_turn.__name__}"

    async def run_until_the_daemon_dies() -> str:
        state = await process.start(home, env=dying, host_factory=factory)
        async with DaemonClient(home) as client:
            info = await client.create_session(
                CreateSession(task="delegate one job", model="openai/m", cwd=str(cwd))
            )
        await asyncio.to_thread(psutil.Process(state.pid).wait, WAIT)
        await process.start(home, env=env)
        return info.id

    parent = asyncio.run(asyncio.wait_for(run_until_the_daemon_dies(), WAIT))
    asyncio.run(quiet(home, parent))
    [child] = [item["id"] for item in agents(env, cwd) if item["parent_id"] == parent]
    child_ends = events_of(asyncio.run(stored(home, str(child))), TurnEnded)
    assert [e.answer for e in child_ends] == ["answer a"]
    parent_log = asyncio.run(stored(home, parent))
    from_child = [e.text for e in events_of(parent_log, UserInput) if e.source == "child"]
    assert from_child == ["sub-agent a finished: answer a"]

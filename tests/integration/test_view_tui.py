"""``recursa view`` driven by Textual's pilot against a real daemon (real kernels,
real sockets, real SQLite); only the model is scripted, by a responder.

The tree: root → child → grandchild. The root's cell runs until the test
releases it (a file in its workspace). The grandchild made a local memory
and proposed a global skill; a message sent to it is answered in its next
turn with ``pong: <text>``, after a cell that makes the memory's v2. SVG screenshots of each pane go to
``RECURSA_SHOTS`` (default: the test's tmp dir) and are read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from daemon_kit import kill_everything
from recursa.config import environment
from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.protocol.events import CellFinished
from recursa.protocol.person_ops import (
    ADD_SCHEDULE,
    GOAL,
    HARNESS_SHOW,
    SCHEDULES,
    EntryRef,
    ScheduleFor,
    ScheduleQuery,
    SessionRef,
)
from recursa.protocol.wire import CreateSession
from recursa.testing import FakeModelServer, Reply, ToolCallSpec
from recursa.view.tui.app import ViewApp
from recursa.view.tui.control import ControlScreen
from recursa.view.tui.harness_pane import HarnessPane

T = TypeVar("T")

ROOT_CELL = (
    "h = await rlm('task-c: delegate', name='child')\n"
    "import asyncio, os\n"
    "while not os.path.exists('release'):\n"
    "    await asyncio.sleep(0.05)\n"
    "print('released')"
)
CHILD_CELL = "h = await rlm('task-g: learn', name='grandchild')\nprint('delegated')"
GRANDCHILD_CELL = (
    "m = await harness.create('memory', 'port', 'the port is 8080', reason='read it')\n"
    "s = await harness.create('skill', 'square', 'squares a number', scope='global',\n"
    "    code='async def square(x):\\n    return x * x', reason='squared twice')\n"
    "print('[bold red]not markup[/]')\n"
    "print('\\n'.join(f'line {i}' for i in range(30)))"
)

MEMORY_V2 = "await harness.update('port', content='the port is 9090', reason='it moved')"


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def respond(path: str, body: dict[str, Any]) -> Reply:
    """Each session runs its one cell, then answers; a later message to the
    grandchild is answered ``pong: <its last line>``."""
    messages = body["messages"]
    users = [_text(m["content"]) for m in messages if m["role"] == "user"]
    task = users[0] if users else ""
    ran = any(m["role"] == "tool" for m in messages)
    if "task-g" in task and len(users) > 1:
        # A message after its task: the memory gets its second version, then the answer.
        if messages[-1]["role"] == "user":
            return Reply(tool_calls=[ToolCallSpec("python", {"code": MEMORY_V2})])
        return Reply(text="pong: " + users[-1].strip().splitlines()[-1])
    if ran:
        return Reply(text="done")
    code = ROOT_CELL if "task-r" in task else CHILD_CELL if "task-c" in task else GRANDCHILD_CELL
    return Reply(tool_calls=[ToolCallSpec("python", {"code": code})])


@dataclass
class Tree:
    home: Path
    work: Path
    client: DaemonClient
    root_id: str = ""

    def release_root(self) -> None:
        (self.work / "release").write_text("go")


async def until(pilot: Pilot[None], what: Callable[[], bool], timeout: float = 60) -> None:
    """Let the app run until ``what()`` holds (polled with a deadline)."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            screen = plain(shot(pilot.app, "timed-out"))  # type: ignore[arg-type]
            raise AssertionError(f"timed out; the screen:\n{screen}")
        await pilot.pause(0.05)


@contextlib.asynccontextmanager
async def tree(tmp_path: Path) -> AsyncIterator[Tree]:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    async with FakeModelServer(responder=respond) as server:
        env = {
            **environment(),
            "RECURSA_HOME": str(home),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "x",
        }
        await process.start(home, env=env, reuse=True)
        try:
            async with DaemonClient(home) as client:
                made = Tree(home, work, client)
                root = await client.create_session(
                    CreateSession(task="task-r: go", model="openai/m", name="root", cwd=str(work))
                )
                made.root_id = root.id
                yield made
                made.release_root()
        finally:
            await asyncio.to_thread(kill_everything, home)


def shots() -> Path:
    where = Path(os.environ.get("RECURSA_SHOTS") or "/tmp/recursa-shots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def shot(app: ViewApp, name: str) -> str:
    """Save an SVG of the screen as ``name``.svg; its text."""
    path = app.save_screenshot(f"{name}.svg", str(shots()))
    return Path(path).read_text()


def plain(svg: str) -> str:
    """The text an SVG screenshot shows (its tags dropped)."""
    body = svg[svg.find("</style>") :]
    text = html.unescape(re.sub(r"<[^>]+>", "", body)).replace("\xa0", " ")
    return "\n".join(line for line in text.splitlines() if line.strip())


def grandchild_done(app: ViewApp) -> bool:
    """The grandchild exists and its first turn is over (and so the child's)."""
    found = [i for i in app.live.sessions.values() if i.name == "grandchild"]
    return (
        bool(found) and found[0].status in ("idle", "inactive") and found[0].last_answer == "done"
    )


def cell_session(app: ViewApp) -> str:
    return next(i.id for i in app.live.sessions.values() if i.name == "grandchild")


async def test_find_read_message_approve_revert_while_the_root_runs(tmp_path: Path) -> None:
    async with tree(tmp_path) as demo:
        app = ViewApp(demo.client)
        async with app.run_test(size=(80, 24)) as pilot:
            names = lambda: {i.name for i in app.live.sessions.values()}  # noqa: E731
            await until(pilot, lambda: {"root", "child", "grandchild"} <= names())

            await until(pilot, lambda: grandchild_done(app))
            tree_svg = plain(shot(app, "tui-tree"))
            assert "grandchild" in tree_svg and "running" in tree_svg

            # 1. find the grandchild (filter by name), read its last cell and output
            await pilot.press("slash", *"grand", "enter", "enter")
            pane = app.pane
            await until(
                pilot, lambda: any(b.kind == "cell" and b.status for b in pane.blocks.items)
            )
            [cell] = [b for b in pane.blocks.items if b.kind == "cell"]
            assert cell.code is not None and "harness.create('skill'" in cell.code
            assert "[bold red]not markup[/]" in cell.output
            await pilot.press("c")  # to the last cell
            await pilot.pause()
            session_svg = plain(shot(app, "tui-session"))
            assert "[bold red]not markup[/]" in session_svg and "line 6" in session_svg

            # 2. send it a message; it answers in its next turn. Attached to it, the
            # message box goes to it even while another session is shown.
            await pilot.press("a")
            assert app.attached == cell_session(app)
            app.open_session(demo.root_id)
            await pilot.pause()
            assert "grandchild (attached)" in plain(shot(app, "tui-attached"))
            await pilot.press("m", *"ping", "enter", "escape")
            app.open_session(app.attached)
            await pilot.press("a")
            assert app.attached is None
            await until(
                pilot,
                lambda: any(
                    b.kind == "turn_end" and b.body == "pong: ping" for b in pane.blocks.items
                ),
            )
            await pilot.press("end")
            await pilot.pause()
            assert "pong: ping" in plain(shot(app, "tui-session-pong"))

            # 3. the proposal, its trigger events, its diff against nothing, approve
            await pilot.press("escape", "3")
            harness = app.query_one(HarnessPane)
            await until(pilot, lambda: bool(harness.entries) and harness.triggers != [])
            assert harness.triggers == [(cell_session(app), harness.entries[0].source_events[0])]
            first = harness.entries[0]
            assert (first.title, first.status) == ("square", "proposed")
            await pilot.press("d")
            await pilot.pause()
            diff_svg = plain(shot(app, "tui-harness-diff"))
            assert "nothing (v0)" in diff_svg and "async def square" in diff_svg
            # its trigger event opens the grandchild's pane at that event, marked
            [(trigger_session, seq)] = harness.triggers
            await pilot.press("j")
            await until(pilot, lambda: app.tabs.active == "session" and pane.mark == seq)
            await until(pilot, lambda: any(seq in v.block.seqs for v in pane.views))
            assert trigger_session == cell_session(app)
            assert f"#{seq} " in plain(shot(app, "tui-trigger"))
            await pilot.press("3")
            await until(pilot, lambda: harness.detail is not None)
            await pilot.press("a")
            show = lambda ref: demo.client.call(HARNESS_SHOW, EntryRef(ref))  # noqa: E731
            await until(pilot, lambda: harness.entries[0].status == "active", timeout=30)
            assert (await show(first.id)).entry.status == "active"

            # 4. revert the memory to its previous version (v1)
            memory = next(e for e in harness.entries if e.kind == "memory")
            assert memory.version == 2
            table = app.query_one("#entries", DataTable)
            table.move_cursor(row=harness.entries.index(memory))
            await until(
                pilot, lambda: harness.detail is not None and harness.detail.entry.id == memory.id
            )
            await pilot.press("v")
            await until(
                pilot, lambda: any(e.id == memory.id and e.version == 3 for e in harness.entries)
            )
            reverted = (await show(memory.id)).entry
            assert (reverted.version, reverted.content) == (3, "the port is 8080")
            shot(app, "tui-harness")

            # the usage pane: the root's subtree
            await pilot.press("1")
            app.tree_pane.select(demo.root_id)
            await pilot.press("4")
            await until(pilot, lambda: "root" in plain(shot(app, "tui-usage")))

            # all while the root's cell kept running; released, it ends normally
            root = app.live.sessions[demo.root_id]
            assert root.status == "running" and root.cell_started_at is not None
            demo.release_root()
            done: list[CellFinished] = []
            async with contextlib.aclosing(demo.client.events(demo.root_id, follow=True)) as s:  # type: ignore[type-var]
                async for record in s:
                    if isinstance(record.event, CellFinished):
                        done.append(record.event)
                        break
            assert done[0].status == "ok" and "released" in done[0].output


async def test_goal_schedules_unload_and_a_daemon_that_dies(tmp_path: Path) -> None:
    async with tree(tmp_path) as demo:
        await demo.client.call(
            ADD_SCHEDULE, ScheduleFor(demo.root_id, "every 10m", "look around", label="tick")
        )
        app = ViewApp(demo.client, start="root")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.pane.session_id == demo.root_id)
            await until(pilot, lambda: grandchild_done(app))
            # the tree's status filter: running only, then idle only
            await pilot.press("1", "t")
            await until(
                pilot, lambda: [r.id for r in app.tree_pane.shown if r.matched] == [demo.root_id]
            )
            await pilot.press("t", "t", "t")
            assert len(app.tree_pane.shown) == 3

            # goal and schedules of the root: set, pause, resume, clear; cancel the tick
            await pilot.press("o")
            screen = app.screen
            assert isinstance(screen, ControlScreen)
            await until(pilot, lambda: len(screen.jobs) == 1)
            await pilot.press("n", *"keep watch", "enter")
            goal = lambda: demo.client.call(GOAL, SessionRef(demo.root_id))  # noqa: E731
            await until_async(pilot, goal, lambda g: g is not None and g.status == "active")
            assert "keep watch" in plain(shot(app, "tui-goal"))
            await pilot.press("p")
            await until_async(pilot, goal, lambda g: g is not None and g.status == "paused")
            await pilot.press("r")
            await until_async(pilot, goal, lambda g: g is not None and g.status == "active")
            await pilot.press("c")
            await until_async(pilot, goal, lambda g: g is None or g.status == "cleared")
            await pilot.press("delete")
            jobs = lambda: demo.client.call(SCHEDULES, ScheduleQuery(demo.root_id, finished=True))  # noqa: E731
            await until_async(pilot, jobs, lambda js: js[0].status == "cancelled")
            await pilot.press("escape")
            assert not isinstance(app.screen, ControlScreen)

            # a running session is not unloaded (one line says why); interrupt is asked for
            await pilot.press("u")
            await until(pilot, lambda: "unload: " in status_line(app))
            assert "running" in status_line(app)
            assert app.live.sessions[demo.root_id].status == "running"
            demo.release_root()

            # the daemon dies: one line in the status bar, no traceback
            await asyncio.to_thread(kill_everything, demo.home)
            await until(pilot, lambda: "daemon: not running" in status_line(app))
            assert "Traceback" not in plain(shot(app, "tui-daemon-gone"))


def status_line(app: ViewApp) -> str:
    return str(app.query_one("#status", Static).render())


async def until_async(
    pilot: Pilot[None],
    read: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    timeout: float = 30,
) -> T:
    """Read (from the daemon) until ``ok`` holds, letting the app run in between."""
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"timed out; last: {value!r}"
        await pilot.pause(0.05)

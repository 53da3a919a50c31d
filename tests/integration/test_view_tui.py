"""``recursa view`` driven by Textual's pilot against a real daemon (real kernels,
real sockets, real SQLite); only the model is scripted, by a responder.

The tree is :func:`recursa.testing.demo_tree.demo_tree`: root → child →
grandchild; the root's cell runs until the test releases it; the grandchild
proposed a global skill (``double``) and answers a message with ``pong: <text>``;
the child's memory ``answer-fact`` has two versions. SVG screenshots of each pane go to
``RECURSA_SHOTS`` (default: the test's tmp dir) and are read back.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from textual.command import CommandList, CommandPalette
from textual.css.query import NoMatches
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from daemon_kit import kill_everything
from recursa.daemon.client import DaemonClient
from recursa.protocol.events import CellFinished
from recursa.protocol.person_ops import (
    ADD_SCHEDULE,
    GOAL,
    HARNESS_SHOW,
    SCHEDULES,
    SESSIONS,
    EntryRef,
    ScheduleFor,
    ScheduleQuery,
    SessionRef,
)
from recursa.testing.demo_tree import Demo, demo_tree
from recursa.view.blocks import Blocks
from recursa.view.tui import session_pane
from recursa.view.tui.app import ViewApp
from recursa.view.tui.control import ControlScreen
from recursa.view.tui.harness_pane import HarnessPane

T = TypeVar("T")


@pytest.fixture
def demo(home: Path, tmp_path: Path) -> Iterator[Demo]:
    with demo_tree(home, tmp_path / "work") as tree:
        yield tree


async def until(pilot: Pilot[None], what: Callable[[], bool], timeout: float = 60) -> None:
    """Let the app run until ``what()`` holds (polled with a deadline); on a
    timeout the error shows the screen."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            screen = plain(shot(pilot.app, "timed-out"))  # type: ignore[arg-type]
            raise AssertionError(f"timed out; the screen:\n{screen}")
        await pilot.pause(0.05)


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


async def test_find_read_message_approve_revert_while_the_root_runs(demo: Demo) -> None:
    async with DaemonClient(demo.home) as client:
        app = ViewApp(client)
        reads = spy_sessions_calls(client)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: len(app.live.sessions) == 3)
            calls_before = app.live.sessions[demo.grandchild_id].usage.calls
            tree_svg = plain(shot(app, "tui-tree"))
            assert "grandchild" in tree_svg and "running" in tree_svg

            # 1. find the grandchild (filter by name), read its last cell and output
            await pilot.press("slash", *"grand", "enter", "enter")
            pane = app.pane
            await until(
                pilot, lambda: any(b.kind == "cell" and b.status for b in pane.blocks.items)
            )
            [cell] = [b for b in pane.blocks.items if b.kind == "cell"]
            assert cell.code is not None and cell.code.startswith("print(6 * 7)")
            assert cell.output.splitlines()[0] == "42" and cell.status == "ok"
            assert pane.session_id == demo.grandchild_id
            await pilot.press("c")  # to the last cell
            await pilot.pause()
            session_svg = plain(shot(app, "tui-session"))
            assert "print(6 * 7)" in session_svg and "cell 1" in session_svg

            # 2. send it a message; it answers in its next turn. Attached to it, the
            # message box goes to it even while another session is shown.
            await pilot.press("a")
            assert app.attached == demo.grandchild_id
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
            # the tree learnt of the new turn from the feed: only dirty sessions reread
            grandchild = lambda: app.live.sessions[demo.grandchild_id]  # noqa: E731
            await until(pilot, lambda: grandchild().usage.calls > calls_before)
            await until(pilot, lambda: grandchild().status == "idle")
            assert reads[0] is None and len(reads) > 1
            assert all(ids is not None and len(ids.split(",")) <= 3 for ids in reads[1:])

            # 3. the proposal, its trigger events, its diff against nothing, approve
            await pilot.press("escape", "3")
            harness = app.query_one(HarnessPane)
            await until(pilot, lambda: bool(harness.entries) and harness.triggers != [])
            first = harness.entries[0]
            assert (first.title, first.status, first.id) == ("double", "proposed", demo.skill_id)
            # filtered by kind: memories only, then any again
            await pilot.press("k", "k")  # prompt_note, memory
            await until(pilot, lambda: [e.kind for e in harness.entries] == ["memory"])
            await pilot.press("k", "k", "k")  # skill, subagent_spec, any
            await until(pilot, lambda: len(harness.entries) == 2)
            await until(pilot, lambda: harness.triggers != [])
            assert harness.triggers == [(demo.grandchild_id, seq) for seq in first.source_events]
            await pilot.press("d")
            await pilot.pause()
            diff_svg = plain(shot(app, "tui-harness-diff"))
            assert "nothing (v0)" in diff_svg and "def double(x):" in diff_svg
            # its trigger event opens the grandchild's pane at that event, marked
            trigger_session, seq = harness.triggers[0]
            await pilot.press("j")
            await until(pilot, lambda: app.tabs.active == "session" and pane.mark == seq)
            await until(pilot, lambda: any(seq in v.block.seqs for v in pane.views))
            assert trigger_session == demo.grandchild_id
            assert f"#{seq} " in plain(shot(app, "tui-trigger"))
            await pilot.press("3")
            await until(pilot, lambda: harness.detail is not None)
            await pilot.press("a")
            show = lambda ref: client.call(HARNESS_SHOW, EntryRef(ref))  # noqa: E731
            await until(pilot, lambda: harness.entries[0].status == "active", timeout=30)
            assert (await show(first.id)).entry.status == "active"
            assert harness.entry is not None and harness.entry.id == demo.skill_id

            # 4. revert the memory to its previous version (v1)
            memory = next(e for e in harness.entries if e.id == demo.memory_id)
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
            assert (reverted.version, reverted.content) == (3, "6*7 is 42")
            shot(app, "tui-harness")

            # the usage pane: the root's subtree
            await pilot.press("1")
            app.tree_pane.select(demo.root_id)
            await pilot.press("4")
            await until(pilot, lambda: "root" in plain(shot(app, "tui-usage")))

            # all while the root's cell kept running; released, it ends normally
            root = app.live.sessions[demo.root_id]
            assert root.status == "running" and root.cell_started_at is not None
    assert await asyncio.to_thread(demo.release_root) == "ok"


async def test_goal_schedules_unload_and_a_daemon_that_dies(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short pages, so that the demo's short logs page back.
    monkeypatch.setattr(session_pane, "TAIL", 6)
    monkeypatch.setattr(session_pane, "PAGE", 6)
    async with DaemonClient(demo.home) as client:
        job = ScheduleFor(demo.root_id, "every 10m", "look around", label="tick")
        await client.call(ADD_SCHEDULE, job)
        app = ViewApp(client, start="demo-root")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.pane.session_id == demo.root_id)
            # the tree's status filter: running only, then idle, inactive, all
            await pilot.press("1", "t")
            await until(pilot, lambda: [r.id for r in app.tree_pane.shown] == [demo.root_id])
            await pilot.press("t", "t", "t")
            assert len(app.tree_pane.shown) == 3

            # the command palette jumps to a session by name (or id)
            await pilot.press("ctrl+p")
            await until(pilot, lambda: isinstance(app.screen, CommandPalette))
            await pilot.press(*"grandchild")
            await until(pilot, lambda: palette_offers(app, "grandchild"))
            await pilot.press("enter")
            await until(pilot, lambda: app.pane.session_id == demo.grandchild_id)
            assert app.tabs.active == "session"

            # a steer (ctrl+t switches the message box's mode); idle, it starts a turn
            await pilot.press("m", "ctrl+t", *"hey", "enter", "escape")
            assert app.pane.mode == "steer"
            assert "as a steer" in plain(shot(app, "tui-steer"))
            ended = lambda: [b.body for b in app.pane.blocks.items if b.kind == "turn_end"]  # noqa: E731
            await until(pilot, lambda: "pong: hey" in ended())
            app.open_session(demo.root_id)

            # goal and schedules of the root: set, pause, resume, clear; cancel the tick
            await pilot.press("o")
            screen = app.screen
            assert isinstance(screen, ControlScreen)
            await until(pilot, lambda: len(screen.jobs) == 1)
            await pilot.press("n", *"keep watch", "enter")
            goal = lambda: client.call(GOAL, SessionRef(demo.root_id))  # noqa: E731
            await until_async(pilot, goal, lambda g: g is not None and g.status == "active")
            await until(pilot, lambda: "keep watch" in plain(shot(app, "tui-goal")))
            await pilot.press("p")
            await until_async(pilot, goal, lambda g: g is not None and g.status == "paused")
            await pilot.press("r")
            await until_async(pilot, goal, lambda g: g is not None and g.status == "active")
            await pilot.press("c")
            await until_async(pilot, goal, lambda g: g is None or g.status == "cleared")
            await pilot.press("delete")
            query = ScheduleQuery(demo.root_id, finished=True)
            jobs = lambda: client.call(SCHEDULES, query)  # noqa: E731
            await until_async(pilot, jobs, lambda js: js[0].status == "cancelled")
            await pilot.press("escape")
            assert not isinstance(app.screen, ControlScreen)

            # a running session is not unloaded: one line says why
            await pilot.press("u")
            await until(pilot, lambda: "unload: " in status_line(app))
            assert "running" in status_line(app)
            assert app.live.sessions[demo.root_id].status == "running"

            # none of it interrupted the root's cell: it still runs
            records = [r async for r in client.events(demo.root_id)]
            assert not [r for r in records if isinstance(r.event, CellFinished)]
            assert app.live.sessions[demo.root_id].cell_started_at is not None

            # the daemon dies: one line in the status bar, no traceback
            await asyncio.to_thread(kill_everything, demo.home)
            await until(pilot, lambda: "daemon: not running" in status_line(app))
            assert "Traceback" not in plain(shot(app, "tui-daemon-gone"))


def spy_sessions_calls(client: DaemonClient) -> list[str | None]:
    """The ``ids`` of every ``sessions`` call the client makes from now on."""
    seen: list[str | None] = []
    real = client.call

    async def call(op: Any, request: Any) -> Any:
        if op is SESSIONS:
            seen.append(request.ids)
        return await real(op, request)

    client.call = call  # type: ignore[method-assign]
    return seen


def status_line(app: ViewApp) -> str:
    return str(app.query_one("#status", Static).render())


def palette_offers(app: ViewApp, text: str) -> bool:
    """Whether the open command palette's highlighted hit names ``text``."""
    try:
        hits = app.screen.query_one(CommandList)
    except NoMatches:
        return False
    index = hits.highlighted
    return index is not None and text in str(hits.get_option_at_index(index).prompt)


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


@pytest.mark.parametrize("page", [2, 3, 5])
async def test_paging_back_reaches_the_start_with_every_block_once(
    demo: Demo, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    """Pages of several sizes split the child's blocks at different places (a
    cell's start and end in two pages): either way, the pane ends up showing
    exactly the blocks of the whole log, each once, in order."""
    monkeypatch.setattr(session_pane, "TAIL", page)
    monkeypatch.setattr(session_pane, "PAGE", page)
    async with DaemonClient(demo.home) as client:
        # The child's last records (its kernel's status, idle) may still be on
        # their way when the demo is handed over: the whole log is read once
        # the child and its sub-agent are quiet.
        assert await client.wait_quiet(demo.child_id, timeout=60)
        whole = [r async for r in client.events(demo.child_id)]
        app = ViewApp(client, start="child")
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.pane.loaded and app.pane.session_id == demo.child_id)
            for _ in range(len(whole)):  # at most one page per record
                if app.pane.records and app.pane.records[0].seq == whole[0].seq:
                    break
                await app.pane.action_earlier().wait()
                await pilot.pause()
            assert [r.seq for r in app.pane.records] == [r.seq for r in whole]
            expected = Blocks(app.pane.name_of)
            expected.extend(whole)
            assert app.pane.blocks.items == expected.items
            assert [view.block for view in app.pane.views] == expected.items
            shown = list(app.pane.log_view.query(session_pane.BlockView))
            assert shown == app.pane.views  # mounted in the same order

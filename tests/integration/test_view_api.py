"""The daemon API the Agents View reads through, on a live three-level tree
(a real daemon, real kernels, a scripted model): sessions by id with depth,
inbox and running cell; the global feed from a cursor; the tail of a log and
paging back; unloading an idle session and refusing a running one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from recursa.daemon.client import DaemonClient
from recursa.daemon.paths import DaemonPaths
from recursa.errors import StoreError, UsageError
from recursa.protocol.events import CellStarted, EventRecord, TurnEnded, UserInput
from recursa.protocol.person_ops import HARNESS_SHOW, EntryRef
from recursa.protocol.wire import SendMessage
from recursa.testing.demo_tree import Demo, demo_tree
from socket_proxy import SocketProxy


@pytest.fixture
def demo(home: Path, tmp_path: Path) -> Iterator[Demo]:
    with demo_tree(home, tmp_path / "work") as tree:
        yield tree


async def test_sessions_by_id_carry_depth_inbox_and_the_running_cell(demo: Demo) -> None:
    async with DaemonClient(demo.home) as client:
        every = await client.sessions()
        picked = await client.sessions([demo.grandchild_id, demo.root_id])
    assert {s.id for s in every} == {demo.root_id, demo.child_id, demo.grandchild_id}
    assert [s.id for s in picked] == [demo.root_id, demo.grandchild_id]  # oldest first
    root, grandchild = picked
    assert (root.depth, grandchild.depth) == (0, 2)
    assert root.status == "running" and root.cell_started_at is not None
    assert grandchild.status == "idle" and grandchild.cell_started_at is None
    assert root.cell_started_at <= root.last_activity
    assert grandchild.pending == 0


async def test_the_feed_reads_every_session_from_a_cursor_then_follows(demo: Demo) -> None:
    async with DaemonClient(demo.home) as client:
        stored = [r async for r in client.feed()]
        seqs = [r.seq for r in stored]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert {r.session_id for r in stored} == {demo.root_id, demo.child_id, demo.grandchild_id}
        middle = seqs[len(seqs) // 2]
        assert [r.seq for r in [r async for r in client.feed(after=middle)]] == [
            s for s in seqs if s > middle
        ]

        seen: list[EventRecord] = []
        answered = asyncio.Event()

        async def follow() -> None:
            async for record in client.feed(after=seqs[-1], follow=True):
                seen.append(record)
                if isinstance(record.event, TurnEnded) and record.session_id == demo.grandchild_id:
                    answered.set()
                    return

        watcher = asyncio.create_task(follow())
        try:
            await client.send(demo.grandchild_id, SendMessage("ping from the feed test"))
            await asyncio.wait_for(answered.wait(), 60)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    assert all(r.seq > seqs[-1] for r in seen)
    inputs = [r.event for r in seen if isinstance(r.event, UserInput)]
    assert [e.text for e in inputs] == ["ping from the feed test"]
    ended = [r.event for r in seen if isinstance(r.event, TurnEnded)]
    assert ended[-1].answer == "pong: ping from the feed test"


async def test_the_tail_of_a_log_and_paging_back_cover_it_once(demo: Demo) -> None:
    async with DaemonClient(demo.home) as client:
        whole = [r.seq async for r in client.events(demo.grandchild_id)]
        tail = [r.seq async for r in client.events(demo.grandchild_id, limit=3)]
        assert tail == whole[-3:]
        pages: list[int] = tail
        while True:
            page = [
                r.seq async for r in client.events(demo.grandchild_id, limit=3, before=pages[0])
            ]
            if not page:
                break
            assert len(page) <= 3
            pages = page + pages
        assert pages == whole
        with pytest.raises(UsageError, match="cannot follow"):
            _ = [r async for r in client.events(demo.grandchild_id, before=5, follow=True)]


async def test_unload_takes_an_idle_session_and_refuses_a_running_one(demo: Demo) -> None:
    async with DaemonClient(demo.home) as client:
        with pytest.raises(StoreError, match="is running: interrupt or stop it first"):
            await client.unload(demo.root_id)
        unloaded = await client.unload(demo.grandchild_id)
        assert unloaded.status == "inactive"
        assert (await client.session(demo.root_id)).status == "running"
    assert demo.release_root() == "ok"  # the refusal interrupted nothing


async def test_a_models_edit_is_traced_to_its_turns_input_and_the_cell_that_made_it(
    demo: Demo,
) -> None:
    async with DaemonClient(demo.home) as client:
        detail = await client.call(HARNESS_SHOW, EntryRef(demo.skill_id))
        records = {r.seq: r.event async for r in client.events(demo.grandchild_id)}
    [v1] = detail.history
    assert v1.session_id == demo.grandchild_id
    triggers = [records[seq] for seq in v1.source_events]
    assert [type(e) for e in triggers] == [UserInput, CellStarted]
    assert isinstance(triggers[0], UserInput) and "DEMO-GRANDCHILD" in triggers[0].text
    assert isinstance(triggers[1], CellStarted) and "harness.create" in triggers[1].code


async def test_a_page_cut_short_resumes_with_the_rest_of_it_and_no_more(
    demo: Demo, tmp_path: Path
) -> None:
    async with DaemonClient(demo.home) as client:
        whole = [r.seq async for r in client.events(demo.grandchild_id)]
    before = whole[-1]
    socket = DaemonPaths.for_home(demo.home).socket
    async with (
        SocketProxy(tmp_path / "proxy.sock", socket) as proxy,
        DaemonClient(demo.home, socket=proxy.listen) as client,
    ):
        proxy.cut_after = b"DEMO-GRANDCHILD: compute"  # the task: early in the page
        page = [
            r.seq async for r in client.events(demo.grandchild_id, limit=len(whole), before=before)
        ]
        assert proxy.broken == 1 and proxy.connections == 2
    assert page == whole[:-1]  # below `before`, each once, though the first reply was cut

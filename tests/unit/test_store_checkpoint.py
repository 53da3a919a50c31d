"""WAL checkpoints off the writer's path: the runtime's connection never
checkpoints inside a COMMIT, and the :class:`Checkpointer` does it in a thread
once the store is quiet, or after many appends under a load that never pauses.
Real SQLite files; only the clock is injected."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from recursa.protocol.events import UserInput
from recursa.store import DB_FILE_NAME, Store
from recursa.store.checkpoint import Checkpointer

PAGE = 4096


def wal_pages(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size // PAGE if wal.exists() else 0


def fill(store: Store, session_id: str, commits: int) -> None:
    """``commits`` appends of about two pages each."""
    for _ in range(commits):
        store.append(session_id, UserInput(text="x" * 2 * PAGE))


def test_without_autocheckpoint_no_commit_checkpoints(tmp_path: Path) -> None:
    on, off = tmp_path / "on" / DB_FILE_NAME, tmp_path / "off" / DB_FILE_NAME
    with Store.open(on) as usual, Store.open(off, autocheckpoint=False) as store:
        for s in (usual, store):
            fill(s, s.create_session(model="faux/x", cwd="/", workspace="/").id, 1500)
        (auto,) = store.execute("PRAGMA wal_autocheckpoint").fetchone()
        assert auto == 0
        # SQLite's own checkpoint restarts the WAL at ~1000 pages; without it the
        # WAL holds every page written (about 3000), until a checkpoint copies them.
        assert wal_pages(on) < 1200
        assert wal_pages(off) > 2900
        frames, copied = Checkpointer(off).checkpoint()
        assert frames > 2900 and copied == frames
        # The next write starts the WAL over (its file keeps its size).
        fill(store, store.sessions()[0].id, 1)
        frames, copied = Checkpointer(off).checkpoint()
        assert 0 < frames < 10 and copied == frames


class Clock:
    """A clock that only moves when the checkpointer sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Recorded(Checkpointer):
    """Counts checkpoints and lets the test wait for the next one."""

    def __init__(self, path: Path, **kwargs: object) -> None:
        super().__init__(path, **kwargs)  # type: ignore[arg-type]
        self.done = threading.Semaphore(0)
        self.threads: list[str] = []

    def checkpoint(self) -> tuple[int, int]:
        result = super().checkpoint()
        self.threads.append(threading.current_thread().name)
        self.done.release()
        return result

    async def next_one(self) -> None:
        assert await asyncio.to_thread(self.done.acquire, True, 30), "no checkpoint"


async def test_checkpoints_when_quiet_in_a_thread(tmp_path: Path) -> None:
    path = tmp_path / DB_FILE_NAME
    clock = Clock()
    with Store.open(path, autocheckpoint=False) as store:
        keeper = Recorded(path, quiet=0.25, clock=clock, sleep=clock.sleep)
        store.on_append(keeper.appended)
        session = store.create_session(model="faux/x", cwd="/", workspace="/")
        task = asyncio.create_task(keeper.run())
        try:
            fill(store, session.id, 600)
            assert wal_pages(path) > 1000
            await keeper.next_one()
            # It waited out the quiet period (from the last append), no longer.
            assert clock.sleeps == [0.25]
            assert keeper.threads != [threading.current_thread().name]
            (busy, frames, copied) = store.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            assert busy == 0 and frames == copied  # nothing was left to copy
            assert keeper.checkpoints == 1
            # Nothing written since: no further checkpoint, however long it waits.
            await asyncio.sleep(0)
            assert keeper.checkpoints == 1
        finally:
            task.cancel()


async def test_a_load_that_never_pauses_is_checkpointed_after_many_appends(
    tmp_path: Path,
) -> None:
    path = tmp_path / DB_FILE_NAME
    clock = Clock()

    async def busy_sleep(seconds: float) -> None:
        # Every time the checkpointer waits, another append arrives.
        await clock.sleep(seconds)
        store.append(session.id, UserInput(text="y"))

    with Store.open(path, autocheckpoint=False) as store:
        keeper = Recorded(path, quiet=0.25, most_appends=50, clock=clock, sleep=busy_sleep)
        store.on_append(keeper.appended)
        session = store.create_session(model="faux/x", cwd="/", workspace="/")
        task = asyncio.create_task(keeper.run())
        try:
            store.append(session.id, UserInput(text="first"))
            await keeper.next_one()
            # Never quiet: it checkpointed once 50 appends had piled up.
            assert len(clock.sleeps) == 49
        finally:
            task.cancel()


def test_a_missing_store_is_logged_not_raised(tmp_path: Path) -> None:
    gone = tmp_path / "no-such-dir" / DB_FILE_NAME
    assert Checkpointer(gone).checkpoint() == (0, 0)
    assert not gone.exists()


def test_another_connection_sees_checkpointed_data(tmp_path: Path) -> None:
    path = tmp_path / DB_FILE_NAME
    with Store.open(path, autocheckpoint=False) as store:
        session = store.create_session(model="faux/x", cwd="/", workspace="/")
        fill(store, session.id, 10)
        Checkpointer(path).checkpoint()
    # Closed: the data is in the database file itself.
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM events WHERE type = 'user_input'").fetchone()
    finally:
        conn.close()
    assert count == 10


async def test_a_runtime_checkpoints_its_store_and_ends_that_before_closing_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from recursa.testing.runtime import make_runtime

    home = tmp_path / "home"
    async with make_runtime(home, api=False) as runtime:
        (auto,) = runtime.store.execute("PRAGMA wal_autocheckpoint").fetchone()
        assert auto == 0  # its appends never checkpoint inline
        assert "WAL checkpoints" in runtime.tasks.running()
    # Closed without naming it among the tasks left running.
    assert not [r for r in caplog.records if "still running at close" in r.getMessage()]


async def test_without_appends_it_still_checkpoints_now_and_then_and_outlives_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / DB_FILE_NAME
    clock = Clock()
    failed: list[bool] = []

    class FailsOnce(Recorded):
        def checkpoint(self) -> tuple[int, int]:
            if not failed:
                failed.append(True)
                raise RuntimeError("disk on fire")
            return super().checkpoint()

    with Store.open(path, autocheckpoint=False):
        keeper = FailsOnce(path, every=0.01, clock=clock, sleep=clock.sleep)
        task = asyncio.create_task(keeper.run())
        try:
            await keeper.next_one()  # no append at all: the second round, after a failure
        finally:
            task.cancel()
    assert failed == [True]
    assert any("WAL checkpoint" in r.getMessage() for r in caplog.records)

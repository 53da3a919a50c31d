"""The supervisor: named tasks, failures logged, everything cancelled on close."""

from __future__ import annotations

import asyncio
import logging

import pytest

from recursa.supervisor import Supervisor


async def _forever(started: asyncio.Event | None = None) -> None:
    if started is not None:
        started.set()
    await asyncio.Event().wait()


async def _fail() -> None:
    raise ValueError("boom")


async def test_running_names_its_tasks_and_close_cancels_them() -> None:
    tasks = Supervisor("test")
    started = asyncio.Event()
    one = tasks.start(_forever(started), name="one")
    two = tasks.group("pool").start(_forever(), name="two")
    await started.wait()
    assert tasks.running() == ["one", "two"]

    await tasks.aclose()

    assert one.cancelled() and two.cancelled()
    assert tasks.running() == []


async def test_a_failure_is_logged_with_the_task_name(caplog: pytest.LogCaptureFixture) -> None:
    async with Supervisor("test") as tasks:
        with caplog.at_level(logging.ERROR, logger="recursa.supervisor"):
            task = tasks.start(_fail(), name="doomed")
            await asyncio.wait([task])
            await tasks.join()  # the done callback has run by now
    [record] = [r for r in caplog.records if r.name == "recursa.supervisor"]
    assert "'doomed' failed" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


async def test_an_awaited_failure_is_left_to_its_awaiter(caplog: pytest.LogCaptureFixture) -> None:
    async with Supervisor("test") as tasks:
        with caplog.at_level(logging.ERROR, logger="recursa.supervisor"):
            task = tasks.start(_fail(), name="mine", awaited=True)
            with pytest.raises(ValueError, match="boom"):
                await task
    assert not [r for r in caplog.records if r.name == "recursa.supervisor"]


async def test_a_closed_supervisor_starts_nothing() -> None:
    tasks = Supervisor("test")
    await tasks.aclose()
    work = _forever()
    with pytest.raises(RuntimeError, match="closed: late not started"):
        tasks.start(work, name="late")
    assert work.cr_frame is None  # closed, so no "never awaited" warning either


async def test_a_group_closes_alone_and_leaves_its_parent() -> None:
    async with Supervisor("runtime") as tasks:
        pool = tasks.group("pool")
        kept = tasks.start(_forever(), name="kept")
        gone = pool.start(_forever(), name="gone")
        await pool.aclose()
        assert gone.cancelled() and not kept.done()
        assert tasks.running() == ["kept"]
        with pytest.raises(RuntimeError):
            pool.start(_forever(), name="again")
    assert kept.cancelled()


async def test_join_waits_for_tasks_started_while_it_waits() -> None:
    async with Supervisor("test") as tasks:
        done: list[str] = []

        async def second() -> None:
            done.append("second")

        async def first() -> None:
            tasks.start(second(), name="second")
            done.append("first")

        tasks.start(first(), name="first")
        await tasks.join()
        assert done == ["first", "second"]
        assert tasks.running() == []

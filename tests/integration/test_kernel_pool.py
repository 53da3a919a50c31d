"""The kernel pool: warm spares, handed out in the caller's directory, refilled."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recursa.config import Config
from recursa.errors import KernelError
from recursa.kernel import KernelPool, OutputPart


class Launches:
    """Tells, as it happens, of each kernel process launched with :attr:`python`.

    That interpreter is a wrapper that writes its pid to a FIFO and then
    becomes the real one (``exec`` keeps the pid), so a test can wait for a
    launch as an event instead of polling for child processes.
    """

    def __init__(self, tmp_path: Path) -> None:
        fifo = tmp_path / "launches"
        os.mkfifo(fifo)
        self.python = tmp_path / "python"
        self.python.write_text(
            "#!/bin/sh\n"
            f"echo $$ > {shlex.quote(str(fifo))}\n"
            f'exec {shlex.quote(sys.executable)} "$@"\n',
            encoding="utf-8",
        )
        self.python.chmod(0o755)
        self._reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        # A writer of our own, so that the FIFO never reads as closed
        # between two launches.
        self._writer = os.open(fifo, os.O_WRONLY)
        self._pids: asyncio.Queue[int] = asyncio.Queue()
        self._partial = b""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._reader, self._on_readable)

    def _on_readable(self) -> None:
        lines = (self._partial + os.read(self._reader, 4096)).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._pids.put_nowait(int(line))

    async def next(self) -> int:
        """The pid of the next launch (which may already have happened)."""
        return await asyncio.wait_for(self._pids.get(), 10)

    def pending(self) -> int:
        """Launches reported and not yet taken by :meth:`next`."""
        return self._pids.qsize()

    def close(self) -> None:
        self._loop.remove_reader(self._reader)
        os.close(self._reader)
        os.close(self._writer)


@pytest.fixture
async def launches(tmp_path: Path) -> AsyncIterator[Launches]:
    watcher = Launches(tmp_path)
    yield watcher
    watcher.close()


async def test_acquire_gives_a_ready_kernel_in_cwd_and_refills(
    config: Config, tmp_path: Path
) -> None:
    work = tmp_path / "session"
    work.mkdir()
    (work / "helper_mod.py").write_text(
        "VALUE = 'imported from the session dir'\n", encoding="utf-8"
    )
    async with KernelPool(config.kernel.env, size=1, runtime_dir=tmp_path / "rt") as pool:
        await pool.fill()
        assert pool.ready == 1
        kernel = await pool.acquire(work)
        try:
            assert pool.ready == 0  # the spare was handed out, not a new start
            assert kernel.is_alive()
            assert kernel.cwd == work
            out = await kernel.execute(
                "import os, helper_mod\nprint(os.getcwd())\nprint(helper_mod.VALUE)", timeout=10
            )
            assert out.parts == (OutputPart("stdout", f"{work}\nimported from the session dir\n"),)
            assert out.execution_count == 1  # the pool's own commands were silent
            await pool.fill()
            assert pool.ready == 1
        finally:
            await kernel.shutdown()


async def test_acquire_with_no_spare_starts_one_directly(config: Config, tmp_path: Path) -> None:
    async with KernelPool(config.kernel.env, size=0, runtime_dir=tmp_path / "rt") as pool:
        kernel = await pool.acquire(tmp_path)
        try:
            assert pool.ready == 0
            out = await kernel.execute("import os; os.getcwd()", timeout=10)
            assert out.parts == (OutputPart("result", repr(str(tmp_path))),)
        finally:
            await kernel.shutdown()


async def test_two_sessions_get_two_kernels(config: Config, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    async with KernelPool(config.kernel.env, size=1, runtime_dir=tmp_path / "rt") as pool:
        await pool.fill()
        first, second = await asyncio.gather(pool.acquire(a), pool.acquire(b))
        try:
            assert first.pid != second.pid
            assert {first.cwd, second.cwd} == {a, b}
        finally:
            await asyncio.gather(first.shutdown(), second.shutdown())


async def test_acquire_takes_a_spare_that_is_still_starting(
    config: Config, tmp_path: Path, launches: Launches
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    pool = KernelPool(
        config.kernel.env, size=1, runtime_dir=tmp_path / "rt", python=str(launches.python)
    )
    async with pool:
        spare = await launches.next()  # its process exists; it cannot be ready yet
        assert pool.ready == 0
        kernel = await pool.acquire(work)
        try:
            assert kernel.pid == spare  # not a second start beside it
            assert kernel.cwd == work
            out = await kernel.execute("import os; os.getcwd()", timeout=10)
            assert out.parts == (OutputPart("result", repr(str(work))),)
            replacement = await launches.next()
            assert replacement != spare
            await pool.fill()
            assert pool.ready == 1
            assert launches.pending() == 0  # two kernels in all
        finally:
            await kernel.shutdown()


async def test_acquires_share_the_spares_in_flight(
    config: Config, tmp_path: Path, launches: Launches
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    pool = KernelPool(
        config.kernel.env, size=2, runtime_dir=tmp_path / "rt", python=str(launches.python)
    )
    async with pool:
        spares = {await launches.next(), await launches.next()}
        first, second = await asyncio.gather(pool.acquire(a), pool.acquire(b))
        try:
            # Each took one of the two starting (whichever was ready first).
            assert {first.pid, second.pid} == spares
            assert {first.cwd, second.cwd} == {a, b}
        finally:
            await asyncio.gather(first.shutdown(), second.shutdown())


async def test_closing_cancels_starts_in_flight(
    config: Config, tmp_path: Path, launches: Launches
) -> None:
    # Close once the spares' processes exist but before they can be ready;
    # the conftest fixture fails the test if any kernel process survives.
    pool = KernelPool(
        config.kernel.env, size=2, runtime_dir=tmp_path / "rt", python=str(launches.python)
    )
    await pool.start()
    await launches.next()
    await launches.next()
    assert pool.ready == 0
    await pool.aclose()
    assert pool.ready == 0
    await pool.aclose()  # idempotent
    with pytest.raises(KernelError):
        await pool.acquire(tmp_path)
    assert [p for p in (tmp_path / "rt").iterdir() if p.suffix == ".json"] == []


async def test_a_spare_that_cannot_start_does_not_break_acquire(
    config: Config, tmp_path: Path
) -> None:
    pool = KernelPool(config.kernel.env, size=1, runtime_dir=tmp_path / "rt", python="/bin/false")
    async with pool:
        await pool.fill()
        assert pool.ready == 0
        with pytest.raises(KernelError):
            await pool.acquire(tmp_path)


async def test_a_missing_directory_does_not_cost_a_spare(config: Config, tmp_path: Path) -> None:
    async with KernelPool(config.kernel.env, size=1, runtime_dir=tmp_path / "rt") as pool:
        await pool.fill()
        with pytest.raises(KernelError, match="not a directory"):
            await pool.acquire(tmp_path / "missing")
        assert pool.ready == 1

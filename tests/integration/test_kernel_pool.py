"""The kernel pool: warm spares, handed out in the caller's directory, refilled."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
import pytest

from recursa.config import Config
from recursa.errors import KernelError
from recursa.kernel import KernelPool, OutputPart


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


async def test_closing_cancels_starts_in_flight(config: Config, tmp_path: Path) -> None:
    # Close once the spares' processes exist but before they can be ready;
    # the conftest fixture fails the test if any kernel process survives.
    pool = KernelPool(config.kernel.env, size=2, runtime_dir=tmp_path / "rt")
    me = psutil.Process()
    await pool.start()
    deadline = time.monotonic() + 10
    while len(me.children()) < 2:
        assert time.monotonic() < deadline, "the spares never launched"
        await asyncio.sleep(0.001)
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

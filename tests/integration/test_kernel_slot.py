"""A session's kernel slot leaves no kernel and no taken place behind when
getting its kernel fails or is cancelled half way (real kernels, real store)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest

from recursa.config import Limits
from recursa.errors import KernelError
from recursa.kernel import Kernel, KernelPool
from recursa.session.kernel_slot import KernelSlot, SlotDeps
from recursa.store import Store
from recursa.supervisor import Supervisor


class CountingSource:
    """The runtime's kernel source as the slot sees it, counting the places
    taken and given back."""

    def __init__(self, pool: KernelPool) -> None:
        self.pool = pool
        self.taken = 0
        self.pids: list[int] = []

    async def acquire(self, cwd: Path, backend: str = "local") -> Kernel:
        assert backend == "local"
        kernel = await self.pool.acquire(cwd)
        self.taken += 1
        assert kernel.pid is not None
        self.pids.append(kernel.pid)
        return kernel

    async def attach(self, connection_file: Path, pid: int, cwd: Path) -> Kernel:
        raise KernelError("not used here")

    def release(self) -> None:
        self.taken -= 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "recursa.db") as opened:
        yield opened


@pytest.fixture
async def source(tmp_path: Path) -> AsyncIterator[CountingSource]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    async with KernelPool(env, size=0, runtime_dir=tmp_path / "kernels") as pool:
        yield CountingSource(pool)


def slot_for(
    store: Store,
    source: CountingSource,
    tasks: Supervisor,
    tmp_path: Path,
    kernel_env: Any,
) -> KernelSlot:
    row = store.create_session(model="faux/x", cwd=str(tmp_path), workspace=str(tmp_path))
    deps = SlotDeps(
        store=store,
        kernels=source,
        tasks=tasks,
        record=lambda event: store.append(row.id, event),
        limits=Limits(),
        snapshot_max_bytes=1 << 20,
        kernel_env=kernel_env,
    )
    return KernelSlot(row.id, tmp_path, tmp_path, deps)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_kernel_whose_export_fails_is_stopped_and_its_place_given_back(
    store: Store, source: CountingSource, tmp_path: Path
) -> None:
    def broken_env() -> Mapping[str, str]:
        raise KernelError("the token could not be minted")

    async with Supervisor("test") as tasks:
        slot = slot_for(store, source, tasks, tmp_path, broken_env)
        with pytest.raises(KernelError, match="could not be minted"):
            await slot.kernel()
        [pid] = source.pids
        assert gone(pid)
        assert source.taken == 0
        assert store.kernels.all() == []


async def test_a_kernel_start_cancelled_after_the_kernel_came_leaves_nothing(
    store: Store, source: CountingSource, tmp_path: Path
) -> None:
    exporting = asyncio.Event()
    never = asyncio.Event()

    async def hang(kernel: Kernel, env: Mapping[str, str]) -> None:
        exporting.set()
        await never.wait()

    async with Supervisor("test") as tasks:
        slot = slot_for(store, source, tasks, tmp_path, lambda: {"A": "1"})
        original = Kernel.export_env
        Kernel.export_env = hang  # type: ignore[method-assign,assignment]
        try:
            slot.prestart()
            await exporting.wait()
            await slot.close()
        finally:
            Kernel.export_env = original  # type: ignore[method-assign]
        [pid] = source.pids
        assert gone(pid)
        assert source.taken == 0
        assert store.kernels.all() == []

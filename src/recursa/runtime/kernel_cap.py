"""A cap on live kernels, so a wide tree of sub-agents fits in memory.

Every kernel a session gets is counted against the cap. When ``max_kernels`` are alive,
the session that has been idle longest is unloaded (its namespace snapshotted,
its kernel stopped; its next input restores it) to make room; when no session
is idle, the request waits until a kernel is released. Sessions release their
slot when their kernel stops (unload, close, delete).

Memory is the other limit. Before a kernel starts, the memory available to
this process (the machine's, or its cgroup's when that is tighter) is read;
below :data:`MEMORY_RESERVE`, idle sessions are unloaded first, the longest
idle first, as at the cap. With nothing idle to unload, the kernel starts
anyway (the cap still holds): the reserve is a reason to unload early,
never a reason to wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from recursa.errors import KernelError
from recursa.kernel import Kernel, KernelPool, is_gateway_kernel

if TYPE_CHECKING:
    from recursa.runtime.tree import Pulse
    from recursa.session import Session

log = logging.getLogger("recursa.runtime")

MEMORY_RESERVE = 512 << 20
"""Bytes of memory that must be available when a kernel starts; below it an
idle session is unloaded first."""

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_memory() -> int | None:
    """Bytes this process may still use: the machine's available memory, or
    what its memory cgroup leaves below its limit when that is less; None
    when it cannot be read."""
    try:
        available: int | None = int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):
        available = None
    left = _cgroup_left()
    if left is not None:
        available = left if available is None else min(available, left)
    return available


def _cgroup_left() -> int | None:
    """What this process's memory cgroup leaves below its limit (v2
    ``memory.max``, v1 ``memory.limit_in_bytes``); None without a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            places = [_CGROUP_ROOT / relative, _CGROUP_ROOT]
            files = ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            places = [_CGROUP_ROOT / "memory" / relative, _CGROUP_ROOT / "memory"]
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for place in places:
            try:
                limit = (place / files[0]).read_text(encoding="utf-8").strip()
                used = int((place / files[1]).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 1 << 60:
                return None
            return max(0, int(limit) - used)
    return None


class KernelCap:
    """The sessions' source of kernels: the pool, behind a cap."""

    def __init__(
        self,
        pool: KernelPool,
        limit: int,
        sessions: Callable[[], Sequence[Session]],
        pulse: Pulse | None = None,
        *,
        available: Callable[[], int | None] = available_memory,
        reserve: int = MEMORY_RESERVE,
    ) -> None:
        self.pool = pool
        self.gateway: KernelPool | None = None
        """The pool of the ``gateway`` backend, when a gateway is configured."""
        self.limit = limit
        self.live = 0
        self.peak = 0
        self.pressure_unloads = 0
        """Sessions unloaded because memory was short (not for the cap)."""
        self._available = available
        self._reserve = reserve
        self._sessions = sessions
        self._pulse = pulse
        self._freed = asyncio.Event()

    async def acquire(self, cwd: Path, backend: str = "local") -> Kernel:
        """A kernel of ``backend`` once there is room: gateway kernels count
        against the cap too (it bounds the kernels one daemon drives)."""
        pool = self._pool(backend)
        await self._room()
        try:
            return await pool.acquire(cwd)
        except BaseException:
            self.release()
            raise

    async def attach(self, connection_file: Path, pid: int, cwd: Path) -> Kernel:
        # A kernel that survived a crash is alive already: count it, never refuse it.
        pool = self._pool("gateway" if is_gateway_kernel(connection_file) else "local")
        self._take()
        try:
            return await pool.attach(connection_file, pid, cwd)
        except BaseException:
            self.release()
            raise

    def _pool(self, backend: str) -> KernelPool:
        if backend == "local":
            return self.pool
        if backend == "gateway" and self.gateway is not None:
            return self.gateway
        if backend == "gateway":
            raise KernelError(
                "no kernel gateway is configured: add [kernel.gateway] url to config.toml "
                "and restart the daemon"
            )
        raise KernelError(f"unknown kernel backend {backend!r} (local or gateway)")

    def release(self) -> None:
        """A kernel stopped: its slot is free."""
        self.live = max(0, self.live - 1)
        event, self._freed = self._freed, asyncio.Event()
        event.set()

    def _take(self) -> None:
        self.live += 1
        self.peak = max(self.peak, self.live)

    async def _room(self) -> None:
        while True:
            full = self.live >= self.limit
            if not full and not self._short_of_memory():
                break
            signal = None if self._pulse is None else self._pulse.current()
            freed = self._freed
            victim = self._longest_idle()
            if victim is not None:
                if full:
                    log.info(
                        "kernel cap %d reached: unloading idle session %s", self.limit, victim.id
                    )
                else:
                    log.info("memory is short: unloading idle session %s", victim.id)
                try:
                    await victim.unload()
                    self.pressure_unloads += not full
                    continue
                except Exception:
                    log.exception("session %s: unloading to make room failed", victim.id)
            if not full:
                break  # short of memory, but nothing to unload: start it anyway
            await self._changed(freed, signal)
        self._take()

    def _short_of_memory(self) -> bool:
        """Less than the reserve is available, and a kernel of ours holds some."""
        if self.live == 0:
            return False
        available = self._available()
        return available is not None and available < self._reserve

    async def _changed(self, freed: asyncio.Event, signal: asyncio.Event | None) -> None:
        """Until a kernel is released or (with a pulse) any session's activity
        changes: a holder that goes idle can then be unloaded for us."""
        waits = [asyncio.ensure_future(freed.wait())]
        if signal is not None:
            waits.append(asyncio.ensure_future(signal.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            # Ended here, so no wait outlives the call (the leak check counts them).
            await asyncio.gather(*waits, return_exceptions=True)

    def _longest_idle(self) -> Session | None:
        """The idle session whose kernel is ready (not starting: that may be
        the very session asking for room) and idle the longest."""
        idle = [
            s for s in self._sessions() if s.kernel_ready and not s.running and s.status == "idle"
        ]
        return min(idle, key=lambda s: s.idle_since, default=None)


__all__ = ["KernelCap"]

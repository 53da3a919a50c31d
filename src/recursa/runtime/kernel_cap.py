"""A cap on live kernels, so a wide tree of sub-agents fits in memory.

Every kernel a session gets is counted against the cap. When ``max_kernels`` are alive,
the session that has been idle longest is unloaded (its namespace snapshotted,
its kernel stopped; its next input restores it) to make room; when no session
is idle, the request waits until a kernel is released. Sessions release their
slot when their kernel stops (unload, close, delete).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.kernel import Kernel, KernelPool

if TYPE_CHECKING:
    from recursa.runtime.tree import Pulse
    from recursa.session import Session

log = logging.getLogger("recursa.runtime")


class KernelCap:
    """The sessions' source of kernels: the pool, behind a cap."""

    def __init__(
        self,
        pool: KernelPool,
        limit: int,
        sessions: Callable[[], Sequence[Session]],
        pulse: Pulse | None = None,
    ) -> None:
        self.pool = pool
        self.limit = limit
        self.live = 0
        self.peak = 0
        self._sessions = sessions
        self._pulse = pulse
        self._freed = asyncio.Event()

    async def acquire(self, cwd: Path) -> Kernel:
        await self._room()
        try:
            return await self.pool.acquire(cwd)
        except BaseException:
            self.release()
            raise

    async def attach(self, connection_file: Path, pid: int, cwd: Path) -> Kernel:
        # A kernel that survived a crash is alive already: count it, never refuse it.
        self._take()
        try:
            return await self.pool.attach(connection_file, pid, cwd)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """A kernel stopped: its slot is free."""
        self.live = max(0, self.live - 1)
        event, self._freed = self._freed, asyncio.Event()
        event.set()

    def _take(self) -> None:
        self.live += 1
        self.peak = max(self.peak, self.live)

    async def _room(self) -> None:
        while self.live >= self.limit:
            signal = None if self._pulse is None else self._pulse.current()
            freed = self._freed
            victim = self._longest_idle()
            if victim is not None:
                log.info("kernel cap %d reached: unloading idle session %s", self.limit, victim.id)
                try:
                    await victim.unload()
                    continue
                except Exception:
                    log.exception("session %s: unloading to make room failed", victim.id)
            await self._changed(freed, signal)
        self._take()

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

"""The runtime as the daemon serves it: :class:`RuntimeHost` owns the
background loops and the stop, and hands the daemon one object per audience
(:mod:`recursa.daemon.host`): ``people`` (:class:`~recursa.runtime.people_api.PeopleApi`)
and ``kernels`` (:class:`~recursa.runtime.kernel_api.KernelApi`). This layer
does not import the daemon's; the rows they serve are the operation table's.

:func:`open_host` is what ``python -m recursa.daemon`` calls: it opens the
runtime, brings every session back (reattaching live kernels, resuming turns
cut short, delivering queued messages) and starts the idle-unloading loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from recursa.config import Config
from recursa.runtime.kernel_api import KernelApi
from recursa.runtime.people_api import Life, PeopleApi
from recursa.runtime.runtime import Runtime

log = logging.getLogger("recursa.runtime")

IDLE_CHECK_SECONDS = 30.0
"""How often idle sessions are looked for (unloading is not urgent)."""


class RuntimeHost:
    """The runtime's loops and stop, with its two audiences' APIs."""

    def __init__(self, runtime: Runtime, *, wall: Callable[[], float] = time.time) -> None:
        self.runtime = runtime
        self.life = Life(started_at=wall())
        self.people = PeopleApi(runtime, self.life, self._stop)
        self.kernels = KernelApi(runtime)
        self._loops = runtime.tasks.group("host loops")

    async def start(self, *, idle_check: float = IDLE_CHECK_SECONDS) -> None:
        """Recover every session, then keep unloading idle ones and delivering
        scheduled prompts (missed ticks coalesce into one, at once)."""
        began = time.monotonic()
        await self.runtime.recover()
        self.life.recovery_seconds = time.monotonic() - began
        self.life.recovering = False
        self._loops.start(self._unload_loop(idle_check), name="idle unloading")
        self._loops.start(self.runtime.scheduler.run(), name="scheduled prompts")

    async def _unload_loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.runtime.unload_idle()
            except Exception:
                log.exception("unloading idle sessions failed")

    # ------------------------------------------------------------------- stop

    async def _stop(self, force: bool) -> None:
        await self.shutdown(force=force)

    async def shutdown(self, *, force: bool) -> None:
        """Stop the idle and schedule loops and every session: gracefully, running
        turns are interrupted and each kernel's namespace is snapshotted before it
        stops; with ``force``, kernels stop without snapshots (the last checkpoints
        stay). Active goals stay active: the next start continues them."""
        # A loop that died was logged when it did; closing never raises for it.
        await self._loops.aclose()
        await self.runtime.aclose(snapshot=not force)


async def open_host(
    config: Config, *, api_socket: Path | None = None
) -> tuple[RuntimeHost, Callable[[], Awaitable[None]]]:
    """The daemon's host: the runtime opened, every session recovered, idle
    unloading running. ``api_socket`` is where kernels reach the kernel API
    (the daemon's kernel socket, apart from the people's). Returns the host and the function that closes it."""
    # A spare kernel of this host only where sessions run their kernels here
    # by default: with the gateway backend, the host starts no kernel process
    # until a session asks for a local one.
    runtime = await Runtime.open(config, warm_kernels=1 if config.kernel.backend == "local" else 0)
    runtime.api_socket = api_socket
    host = RuntimeHost(runtime)
    try:
        await host.start()
    except BaseException:
        await runtime.aclose()
        raise

    async def close() -> None:
        await host.shutdown(force=False)

    return host, close


__all__ = ["IDLE_CHECK_SECONDS", "RuntimeHost", "open_host"]

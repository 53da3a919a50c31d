"""The kernel cap's choices, with stand-in sessions and pool (the real ones are
exercised by the sub-agent tests and benchmarks/fanout.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from recursa.runtime.kernel_cap import KernelCap
from recursa.runtime.tree import Pulse


@dataclass
class StandIn:
    id: str
    cap: KernelCap | None = None
    kernel_ready: bool = True
    running: bool = False
    status: str = "idle"
    idle_since: float = 0.0
    unloads: list[str] = field(default_factory=list)

    async def unload(self) -> None:
        self.unloads.append(self.id)
        self.kernel_ready = False
        self.status = "inactive"
        assert self.cap is not None
        self.cap.release()


class Pool:
    async def acquire(self, cwd: Path) -> str:
        return f"kernel in {cwd}"


def cap_over(sessions: list[StandIn], limit: int, pulse: Pulse) -> KernelCap:
    cap = KernelCap(cast(Any, Pool()), limit, lambda: cast(Any, sessions), pulse)
    for session in sessions:
        session.cap = cap
        if session.kernel_ready:
            cap.live += 1
    return cap


async def test_a_waiter_takes_the_kernel_of_a_holder_that_goes_idle() -> None:
    # Every holder is busy when the request comes; one then goes idle without
    # releasing anything. The request must not wait for a release that never comes.
    busy = StandIn("busy", running=True, status="running")
    pulse = Pulse()
    cap = cap_over([busy], limit=1, pulse=pulse)
    request = asyncio.ensure_future(cap.acquire(Path("/w")))
    await asyncio.sleep(0)  # let it find no room (a scheduling step, not a timing guess)
    assert not request.done()
    busy.running, busy.status = False, "idle"
    pulse.notify()
    assert await asyncio.wait_for(request, 5) == "kernel in /w"
    assert busy.unloads == ["busy"] and cap.live == 1


async def test_a_session_whose_kernel_is_starting_is_never_the_victim() -> None:
    # A session still getting its kernel looks idle and loaded; unloading it
    # from inside its own start would await itself.
    starting = StandIn("starting", kernel_ready=False, idle_since=0.0)
    older = StandIn("older", idle_since=1.0)
    newer = StandIn("newer", idle_since=2.0)
    cap = cap_over([starting, older, newer], limit=2, pulse=Pulse())
    assert await asyncio.wait_for(cap.acquire(Path("/w")), 5) == "kernel in /w"
    assert (starting.unloads, older.unloads, newer.unloads) == ([], ["older"], [])

"""The kernel cap's choices, with stand-in sessions and pool (the real ones are
exercised by the sub-agent tests and benchmarks/fanout.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from recursa.runtime.kernel_cap import KernelCap, available_memory
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


def cap_with_memory(sessions: list[StandIn], limit: int, available: list[int | None]) -> KernelCap:
    """A cap that reads the available memory from ``available`` (its last item)."""
    cap = KernelCap(
        cast(Any, Pool()),
        limit,
        lambda: cast(Any, sessions),
        Pulse(),
        available=lambda: available[-1],
        reserve=100,
    )
    for session in sessions:
        session.cap = cap
        if session.kernel_ready:
            cap.live += 1
    return cap


async def test_short_of_memory_the_longest_idle_session_is_unloaded_below_the_cap() -> None:
    older = StandIn("older", idle_since=1.0)
    newer = StandIn("newer", idle_since=2.0)
    busy = StandIn("busy", running=True, status="running")
    available: list[int | None] = [50]
    cap = cap_with_memory([newer, busy, older], limit=10, available=available)
    assert await asyncio.wait_for(cap.acquire(Path("/w")), 5) == "kernel in /w"
    # Still short after the first unload: the next idle one goes too; the busy one stays.
    assert (older.unloads, newer.unloads, busy.unloads) == (["older"], ["newer"], [])
    assert cap.pressure_unloads == 2
    assert cap.live == 2


async def test_enough_memory_unloads_nothing_below_the_cap() -> None:
    idle = StandIn("idle")
    available: list[int | None] = [500]
    cap = cap_with_memory([idle], limit=10, available=available)
    assert await asyncio.wait_for(cap.acquire(Path("/w")), 5) == "kernel in /w"
    assert idle.unloads == [] and cap.pressure_unloads == 0 and cap.live == 2


async def test_short_of_memory_with_nothing_idle_the_kernel_starts_anyway() -> None:
    busy = StandIn("busy", running=True, status="running")
    available: list[int | None] = [0]
    cap = cap_with_memory([busy], limit=10, available=available)
    assert await asyncio.wait_for(cap.acquire(Path("/w")), 5) == "kernel in /w"
    assert busy.unloads == [] and cap.live == 2


async def test_memory_that_cannot_be_read_unloads_nothing() -> None:
    idle = StandIn("idle")
    available: list[int | None] = [None]
    cap = cap_with_memory([idle], limit=10, available=available)
    assert await asyncio.wait_for(cap.acquire(Path("/w")), 5) == "kernel in /w"
    assert idle.unloads == []


def test_available_memory_is_a_positive_number_here() -> None:
    found = available_memory()
    assert found is not None and found > 0

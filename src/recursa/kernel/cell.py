"""One cell, from the request to its outcome: output collected, limits kept,
the process replaced when it dies or ignores an interrupt.

:func:`run_cell` is the loop under :meth:`recursa.kernel.Kernel.execute`,
which holds the kernel's lock around it and owns what outlives one cell (the
notes not yet told, the cancelled caller).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from recursa.kernel.collect import OutputCollector
from recursa.kernel.lifecycle import KernelProcess
from recursa.kernel.notes import (
    RESTARTED_ON_REQUEST,
    Replaced,
    Stopping,
    died,
    join,
    settled,
    stuck,
)
from recursa.kernel.remote import GatewayProcess
from recursa.kernel.types import CellOutput, ExecStatus
from recursa.kernel.wire import JSONDict

IDLE_AFTER_REPLY = 5.0
"""After the reply, how long to wait for ``status: idle`` (the end of output)
beyond the cell's own limit."""

StopReason = Literal["interrupt", "restart", "shutdown"]
"""What another task asked of a running cell."""


@dataclass(slots=True)
class Run:
    """One cell in flight, shared by the task that runs it and its caller."""

    collector: OutputCollector
    replaced: Replaced | None = None
    exit: str = ""
    """How the process ended, when it died."""
    _abandoned: bool = False

    def abandon(self) -> None:
        """The caller was cancelled: nobody reads the outcome or the output."""
        self._abandoned = True
        self.collector.on_output = None

    def abandoned(self) -> bool:
        # A method, not an attribute: it changes while the task awaits.
        return self._abandoned


async def run_cell(
    proc: KernelProcess | GatewayProcess,
    code: str,
    limit: float,
    run: Run,
    *,
    grace: float,
    requested: Callable[[], StopReason | None],
    restart: Callable[[], Awaitable[None]],
) -> CellOutput:
    """Run ``code`` in ``proc`` and return its outcome.

    Past ``limit`` seconds the cell is interrupted; if it is still running
    ``grace`` seconds after an interrupt, or the process dies, ``restart``
    replaces the process. ``requested`` is read at every wakeup: what another
    task asked of the cell (which wakes the channels to say so).
    """
    channels = proc.channels
    assert channels is not None
    loop = asyncio.get_running_loop()
    collector = run.collector
    started = loop.time()
    deadline = started + limit
    reply: JSONDict | None = None
    idle = False
    stopping: Stopping | None = None
    give_up_at = float("inf")  # when an interrupted cell is declared stuck

    def finish(status: ExecStatus, note: str = "") -> CellOutput:
        count = reply.get("execution_count") if reply is not None else None
        return CellOutput(
            status=status,
            parts=collector.parts(),
            execution_count=count if isinstance(count, int) else None,
            duration=loop.time() - started,
            note=join(note, collector.note()),
            restarted=run.replaced is not None,
        )

    # Output of earlier requests (late iopub, stale replies) is not this
    # cell's: the channels keep only what answers this request.
    with channels.request():
        msg_id = channels.execute(code, silent=False)
        sent = (msg_id,)
        try:
            while True:
                while (msg := channels.next_iopub()) is not None:
                    if msg.parent_id != msg_id:
                        continue
                    if msg.msg_type == "status":
                        idle = idle or msg.content.get("execution_state") == "idle"
                    else:
                        collector.add(msg)
                if reply is None:
                    answer = channels.reply(sent, "execute_reply")
                    if answer is not None:
                        reply = answer.content
                        deadline = max(deadline, loop.time() + IDLE_AFTER_REPLY)
                now = loop.time()
                if reply is not None and (idle or now >= deadline):
                    return finish(*settled(reply, stopping, limit))
                if not proc.is_alive():
                    how = proc.exit_description()
                    run.replaced, run.exit = "died", how
                    await restart()
                    return finish(*died(stopping, limit, how))
                if requested() == "shutdown":
                    return finish("interrupted", "the kernel was shut down while the cell ran")
                if requested() == "restart":
                    run.replaced = "requested"
                    await restart()
                    return finish("interrupted", RESTARTED_ON_REQUEST)
                if reply is None:
                    if stopping is None and (requested() == "interrupt" or now >= deadline):
                        stopping = "interrupt" if requested() == "interrupt" else "timeout"
                        await proc.interrupt()
                        give_up_at = now + grace
                    elif stopping is not None and now >= give_up_at:
                        run.replaced = "stuck"
                        await restart()
                        return finish(*stuck(stopping, limit))
                # Until the reply, an interrupted cell is watched against its
                # grace; after it, only the wait for idle is bounded.
                wake_at = give_up_at if stopping is not None and reply is None else deadline
                await channels.wait(min(wake_at, proc.next_check(now)))
        except asyncio.CancelledError:
            # Only the event loop's own teardown cancels this task (a
            # caller's cancellation is shielded): do not leave it running.
            if stopping is None:
                with contextlib.suppress(Exception):
                    await proc.interrupt()
            raise


__all__ = ["IDLE_AFTER_REPLY", "Run", "StopReason", "run_cell"]

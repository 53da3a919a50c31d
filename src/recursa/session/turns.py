"""Running a session's turns: the turn loop fed with the session's hooks, its
events recorded in order, and its end made durable with what it causes.

:class:`Turns` is the session's turn-side part (composed by
:class:`~recursa.session.session.Session`, which keeps lifecycle, inbox and
persistence): it numbers turns and cells, delivers steering messages between
model calls, and ends every turn it starts with exactly one ``turn_ended``,
whatever happens (an interrupt, a kernel failure, a bug).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from recursa.errors import KernelError
from recursa.protocol.events import TurnEnded
from recursa.session.kernel_slot import KernelSlot
from recursa.session.loop import TurnHooks, run_turn
from recursa.session.model_context import ModelContext

if TYPE_CHECKING:
    from recursa.session.session import Session

log = logging.getLogger("recursa.session")


class Turns:
    """The turns of one session; see the module docstring."""

    def __init__(self, session: Session, model: ModelContext, slot: KernelSlot) -> None:
        self.session = session
        self.model = model
        self.slot = slot
        self.count = 0
        """The number of the last turn started."""
        self.cells = 0
        """The number of the last cell."""
        self.steer_waiting = False
        """A steering message arrived since the last delivery."""

    async def run(self, cut_turn: int | None, *, resume: bool) -> None:
        """Run a turn: a new one, or (``resume``) the cut-short turn ``cut_turn``
        (None: a new turn over inputs already delivered)."""
        session = self.session
        if cut_turn is None:
            self.count += 1
        turn = self.count if cut_turn is None else cut_turn
        self.model.begin_turn()
        hooks = TurnHooks(
            model=self.model.call,
            execute=self.slot.execute,
            deliver_steers=self.deliver_steers,
            next_cell=self.next_cell,
            clock=session.deps.clock,
            limits=session.deps.limits,
        )
        ended: TurnEnded | None = None
        try:
            resumed = resume and cut_turn is not None
            async for event in run_turn(turn, hooks, fenced=session.fenced, resume=resumed):
                if isinstance(event, TurnEnded):
                    ended = event
                    self.end(event)
                else:
                    session.record(event)
        except asyncio.CancelledError:
            ended = TurnEnded(turn=turn, reason="interrupted", detail="interrupted by the user")
            session.record(ended)
            task = asyncio.current_task()
            if not session.interrupting or task is None:
                session.last_end = ended
                raise
            task.uncancel()  # the cancellation was ours and is handled here
            self.ended(ended)
            return
        except KernelError as exc:
            if ended is None:
                self.end(TurnEnded(turn=turn, reason="internal_error", detail=str(exc)))
            return
        except Exception as exc:  # a bug: end the turn with a reason, keep the session
            log.exception("session %s: turn %d failed", session.id, turn)
            if ended is None:
                detail = f"{type(exc).__name__}: {exc}"
                self.end(TurnEnded(turn=turn, reason="internal_error", detail=detail))
            return
        if ended is None:  # the loop's contract says this cannot happen; say so if it does
            detail = "the turn ended without a reason"
            self.end(TurnEnded(turn=turn, reason="internal_error", detail=detail))

    def end(self, ended: TurnEnded) -> None:
        """Record the turn's end and run the turn-end hook in one transaction:
        what the hook stores (a sub-agent's answer queued for its parent, the
        harness edits applied) is durable exactly when the end is, so a crash
        can never keep the one and lose the other."""
        with self.session.deps.store.transaction():
            self.session.record(ended)
            self.ended(ended)

    def ended(self, ended: TurnEnded) -> None:
        """The turn's end is recorded: remember it and tell the host."""
        session = self.session
        session.last_end = ended
        if ended.answer is not None:
            session.last_answer = ended.answer
        try:
            session.deps.host.turn_ended(session, ended)
        except Exception:  # telling others must not break this session
            log.exception("session %s: the turn-end hook failed", session.id)

    def deliver_steers(self) -> int:
        """Deliver the steering messages waiting (the loop's ``deliver_steers``)."""
        if not self.steer_waiting:
            return 0
        self.steer_waiting = False
        session = self.session
        inbox = session.deps.store.inbox
        # A long input waits for the next turn, where it is put in the kernel first.
        steers = [
            m
            for m in inbox.pending(session.id)
            if m.mode in ("steer", "auto") and not session.inputs.places(m)
        ]
        records = inbox.deliver(steers, steer=True)
        for record in records:
            session.published(record)
        return len(records)

    def next_cell(self) -> int:
        self.cells += 1
        return self.cells


__all__ = ["Turns"]

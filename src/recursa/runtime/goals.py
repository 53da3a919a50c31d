"""Goals in the runtime: the turn-end control that continues a session toward
its goal, and what people and kernels do to goals.

:class:`Goals` is one of ``Runtime.controls``. After every turn (and its
checkpoint) it reads the session's current goal from the store, asks
:func:`recursa.control.goals.after_turn`, and applies the decision:

- continue: queue the continuation prompt (source ``goal``, ``follow_up``)
  and count it, in one transaction;
- stop: the goal becomes ``exhausted`` or ``paused`` and a ``notice`` in the
  session's log says why, in one transaction.

The state lives in the store only (``store.goals``), so a goal set, paused
or completed from a kernel, the CLI or another process takes effect at the
next turn end, and survives a restart: :meth:`Goals.resume_all` (called by
``Runtime.recover``) continues every active goal whose session came back
with nothing to do, e.g. one the daemon stopped mid-turn or between a turn's
end and its continuation.

A person's interrupt or stop pauses the session's goal (``RuntimeHost``
calls :meth:`Goals.interrupted`): the goal is then not silently taken up
again by the next restart. A graceful daemon stop does not pause it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from recursa.control import goals as decide
from recursa.errors import UsageError
from recursa.protocol.control import GoalInfo, GoalStatus
from recursa.protocol.events import Notice, NoticeLevel, TurnEnded
from recursa.store.goals import GoalRow

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime
    from recursa.session import Session

log = logging.getLogger("recursa.runtime")


class Goals:
    """Every session's goal: a :class:`~recursa.runtime.runtime.TurnControl` and
    the operations behind ``recursa goal`` and the kernel's ``goal``."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.store = runtime.store

    # ---------------------------------------------------------------- reading

    def info(self, session_id: str) -> GoalInfo | None:
        """The session's current goal (None: it has none)."""
        goal = self.store.goals.current(session_id)
        return None if goal is None else self.describe(goal)

    def describe(self, goal: GoalRow) -> GoalInfo:
        view = self._view(goal)
        return GoalInfo(
            id=goal.id,
            session_id=goal.session_id,
            objective=goal.objective,
            status=goal.status,
            budget=goal.budget,
            used=view.used,
            remaining=decide.remaining(view),
            continued=goal.continued,
            detail=goal.detail,
            created_at=goal.created_at,
            updated_at=goal.updated_at,
            ended_at=goal.ended_at,
        )

    def _view(self, goal: GoalRow) -> decide.GoalView:
        return decide.GoalView(
            goal.objective, goal.status, goal.budget, self.store.goals.used(goal)
        )

    # --------------------------------------------------------------- changing

    def set(self, session_id: str, objective: str, budget: int | None = None) -> GoalInfo:
        """Give the session a goal (replacing any) and queue its first prompt;
        usage toward it counts from now. UsageError for a bad objective or
        budget, or a deleted session."""
        try:
            text = decide.check_objective(objective)
            tokens = decide.check_budget(budget)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        session = self._live(session_id)
        with self.store.transaction():
            goal = self.store.goals.create(session.id, text, tokens)
            budget_text = "no token budget" if tokens is None else f"a budget of {tokens:,} tokens"
            self._notice(session, f"goal set ({budget_text}): {text}")
            self._prompt(session, goal, decide.first_prompt(self._view(goal)))
        return self.describe(self.store.goals.get(goal.id))

    def pause(self, session_id: str) -> GoalInfo:
        """Stop continuing the goal (it stays, and ``resume`` takes it up again)."""
        goal = self._current(session_id)
        if goal.status != "active":
            raise UsageError(f"the goal of {session_id} is {goal.status}, not active")
        return self._stop(self.runtime.get(session_id), goal, "paused", "goal paused by a person")

    def resume(self, session_id: str) -> GoalInfo:
        """Continue a paused goal (at once when the session has nothing else to do)."""
        goal = self._current(session_id)
        if goal.status != "paused":
            detail = (
                " (set a new goal to go on)" if goal.status in ("completed", "exhausted") else ""
            )
            raise UsageError(f"the goal of {session_id} is {goal.status}, not paused{detail}")
        session = self._live(session_id)
        with self.store.transaction():
            goal = self.store.goals.change(goal.id, "active")
            view = self._view(goal)
            self._notice(session, f"goal resumed: {decide.budget_line(view)}")
            if not self.store.inbox.pending_count(session.id):
                self._prompt(session, goal, decide.continuation(view))
        session.wake()  # input left queued by an interrupt runs now, then the goal goes on
        return self.describe(self.store.goals.get(goal.id))

    def clear(self, session_id: str) -> GoalInfo:
        """Remove the session's goal (its row stays, ``cleared``)."""
        goal = self._current(session_id)
        return self._stop(self.runtime.get(session_id), goal, "cleared", "goal cleared by a person")

    def complete(self, session_id: str, summary: str = "") -> GoalInfo:
        """The agent's ``goal.complete()``: effective at once, so the turn that
        called it is not continued. Completing a completed goal changes nothing."""
        goal = self.store.goals.current(session_id)
        if goal is None:
            raise UsageError("this session has no goal to complete")
        if goal.status == "completed":
            return self.describe(goal)
        if goal.status == "exhausted":
            raise UsageError("the goal's budget was spent; it is no longer open")
        line = " ".join(summary.split())
        detail = f"goal completed: {goal.objective}" + (f" ({line})" if line else "")
        return self._stop(self.runtime.get(session_id), goal, "completed", detail)

    def interrupted(self, session_id: str) -> None:
        """A person interrupted or stopped the session: pause its active goal."""
        goal = self.store.goals.current(session_id)
        if goal is not None and goal.status == "active":
            session = self.runtime.get(session_id)
            self._stop(session, goal, "paused", "goal paused: the session was interrupted")

    # ------------------------------------------------------------ turn ends

    async def after_turn(self, session: Session, ended: TurnEnded) -> None:
        """The control: continue the goal, stop continuing it, or do nothing."""
        goal = self.store.goals.current(session.id)
        if goal is None or goal.status != "active":
            return
        waiting = self.store.inbox.pending_count(session.id) > 0
        decision = decide.after_turn(self._view(goal), ended.reason, waiting=waiting)
        match decision:
            case decide.GoalContinue(prompt=prompt):
                with self.store.transaction():
                    self._prompt(session, goal, prompt)
            case decide.GoalStop(status=status, notice=notice):
                self._stop(session, goal, status, notice)
            case None:
                pass

    def resume_all(self, *, skip: Collection[str] = ()) -> list[str]:
        """After a restart: continue every active goal whose session is doing
        nothing and has nothing queued (``skip``: sessions whose turn-end checks
        run again anyway, which continue their goals in turn). Returns those
        sessions' ids."""
        resumed: list[str] = []
        for goal in self.store.goals.active():
            if goal.session_id in skip:
                continue
            try:
                session = self.runtime.get(goal.session_id)
                if session.running or self.store.inbox.pending_count(session.id):
                    continue  # its turn's end continues the goal
                if self.store.session(session.id).status == "deleted":
                    continue
                with self.store.transaction():
                    self._notice(session, "goal resumed after a restart")
                    self._prompt(session, goal, decide.continuation(self._view(goal)))
                resumed.append(session.id)
            except Exception:
                log.exception("session %s: resuming its goal failed", goal.session_id)
        return resumed

    # -------------------------------------------------------------- helpers

    def _current(self, session_id: str) -> GoalRow:
        goal = self.store.goals.current(session_id)
        if goal is None:
            raise UsageError(f"session {session_id} has no goal: recursa goal set")
        return goal

    def _live(self, session_id: str) -> Session:
        if self.store.session(session_id).status == "deleted":
            raise UsageError(f"session {session_id} was deleted")
        return self.runtime.get(session_id)

    def _prompt(self, session: Session, goal: GoalRow, text: str) -> None:
        """Queue ``text`` for the goal (inside the caller's transaction)."""
        session.send(text, mode="follow_up", source="goal")
        self.store.goals.continued(goal.id)

    def _stop(self, session: Session, goal: GoalRow, status: GoalStatus, detail: str) -> GoalInfo:
        level: NoticeLevel = "warning" if status in ("paused", "exhausted") else "info"
        with self.store.transaction():
            changed = self.store.goals.change(goal.id, status, detail)
            self._notice(session, detail, level)
        return self.describe(changed)

    @staticmethod
    def _notice(session: Session, text: str, level: NoticeLevel = "info") -> None:
        session.record(Notice(text=text, level=level))


__all__ = ["Goals"]

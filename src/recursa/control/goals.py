"""Goals as pure decisions: after a turn, continue the session toward its
goal, stop continuing it, or leave it be.

A goal is an objective a session keeps working toward across turns (and
daemon restarts) until the agent calls ``goal.complete()``, a person pauses
it, or its token budget is spent. Its usage is every model call's tokens
(input plus output) in the session's whole subtree from when it was set
until it ends (a pause does not stop the count): delegating part of the
work to sub-agents is not free for the goal either.

:func:`after_turn` is asked at every turn's end of a session whose goal is
active, in this order:

1. the budget is spent → :class:`GoalStop` (``exhausted``);
2. the turn failed in a way another turn would repeat (the provider failed
   for good, a bug, the session's own budget, a stuck or empty model) →
   :class:`GoalStop` (``paused``: a person looks, then resumes it);
3. the turn was interrupted, or other input already waits (it starts the
   next turn anyway; the goal is continued after that one) → None;
4. otherwise → :class:`GoalContinue` with the prompt that names the objective
   and the budget left.

A budget is checked between turns, so one turn may overrun it by what that
turn uses. Nothing here touches the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from recursa.errors import one_line
from recursa.protocol.control import GoalStatus
from recursa.protocol.events import TurnEndReason
from recursa.validation import checked_text

GOAL_STATUSES: tuple[GoalStatus, ...] = ("active", "paused", "completed", "exhausted", "cleared")

MAX_OBJECTIVE_CHARS = 4_000
"""An objective is a sentence or a paragraph; it is repeated in every continuation."""
MAX_BUDGET_TOKENS = 10**12

CONTINUED_AFTER: frozenset[TurnEndReason] = frozenset(
    {"answered", "max_steps", "max_tokens", "max_time"}
)
"""Turn ends after which the goal goes on (a per-turn limit is just a long goal)."""
PAUSED_AFTER: frozenset[TurnEndReason] = frozenset(
    {"provider_error", "internal_error", "budget", "stuck", "empty_reply"}
)
"""Turn ends another turn would most likely repeat: the goal pauses for a person."""


@dataclass(frozen=True, slots=True)
class GoalView:
    """What a decision needs: the objective, status, budget (tokens; None: no
    budget) and the tokens used toward it so far."""

    objective: str
    status: GoalStatus
    budget: int | None
    used: int


@dataclass(frozen=True, slots=True)
class GoalContinue:
    """Queue ``prompt`` to the session (source ``goal``, mode ``follow_up``)."""

    prompt: str


@dataclass(frozen=True, slots=True)
class GoalStop:
    """Stop continuing: the goal becomes ``status``; ``notice`` says why, for the log."""

    status: Literal["paused", "exhausted"]
    notice: str


Decision = GoalContinue | GoalStop | None


def after_turn(goal: GoalView, reason: TurnEndReason, *, waiting: bool) -> Decision:
    """The decision at a turn's end (see the module docstring). ``waiting``:
    input is already queued for the session."""
    if goal.status != "active":
        return None
    if goal.budget is not None and goal.used >= goal.budget:
        return GoalStop(
            "exhausted",
            f"goal budget spent ({goal.used:,} of {goal.budget:,} tokens): "
            f"the goal is no longer continued: {one_line(goal.objective, limit=120)}",
        )
    if reason in PAUSED_AFTER:
        return GoalStop(
            "paused",
            f"goal paused: the turn ended with {reason}, which another turn would likely "
            "repeat; resume it when that is fixed (recursa goal resume)",
        )
    if reason not in CONTINUED_AFTER or waiting:
        return None
    return GoalContinue(continuation(goal))


def continuation(goal: GoalView) -> str:
    """The message that continues a session toward its goal."""
    return (
        f"Continue working toward your goal: {goal.objective}\n"
        f"{budget_line(goal)} When the goal is fully achieved, run "
        "`await goal.complete()` in a cell, then give your final answer; until then you "
        "are asked to continue after every turn."
    )


def first_prompt(goal: GoalView) -> str:
    """The message that gives a session its goal (queued when it is set)."""
    return (
        f"You have a goal: {goal.objective}\n"
        f"{budget_line(goal)} Work toward it over as many turns as it takes: after each "
        "turn you are asked to continue. When it is fully achieved, run "
        "`await goal.complete()` in a cell, then give your final answer."
    )


def budget_line(goal: GoalView) -> str:
    left = remaining(goal)
    if left is None or goal.budget is None:
        return f"No token budget is set ({goal.used:,} tokens used so far)."
    return f"Token budget: {left:,} of {goal.budget:,} left."


def remaining(goal: GoalView) -> int | None:
    """Tokens left in the budget (never below 0); None without a budget."""
    return None if goal.budget is None else max(0, goal.budget - goal.used)


def check_objective(objective: object) -> str:
    """``objective``, checked: non-empty text within :data:`MAX_OBJECTIVE_CHARS`."""
    return checked_text(objective, "objective", MAX_OBJECTIVE_CHARS, strip=True)


def check_budget(budget: object) -> int | None:
    """A token budget: None, or a whole number above 0."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise ValueError("the budget must be a whole number of tokens")
    if isinstance(budget, float) and not budget.is_integer():
        raise ValueError("the budget must be a whole number of tokens")
    if not 0 < budget <= MAX_BUDGET_TOKENS:
        raise ValueError(f"the budget must be from 1 to {MAX_BUDGET_TOKENS:,} tokens")
    return int(budget)


__all__ = [
    "CONTINUED_AFTER",
    "GOAL_STATUSES",
    "MAX_BUDGET_TOKENS",
    "MAX_OBJECTIVE_CHARS",
    "PAUSED_AFTER",
    "Decision",
    "GoalContinue",
    "GoalStatus",
    "GoalStop",
    "GoalView",
    "after_turn",
    "budget_line",
    "check_budget",
    "check_objective",
    "continuation",
    "first_prompt",
    "remaining",
]

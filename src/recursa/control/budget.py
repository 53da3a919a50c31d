"""Subtree budgets as pure decisions.

A budget given to a session covers its whole subtree: every model call made
by it or any descendant counts. Before a call, the call's worst case is
*reserved* against every budgeted ancestor (and the session itself): its
estimated input and the output it may produce. The call is admitted only if
every reservation fits, and its output is capped to what is left; after the
call, the reservation is replaced by what it really used. So concurrent calls
in one subtree can never together spend more than the budget, and a budget is
exceeded only by as much as a call's real input exceeds its estimate (the
estimate is deliberately high: three characters a token).

Nothing here touches the store or a clock: :class:`Budgets` is fed the
usage and times by the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count

from recursa.control.limits import TurnStop
from recursa.models.types import Usage

MIN_OUTPUT_TOKENS = 64
"""A call that could write fewer tokens than this is not worth making."""

CHARS_PER_TOKEN_ESTIMATE = 3
"""Input is estimated high, so a budget is hardly ever overrun."""


@dataclass(frozen=True, slots=True)
class Limit:
    """One budgeted session: its limits (None: no limit on that measure) and
    when its budget started (for ``time``)."""

    session_id: str
    tokens: int | None = None
    cost: float | None = None
    steps: int | None = None
    time: float | None = None
    started: float = 0.0


@dataclass(slots=True)
class Spent:
    """What a budgeted subtree has used: settled calls, and reservations in flight."""

    tokens: int = 0
    cost: float = 0.0
    steps: int = 0
    held_tokens: int = 0
    held_cost: float = 0.0
    held_steps: int = 0


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted call: settle it when the call ends. ``max_output_tokens`` is
    the cap its output must respect (None: no budget caps it)."""

    id: int
    max_output_tokens: int | None
    tokens: int = 0
    cost: float = 0.0
    chain: tuple[str, ...] = ()


Admission = Ticket | TurnStop

CostOf = Callable[[Usage], float | None]


@dataclass
class Budgets:
    """Reservations and spending per budgeted session (the runtime owns one)."""

    spent: dict[str, Spent] = field(default_factory=dict)
    _ids: count[int] = field(default_factory=lambda: count(1))

    def admit(
        self,
        chain: Sequence[Limit],
        *,
        input_chars: int,
        wanted_output: int | None,
        now: float,
        cost_of: CostOf,
    ) -> Admission:
        """Admit a call under every limit of ``chain`` (the session and its budgeted
        ancestors), or say which budget is spent."""
        if not chain:
            return Ticket(0, None)
        input_tokens = input_chars // CHARS_PER_TOKEN_ESTIMATE + 1
        cap = wanted_output
        for limit in chain:
            spent = self.spent.setdefault(limit.session_id, Spent())
            if limit.time is not None and now - limit.started >= limit.time:
                return _stop(limit, f"its {limit.time:.0f} s of wall clock are spent")
            if limit.steps is not None and spent.steps + spent.held_steps + 1 > limit.steps:
                return _stop(limit, f"its {limit.steps} model calls are spent")
            if limit.tokens is not None:
                left = limit.tokens - spent.tokens - spent.held_tokens - input_tokens
                if left < MIN_OUTPUT_TOKENS:
                    used = spent.tokens + spent.held_tokens
                    return _stop(
                        limit, f"its {limit.tokens:,} tokens are spent ({used:,} used or reserved)"
                    )
                cap = left if cap is None else min(cap, left)
            if limit.cost is not None:
                left_cost = limit.cost - spent.cost - spent.held_cost
                input_cost = cost_of(Usage(input_tokens=input_tokens))
                per_output = cost_of(Usage(output_tokens=1000))
                if input_cost is None or per_output is None:
                    return _stop(
                        limit, "its cost budget cannot be kept: the model's price is unknown"
                    )
                affordable = (
                    int((left_cost - input_cost) / (per_output / 1000)) if per_output else None
                )
                if affordable is not None:
                    if affordable < MIN_OUTPUT_TOKENS:
                        return _stop(limit, f"its ${limit.cost:.4f} are spent")
                    cap = affordable if cap is None else min(cap, affordable)
        tokens = input_tokens + (cap or 0)
        cost = cost_of(Usage(input_tokens=input_tokens, output_tokens=cap or 0)) or 0.0
        ids = tuple(limit.session_id for limit in chain)
        for session_id in ids:
            spent = self.spent[session_id]
            spent.held_tokens += tokens
            spent.held_cost += cost
            spent.held_steps += 1
        return Ticket(next(self._ids), cap, tokens, cost, ids)

    def settle(self, ticket: Ticket, usage: Usage | None, cost: float | None) -> None:
        """Replace a ticket's reservation with what the call really used (None: it
        failed before using anything)."""
        for session_id in ticket.chain:
            spent = self.spent[session_id]
            spent.held_tokens -= ticket.tokens
            spent.held_cost -= ticket.cost
            spent.held_steps -= 1
            if usage is not None:
                spent.tokens += usage.total_tokens
                spent.cost += cost or 0.0
                spent.steps += 1


def _stop(limit: Limit, why: str) -> TurnStop:
    return TurnStop("budget", f"the budget of session {limit.session_id} is exhausted: {why}")


__all__ = [
    "CHARS_PER_TOKEN_ESTIMATE",
    "MIN_OUTPUT_TOKENS",
    "Admission",
    "Budgets",
    "Limit",
    "Spent",
    "Ticket",
]

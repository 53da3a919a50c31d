"""How a usage total reads: one line, the cost alone (a table's cell), a JSON object.

Apart from :mod:`recursa.cli.render` (which re-exports them): a listing
(``recursa agents``, ``recursa usage``) shows totals and no events, so it
need not build the event grammar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recursa.protocol.wire import Usage


def usage_line(totals: Usage) -> str:
    """One line of usage: calls, tokens, and a cost that never reads as free when unknown."""
    cached = f" ({totals.cached_tokens:,} cached)" if totals.cached_tokens else ""
    cost = cost_text(totals)
    if cost == "unknown":
        cost = "cost unknown"
    elif cost == "none":
        cost = "no cost"
    calls = f"{totals.calls} model call{'s' * (totals.calls != 1)}"
    return f"{calls} · {totals.input_tokens:,} in{cached} / {totals.output_tokens:,} out tokens · {cost}"


def cost_text(totals: Usage) -> str:
    """The cost alone, for a table's cell: ``unknown`` when no call was priced,
    the known part and how many calls were not, ``none`` when it is known to be zero."""
    if totals.calls and totals.unknown_cost_calls == totals.calls:
        return "unknown"
    if totals.unknown_cost_calls:
        return f"${totals.cost:.4f} + {totals.unknown_cost_calls} unpriced calls"
    if totals.cost == 0:
        return "none"
    return f"${totals.cost:.4f}"


def usage_dict(totals: Usage) -> dict[str, object]:
    return {
        "calls": totals.calls,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cached_tokens": totals.cached_tokens,
        "cost": round(totals.cost, 6) if not totals.unknown_cost_calls else None,
        "unknown_cost_calls": totals.unknown_cost_calls,
    }


__all__ = ["cost_text", "usage_dict", "usage_line"]

"""Per-turn limits as pure decisions: counters in, ``TurnStop`` or ``None`` out.

A turn is all the work one input causes: model calls, cells and the steering
messages in between. Its limits are model calls (steps), tokens (input plus
output over its calls) and wall-clock time. The session applies a decision;
nothing here has side effects or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from recursa.config import Limits
from recursa.protocol.events import TurnEndReason


@dataclass(frozen=True, slots=True)
class TurnStop:
    """End the turn. ``detail`` is one line for the user and the log."""

    reason: TurnEndReason
    detail: str


@dataclass(frozen=True, slots=True)
class TurnCounters:
    steps: int = 0
    tokens: int = 0
    elapsed: float = 0.0


def before_model_call(limits: Limits, counters: TurnCounters) -> TurnStop | None:
    """Whether another model call may start."""
    if limits.max_steps is not None and counters.steps >= limits.max_steps:
        return TurnStop(
            "max_steps", f"reached the limit of {limits.max_steps} model calls (--max-steps)"
        )
    if limits.max_tokens is not None and counters.tokens >= limits.max_tokens:
        return TurnStop(
            "max_tokens",
            f"used {counters.tokens:,} tokens, over the limit of {limits.max_tokens:,} (--max-tokens)",
        )
    if limits.max_time is not None and counters.elapsed >= limits.max_time:
        return TurnStop(
            "max_time",
            f"ran {counters.elapsed:.0f} s, over the limit of {limits.max_time:.0f} s (--max-time)",
        )
    return None


def time_left(limits: Limits, counters: TurnCounters) -> float | None:
    """Seconds left on the wall clock, or None without a time limit."""
    if limits.max_time is None:
        return None
    return max(0.0, limits.max_time - counters.elapsed)


def cell_timeout(limits: Limits, counters: TurnCounters) -> float:
    """A cell's timeout: the configured one, shortened to the time the turn has left."""
    left = time_left(limits, counters)
    return limits.cell_timeout if left is None else max(0.5, min(limits.cell_timeout, left))


__all__ = ["TurnCounters", "TurnStop", "before_model_call", "cell_timeout", "time_left"]

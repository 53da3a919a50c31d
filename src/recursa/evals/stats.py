"""The figures an evaluation report gives, from per-item scores.

- :func:`bootstrap` : the mean score with a percentile bootstrap interval
  (resampling items with replacement).
- :func:`paired_bootstrap` : the mean difference B − A over the same items,
  with an interval from resampling the items' pairs: the harness audit.
- :func:`solved_within` : items solved within an expenditure budget B (tokens,
  cost or seconds), for each B of a range: the score at fixed expenditure.
- :func:`plateau` : the first budget past which 10% more budget adds less than
  a set gain, read off a curve.
- :func:`plateau_of` : the same question asked of the trials themselves, so the
  answer does not depend on how finely the report samples budgets.

Resampling uses its own seeded ``random.Random``: the same inputs and seed
give the same interval.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)


def bootstrap(
    scores: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> Interval:
    """The mean of ``scores`` and its percentile bootstrap interval."""
    if not scores:
        raise ValueError("no scores to summarise")
    n = len(scores)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(scores, k=n)) / n for _ in range(resamples))
    low, high = _percentiles(means, level)
    return Interval(sum(scores) / n, low, high, n)


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> Interval:
    """The mean of ``b[i] - a[i]`` over paired items, with its bootstrap interval."""
    if len(a) != len(b):
        raise ValueError(f"paired scores differ in length: {len(a)} and {len(b)}")
    return bootstrap(
        [y - x for x, y in zip(a, b, strict=True)], resamples=resamples, level=level, seed=seed
    )


def _percentiles(ordered: Sequence[float], level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError("the level is a fraction between 0 and 1")
    tail = (1 - level) / 2
    last = len(ordered) - 1
    return ordered[round(tail * last)], ordered[round((1 - tail) * last)]


def solved_within(
    trials: Sequence[tuple[float, float]], budgets: Sequence[float]
) -> list[tuple[float, float]]:
    """For each budget B, the score summed over the trials that spent at most B
    (``trials``: pairs of score and expenditure); a trial over budget counts 0."""
    return [(b, sum(score for score, spent in trials if spent <= b)) for b in budgets]


def plateau(curve: Sequence[tuple[float, float]], *, gain: float) -> float | None:
    """The first budget B of ``curve`` (budget, score; budgets ascending) after
    which the score at 1.1·B (the last point at or below it) exceeds the score
    at B by less than ``gain``; None when the curve still climbs at its end."""
    for index, (budget, value) in enumerate(curve):
        further = [v for b, v in curve[index + 1 :] if b <= budget * 1.1]
        if not further and index + 1 < len(curve):
            continue  # no point within 10% more: undecided here
        if index + 1 == len(curve):
            return None
        if further[-1] - value < gain:
            return budget
    return None


def plateau_of(trials: Sequence[tuple[float, float]], *, gain: float) -> float | None:
    """The budget past which 10% more budget never adds ``gain`` or more to
    the mean score (``trials``: pairs of score and expenditure; the mean is
    over all of them). None when the curve still climbs at its end, that is,
    when the last climb ends at the largest expenditure observed.

    The mean score within budget B is a step function of B, so 10% more than
    B adds the score of the trials that spent in (B, 1.1·B]. That window
    holds the most just before a trial's expenditure ``s`` enters it from the
    right, when it is [s, 1.1·s). The plateau is the largest ``s`` whose window
    still adds ``gain`` (past it, no window does); with no such ``s`` the curve
    is flat from the smallest expenditure on. A flat start (nothing solved at
    small budgets) is not a plateau: only what follows the last climb is.
    """
    if not trials:
        return None
    n = len(trials)
    ordered = sorted(trials, key=lambda pair: pair[1])
    spent = [s for _, s in ordered]
    # prefix sums of the scores in expenditure order: a window's score in O(log n);
    # s * 11 / 10, not s * 1.1: 100 * 1.1 is 110.00000000000001, past a trial at 110
    prefix = [0.0]
    for score, _ in ordered:
        prefix.append(prefix[-1] + score)
    climbs = [
        s
        for s in sorted(set(spent))
        if s > 0
        and (prefix[bisect_left(spent, s * 11 / 10)] - prefix[bisect_left(spent, s)]) / n >= gain
    ]
    if not climbs:
        return spent[0]
    last = climbs[-1]
    return None if last == spent[-1] else last


__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_RESAMPLES",
    "Interval",
    "bootstrap",
    "paired_bootstrap",
    "plateau",
    "plateau_of",
    "solved_within",
]

"""The figures of an evaluation report, from trial results: pure functions.

- :func:`group_rows` : one row per model × policy × task × length (n, the mean
  score with its bootstrap 95% interval, mean tokens, cost, wall time and
  sub-agents, the count of trials that did not end ``ok``), and an ``all`` row
  closing each configuration (model · policy).
- :func:`expenditure_curves` : the score at fixed expenditure. For each
  configuration and each budget axis (output tokens, total tokens, cost, wall
  seconds), the mean score within budget B for a range of B: the scores of
  the trials that spent at most B, summed and divided by the configuration's
  number of trials (a trial over budget counts 0; partial scores count as
  they are, as RULER counts them). The budgets are shared by every
  configuration: 12 from the smallest to the largest expenditure observed,
  log-spaced when they span more than 10×. Each curve has its plateau
  (:func:`recursa.evals.stats.plateau_of`): the budget past which 10% more
  budget adds less than ``gain`` (0.01 by default) to the mean score.
- :func:`report_json` : both, as plain JSON values (``report.json``).

The bootstrap is seeded, so the same results give the same figures.
:mod:`recursa.evals.report` presents them; :mod:`recursa.evals.plots` draws them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from recursa.errors import UsageError
from recursa.evals.stats import Interval, bootstrap, mean, plateau_of, solved_within
from recursa.evals.trials import TrialResult, iter_groups

Axis = Literal["output_tokens", "total_tokens", "cost", "wall_s"]
AXES: tuple[Axis, ...] = ("output_tokens", "total_tokens", "cost", "wall_s")
AXIS_TITLES: dict[Axis, str] = {
    "output_tokens": "output tokens",
    "total_tokens": "total tokens",
    "cost": "cost (USD)",
    "wall_s": "wall time (s)",
}
DEFAULT_BUDGETS = 12
DEFAULT_GAIN = 0.01
DEFAULT_SEED = 0
ALL = "all"
"""The task of the row that pools a configuration's tasks and lengths."""


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One line of the main table. ``task`` is :data:`ALL` (and ``length`` 0)
    on the row pooling a configuration."""

    model: str
    policy: str
    task: str
    length: int
    score: Interval
    input_tokens: float
    output_tokens: float
    cached_tokens: float
    cost: float
    wall_s: float
    subagents: float
    not_ok: int
    metrics: dict[str, float] = field(default_factory=dict)
    """The mean of each metric the suite gives (HotpotQA: exact match and F1)."""

    @property
    def config(self) -> str:
        return f"{self.model} · {self.policy}"


@dataclass(frozen=True, slots=True)
class Curve:
    """The score at fixed expenditure of one configuration on one axis.
    ``points`` pairs each budget with the mean score within it; ``spent``
    holds the trials' (score, expenditure) pairs the curve comes from."""

    config: str
    axis: Axis
    n: int
    points: tuple[tuple[float, float], ...]
    plateau: float | None
    spent: tuple[tuple[float, float], ...]

    @property
    def free(self) -> bool:
        """Nothing was spent on this axis (a local model's cost)."""
        return all(spent == 0 for _, spent in self.spent)


def require(results: Sequence[TrialResult], where: Path | str = "results") -> None:
    """A one-line :class:`UsageError` when there is nothing to report."""
    if not results:
        raise UsageError(f"{where}: no trial results to report")


def _row(
    model: str, policy: str, task: str, length: int, trials: list[TrialResult], seed: int
) -> GroupRow:
    return GroupRow(
        model=model,
        policy=policy,
        task=task,
        length=length,
        score=bootstrap([t.score for t in trials], seed=seed),
        input_tokens=mean([t.input_tokens for t in trials]),
        output_tokens=mean([t.output_tokens for t in trials]),
        cached_tokens=mean([t.cached_tokens for t in trials]),
        cost=mean([t.cost for t in trials]),
        wall_s=mean([t.wall_s for t in trials]),
        subagents=mean([t.subagents for t in trials]),
        not_ok=sum(t.status != "ok" for t in trials),
        metrics={
            name: mean([t.metrics.get(name, 0.0) for t in trials])
            for name in dict.fromkeys(name for t in trials for name in t.metrics)
        },
    )


def metric_names(results: Sequence[TrialResult]) -> list[str]:
    """The metrics worth a table of their own: only when a suite gives more
    than its one score (exact match beside F1); else none."""
    if all(len(r.metrics) <= 1 for r in results):
        return []
    return list(dict.fromkeys(name for r in results for name in r.metrics))


def group_rows(results: Sequence[TrialResult], *, seed: int = DEFAULT_SEED) -> list[GroupRow]:
    """The main table: configurations in first-seen order, within each its
    tasks and lengths sorted, then its ``all`` row."""
    require(results)
    rows: list[GroupRow] = []
    for (model, policy), trials in iter_groups(results, "model", "policy"):
        cells = sorted(iter_groups(trials, "task", "length"), key=lambda group: group[0])
        for (task, length), group in cells:
            rows.append(_row(model, policy, task, length, group, seed))
        rows.append(_row(model, policy, ALL, 0, trials, seed))
    return rows


def spent_on(result: TrialResult, axis: Axis) -> float:
    """What one trial spent on a budget axis."""
    return float(getattr(result, axis))


def budgets(values: Sequence[float], count: int = DEFAULT_BUDGETS) -> list[float]:
    """``count`` budgets from the smallest positive value to the largest,
    log-spaced when they span more than 10×, evenly spaced otherwise; none
    when nothing was spent, one when every value is the same."""
    positive = [v for v in values if v > 0]
    if not positive:
        return []
    low, high = min(positive), max(positive)
    if low == high or count < 2:
        return [high]
    if high / low > 10:
        step = math.log(high / low) / (count - 1)
        grid = [low * math.exp(step * i) for i in range(count)]
    else:
        grid = [low + (high - low) * i / (count - 1) for i in range(count)]
    grid[0], grid[-1] = low, high  # exact ends, whatever the rounding
    return grid


def expenditure_curves(
    results: Sequence[TrialResult],
    *,
    count: int = DEFAULT_BUDGETS,
    gain: float = DEFAULT_GAIN,
) -> list[Curve]:
    """Every configuration's curve on every axis, axis by axis."""
    require(results)
    configs = list(iter_groups(results, "config"))
    curves: list[Curve] = []
    for axis in AXES:
        grid = budgets([spent_on(r, axis) for r in results], count)
        for (config,), trials in configs:
            spent = tuple((t.score, spent_on(t, axis)) for t in trials)
            n = len(trials)
            points = tuple((b, total / n) for b, total in solved_within(spent, grid))
            curves.append(Curve(config, axis, n, points, plateau_of(spent, gain=gain), spent))
    return curves


def report_json(
    results: Sequence[TrialResult], *, seed: int = DEFAULT_SEED, gain: float = DEFAULT_GAIN
) -> dict[str, object]:
    """The report as plain JSON values."""
    groups = [
        {
            "model": row.model,
            "policy": row.policy,
            "task": row.task,
            "length": row.length,
            "n": row.score.n,
            "score": row.score.mean,
            "score_low": row.score.low,
            "score_high": row.score.high,
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
            "cached_tokens": row.cached_tokens,
            "cost": row.cost,
            "wall_s": row.wall_s,
            "subagents": row.subagents,
            "not_ok": row.not_ok,
            "metrics": row.metrics,
        }
        for row in group_rows(results, seed=seed)
    ]
    curves = [
        {
            "config": c.config,
            "axis": c.axis,
            "n": c.n,
            "budgets": [b for b, _ in c.points],
            "scores": [s for _, s in c.points],
            "plateau": c.plateau,
            "nothing_spent": c.free,
        }
        for c in expenditure_curves(results, gain=gain)
    ]
    return {"trials": len(results), "gain": gain, "groups": groups, "expenditure": curves}


__all__ = [
    "ALL",
    "AXES",
    "AXIS_TITLES",
    "DEFAULT_BUDGETS",
    "DEFAULT_GAIN",
    "DEFAULT_SEED",
    "Axis",
    "Curve",
    "GroupRow",
    "budgets",
    "expenditure_curves",
    "group_rows",
    "metric_names",
    "report_json",
    "require",
    "spent_on",
]

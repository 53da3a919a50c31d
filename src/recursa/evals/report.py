"""The report of an evaluation: what ``recursa eval report DIR`` shows and writes.

Pure functions turn trial results into figures; two renderings present them.

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
- :func:`render_report` prints the tables with Rich; :func:`write_report`
  writes ``report.md`` (the same tables), ``report.json`` and the plots.

The bootstrap is seeded, so the same results give the same report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from recursa.errors import UsageError
from recursa.evals.stats import Interval, bootstrap, plateau_of, solved_within
from recursa.evals.trials import TrialResult, iter_groups

if TYPE_CHECKING:
    from rich.console import Console

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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _row(
    model: str, policy: str, task: str, length: int, trials: list[TrialResult], seed: int
) -> GroupRow:
    return GroupRow(
        model=model,
        policy=policy,
        task=task,
        length=length,
        score=bootstrap([t.score for t in trials], seed=seed),
        input_tokens=_mean([t.input_tokens for t in trials]),
        output_tokens=_mean([t.output_tokens for t in trials]),
        cached_tokens=_mean([t.cached_tokens for t in trials]),
        cost=_mean([t.cost for t in trials]),
        wall_s=_mean([t.wall_s for t in trials]),
        subagents=_mean([t.subagents for t in trials]),
        not_ok=sum(t.status != "ok" for t in trials),
    )


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


# -- rendering ---------------------------------------------------------------

GROUP_HEADERS = (
    "model",
    "policy",
    "task",
    "length",
    "n",
    "score [95% CI]",
    "input",
    "output",
    "cached",
    "cost",
    "wall s",
    "sub-agents",
    "not ok",
)


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _money(value: float) -> str:
    return f"${value:.4f}" if value else "0"


def _budget(axis: Axis, value: float) -> str:
    if axis == "cost":
        return _money(value)
    if axis == "wall_s":
        return f"{value:.3g}s"
    return _count(value)


def score_text(score: Interval) -> str:
    return f"{score.mean:.3f} [{score.low:.3f}, {score.high:.3f}]"


def group_cells(row: GroupRow) -> list[str]:
    return [
        row.model,
        row.policy,
        row.task,
        _count(row.length) if row.length else "",
        str(row.score.n),
        score_text(row.score),
        _count(row.input_tokens),
        _count(row.output_tokens),
        _count(row.cached_tokens),
        _money(row.cost),
        f"{row.wall_s:.2f}",
        f"{row.subagents:.2f}",
        str(row.not_ok),
    ]


def curve_table(curves: Sequence[Curve], axis: Axis) -> tuple[list[str], list[list[str]]]:
    """One axis's score-at-fixed-expenditure table: a column per budget, a row
    per configuration, its plateau last. No columns when nothing was spent."""
    mine = [c for c in curves if c.axis == axis]
    grid = [b for b, _ in mine[0].points] if mine else []
    headers = ["configuration", *(_budget(axis, b) for b in grid), "plateau"]
    rows = [
        [
            c.config,
            *(f"{score:.2f}" for _, score in c.points),
            _plateau_text(c, _budget),
        ]
        for c in mine
    ]
    return headers, rows


def nothing_spent(curves: Sequence[Curve], axis: Axis) -> bool:
    return all(c.free for c in curves if c.axis == axis)


def _axis_heading(axis: Axis, gain: float, model: str = "") -> str:
    whose = f" of {model}" if model else ""
    return (
        f"Mean score within budget{whose}: {AXIS_TITLES[axis]} "
        f"(plateau: where 10% more adds < {gain:g})"
    )


def _short(value: float) -> str:
    """A count in at most five characters: 950, 12.3k, 4.1M."""
    if value < 1000:
        return f"{value:.0f}"
    if value < 999_500:
        return f"{value / 1000:.3g}k"
    return f"{value / 1_000_000:.3g}M"


def _length(tokens: int) -> str:
    """A target length as it is asked for (``--lengths 4k``: 4096 tokens)."""
    if not tokens:
        return ""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else _short(tokens)


def _short_budget(axis: Axis, value: float) -> str:
    if axis == "cost":
        return f"${value:.3g}"
    if axis == "wall_s":
        return f"{value:.3g}s"
    return _short(value)


TERMINAL_HEADERS = (
    "task",
    "len",
    "n",
    "score [95% CI]",
    "in",
    "out",
    "cache",
    "cost",
    "wall",
    "subs",
    "fail",
)
"""The per-configuration table's columns, short enough for 80 columns: ``in``,
``out`` and ``cache`` are tokens (``cache``: input tokens read from the
provider's cache), ``wall`` seconds, ``subs`` sub-agents, ``fail`` the trials
that did not end ``ok``."""


def _terminal_cells(row: GroupRow) -> list[str]:
    s = row.score
    return [
        row.task,
        _length(row.length),
        str(s.n),
        f"{s.mean:.2f} [{s.low:.2f}–{s.high:.2f}]",
        _short(row.input_tokens),
        _short(row.output_tokens),
        _short(row.cached_tokens),
        f"${row.cost:.2g}" if row.cost else "0",
        f"{row.wall_s:.3g}",
        f"{row.subagents:.2g}",
        str(row.not_ok),
    ]


def render_report(
    results: Sequence[TrialResult],
    console: Console,
    *,
    seed: int = DEFAULT_SEED,
    gain: float = DEFAULT_GAIN,
) -> None:
    """Print, for a terminal of 80 columns or more, a table per configuration
    (a row per task × length, then ``all``; tokens in k and M) and a table per
    budget axis (a row per budget, a column per configuration, the plateau
    last). ``report.md`` has the same figures unabridged."""
    from rich.table import Table

    def table(title: str) -> Table:
        console.print(title, style="bold")  # above the table: a title inside wraps to its width
        # no rules: one space between columns keeps a configuration within 80 columns
        return Table(
            box=None,
            pad_edge=False,
            padding=(0, 1),
            collapse_padding=True,
            header_style="bold underline",
        )

    rows = group_rows(results, seed=seed)
    configs = list(dict.fromkeys(row.config for row in rows))
    for config in configs:
        main = table(f"{config}: means per trial")
        for index, header in enumerate(TERMINAL_HEADERS):
            if index == 0:  # 13 columns: niah_single_1 whole at 80 columns
                main.add_column(header, min_width=13)
            else:
                main.add_column(header, justify="right", no_wrap=True)
        for row in rows:
            if row.config == config:
                main.add_row(*_terminal_cells(row), style="bold" if row.task == ALL else None)
        console.print(main)
    models = list(dict.fromkeys(row.model for row in rows))
    curves = expenditure_curves(results, gain=gain)
    for axis in AXES:
        if nothing_spent(curves, axis):
            title = AXIS_TITLES[axis]
            console.print(f"{title[0].upper()}{title[1:]}: nothing spent (a local model).")
            continue
        mine = [c for c in curves if c.axis == axis]
        grid = table(_axis_heading(axis, gain, models[0] if len(models) == 1 else ""))
        grid.add_column("budget", justify="right", no_wrap=True)
        for curve in mine:  # one model: its policies name the columns
            grid.add_column(
                curve.config.split(" · ")[-1] if len(models) == 1 else curve.config, justify="right"
            )
        for index, (budget, _) in enumerate(mine[0].points):
            cells = [f"{c.points[index][1]:.2f}" for c in mine]
            grid.add_row(_short_budget(axis, budget), *cells)
        grid.add_section()
        grid.add_row("plateau", *(_plateau_text(c, _short_budget) for c in mine))
        console.print(grid)


def _plateau_text(curve: Curve, budget: Callable[[Axis, float], str]) -> str:
    if curve.free:
        return "—"
    return "still climbing" if curve.plateau is None else budget(curve.axis, curve.plateau)


def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [line(headers), "|" + "---|" * len(headers), *(line(row) for row in rows), ""]


def report_markdown(
    results: Sequence[TrialResult], *, seed: int = DEFAULT_SEED, gain: float = DEFAULT_GAIN
) -> str:
    """The report's tables as Markdown, with the plots linked."""
    rows = group_rows(results, seed=seed)
    lines = ["# Evaluation report", "", f"{len(results)} trials.", "", "## Scores", ""]
    lines += _markdown_table(GROUP_HEADERS, [group_cells(row) for row in rows])
    lines += ["## Score at fixed expenditure", ""]
    curves = expenditure_curves(results, gain=gain)
    for axis in AXES:
        lines += [f"### {_axis_heading(axis, gain)}", ""]
        if nothing_spent(curves, axis):
            lines += ["Nothing spent (a local model).", ""]
            continue
        lines += _markdown_table(*curve_table(curves, axis))
        name = plot_name(axis)
        lines += [f"![score against {AXIS_TITLES[axis]}]({name}.png)", ""]
    return "\n".join(lines)


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


PLOT_NAMES: dict[Axis, str] = {
    "output_tokens": "score-vs-output-tokens",
    "total_tokens": "score-vs-total-tokens",
    "cost": "score-vs-cost",
    "wall_s": "score-vs-wall-time",
}


def plot_name(axis: Axis) -> str:
    """The plot's file name without its suffix (``.png``, ``.svg``)."""
    return PLOT_NAMES[axis]


def write_report(
    directory: Path,
    results: Sequence[TrialResult],
    *,
    seed: int = DEFAULT_SEED,
    gain: float = DEFAULT_GAIN,
) -> list[Path]:
    """Write ``report.md``, ``report.json`` and the plots (PNG and SVG) into
    ``directory``; return the paths written. The plots need matplotlib (the
    ``evals`` extra): without it, a one-line :class:`UsageError` comes before
    anything is written."""
    from recursa.evals import plots

    require(results, directory)
    plots.require_matplotlib()
    markdown = directory / "report.md"
    markdown.write_text(report_markdown(results, seed=seed, gain=gain), encoding="utf-8")
    data = directory / "report.json"
    data.write_text(
        json.dumps(report_json(results, seed=seed, gain=gain), indent=2) + "\n", encoding="utf-8"
    )
    curves = expenditure_curves(results, gain=gain)
    written = [markdown, data]
    for axis in AXES:
        written += plots.write_plot(directory, plot_name(axis), curves, axis)
    return written


__all__ = [
    "ALL",
    "AXES",
    "AXIS_TITLES",
    "Axis",
    "Curve",
    "GroupRow",
    "budgets",
    "expenditure_curves",
    "group_rows",
    "plot_name",
    "render_report",
    "report_json",
    "report_markdown",
    "require",
    "write_report",
]

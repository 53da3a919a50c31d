"""The report of an evaluation: what ``recursa eval report DIR`` shows and writes.

:func:`render_report` prints, with Rich and within 80 columns, a table per
configuration (model · policy: a row per task × length, then ``all``) and a
table per budget axis (the score at fixed expenditure and its plateau);
:func:`write_report` writes ``report.md`` (the same tables, unabridged),
``report.json`` and the plots into the run's directory. The figures come from
:mod:`recursa.evals.figures`; what they mean is told there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.evals.figures import (
    ALL,
    AXES,
    AXIS_TITLES,
    DEFAULT_GAIN,
    DEFAULT_SEED,
    Axis,
    Curve,
    GroupRow,
    expenditure_curves,
    group_rows,
    metric_names,
    report_json,
    require,
)
from recursa.evals.stats import Interval
from recursa.evals.trials import TrialResult

if TYPE_CHECKING:
    from rich.console import Console

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


def length_text(tokens: int) -> str:
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
        length_text(row.length),
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
    names = metric_names(results)
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
        if names:
            extra = table(f"{config}: every metric, mean per trial")
            for header in ("task", "len", "n", *names):
                extra.add_column(header, justify="left" if header == "task" else "right")
            for row in rows:
                if row.config == config:
                    extra.add_row(*_metric_cells(row, names))
            console.print(extra)
    models = list(dict.fromkeys(row.model for row in rows))
    curves = expenditure_curves(results, gain=gain)
    for axis in AXES:
        if nothing_spent(curves, axis):
            title = AXIS_TITLES[axis]
            console.print(
                f"{title[0].upper()}{title[1:]}: nothing spent (a local or scripted model is free)."
            )
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


def _metric_cells(row: GroupRow, names: Sequence[str]) -> list[str]:
    return [
        row.task,
        length_text(row.length),
        str(row.score.n),
        *(f"{row.metrics.get(name, 0.0):.3f}" for name in names),
    ]


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
    names = metric_names(results)
    if names:
        lines += ["## Every metric (mean per trial)", ""]
        headers = ["model", "policy", "task", "length", "n", *names]
        lines += _markdown_table(
            headers, [[row.model, row.policy, *_metric_cells(row, names)] for row in rows]
        )
    lines += ["## Score at fixed expenditure", ""]
    curves = expenditure_curves(results, gain=gain)
    for axis in AXES:
        lines += [f"### {_axis_heading(axis, gain)}", ""]
        if nothing_spent(curves, axis):
            lines += ["Nothing spent (a local or scripted model is free).", ""]
            continue
        lines += _markdown_table(*curve_table(curves, axis))
        name = plot_name(axis)
        lines += [f"![score against {AXIS_TITLES[axis]}]({name}.png)", ""]
    return "\n".join(lines)


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
        written += plots.write_plot(directory, plot_name(axis), curves, axis, gain=gain)
    return written


__all__ = [
    "length_text",
    "plot_name",
    "render_report",
    "report_markdown",
    "write_report",
]

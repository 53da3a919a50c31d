"""The report's plots: score at fixed expenditure, one curve per configuration.

For each budget axis (output tokens, total tokens, cost, wall time) a figure
shows, for each configuration, the mean score within budget B as B grows: a
step that rises where a trial that scored finishes within B. The curve is
drawn from the trials themselves, not from the report's 12 sampled budgets,
and its plateau (where 10% more budget adds less than the report's gain) is
marked with a dot. The x axis is logarithmic when the expenditures span more
than 10×. When no configuration spent anything on an axis (a local model has
no cost), the figure says so in words instead of showing an empty axis.

matplotlib is imported on first use, with the Agg backend (no display); it
comes with the ``evals`` extra, and its absence is a one-line
:class:`UsageError`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.errors import UsageError
from recursa.evals.figures import AXIS_TITLES, DEFAULT_GAIN, Axis, Curve

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SUFFIXES = (".png", ".svg")
LOG_SPAN = 10.0
"""Expenditures spanning more than this factor get a logarithmic axis."""


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("the report's plots need matplotlib: pip install 'recursa[evals]'")


def steps(curve: Curve) -> tuple[float, list[float], list[float]]:
    """The exact curve: the mean score of the trials that spent nothing (the
    curve's start), then each distinct positive expenditure and the mean
    score within it."""
    ordered = sorted(curve.spent, key=lambda pair: pair[1])
    base = sum(score for score, spent in ordered if spent <= 0) / curve.n
    xs: list[float] = []
    ys: list[float] = []
    total = base * curve.n
    for score, spent in ordered:
        if spent <= 0:
            continue
        total += score
        if xs and xs[-1] == spent:
            ys[-1] = total / curve.n
        else:
            xs.append(spent)
            ys.append(total / curve.n)
    return base, xs, ys


def _tick(value: float, _position: float | None = None) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def figure(curves: Sequence[Curve], axis: Axis, *, gain: float = DEFAULT_GAIN) -> Figure:
    """The figure for one axis: one labelled line per configuration (its
    plateau a dot, not a line), or a note when nothing was spent."""
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    mine = [c for c in curves if c.axis == axis]
    fig = Figure(figsize=(8, 4.8), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    title = AXIS_TITLES[axis]
    ax.set_title(f"Score at fixed expenditure: {title}")
    drawn = {c.config: steps(c) for c in mine}
    every = [x for _, xs, _ in drawn.values() for x in xs]
    if not every:
        ax.set_axis_off()
        why = "\n(a local or scripted model is free)." if axis == "cost" else "."
        ax.text(
            0.5,
            0.5,
            f"No {title.split(' (')[0]} recorded: every configuration spent nothing here{why}",
            ha="center",
            va="center",
            fontsize=12,
            transform=ax.transAxes,
        )
        return fig
    low, high = min(every), max(every)
    log = high / low > LOG_SPAN
    if log:
        ax.set_xscale("log")
        # 1-2-5 ticks in plain numbers: decades alone (10^2, 10^3) are hard to read off
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(_tick))
    colours = [f"C{i % 10}" for i in range(len(mine))]
    plateaus = False
    for index, (curve, colour) in enumerate(zip(mine, colours, strict=True)):
        base, xs, ys = drawn[curve.config]
        gid = f"curve-{index}"  # the SVG names each configuration's line
        if not xs:  # spent nothing: its score holds at every budget
            ax.plot(
                [low, high],
                [base, base],
                color=colour,
                linestyle="--",
                label=f"{curve.config} (spent nothing)",
                gid=gid,
            )
            continue
        # flat before its first trial finishes, flat after its last
        line_x = [low, *xs, high] if xs[0] > low else [*xs, high]
        line_y = [base, *ys, ys[-1]] if xs[0] > low else [*ys, ys[-1]]
        ax.plot(
            line_x,
            line_y,
            drawstyle="steps-post",
            color=colour,
            linewidth=2,
            label=f"{curve.config} (n={curve.n})",
            gid=gid,
        )
        # a plateau at zero (flat from a trial that spent nothing) is off a log axis
        if curve.plateau is not None and curve.plateau >= low:
            at = [y for x, y in zip(xs, ys, strict=True) if x <= curve.plateau]
            ax.scatter([curve.plateau], [at[-1]], color=colour, s=40, zorder=3, edgecolors="black")
            plateaus = True
    ax.set_xlabel(f"budget: {title} per trial" + (" (log scale)" if log else ""))
    ax.set_ylabel("mean score within budget")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, which="major", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if plateaus:  # one neutral entry for every curve's dot, not in the axes' lines
        handles.append(
            Line2D(
                [], [], linestyle="", marker="o", markerfacecolor="white", markeredgecolor="black"
            )
        )
        labels.append(f"plateau (10% more budget adds < {gain:g} to the mean score)")
    # below the axes: a legend inside would hide the curves it names
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=9)
    return fig


def write_plot(
    directory: Path,
    name: str,
    curves: Sequence[Curve],
    axis: Axis,
    *,
    gain: float = DEFAULT_GAIN,
) -> list[Path]:
    """Draw one axis's figure and write it as ``NAME.png`` and ``NAME.svg``;
    ``gain`` is the one the curves' plateaus were found with."""
    import matplotlib

    fig = figure(curves, axis, gain=gain)
    paths = [directory / f"{name}{suffix}" for suffix in SUFFIXES]
    # no date and fixed element ids: the same results write the same SVG
    with matplotlib.rc_context({"svg.hashsalt": "recursa"}):
        for path in paths:
            fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    return paths


__all__ = ["figure", "require_matplotlib", "steps", "write_plot"]

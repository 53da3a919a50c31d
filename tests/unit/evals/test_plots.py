"""The report's plots: real matplotlib files, one labelled line per configuration."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import numpy
import pytest

from recursa.errors import UsageError
from recursa.evals import plots
from recursa.evals.figures import Curve, expenditure_curves
from recursa.evals.trials import TrialResult


def trial(item: str, score: float, policy: str, **fields: Any) -> TrialResult:
    values: dict[str, Any] = {
        "trial": f"m|{policy}|{item}",
        "suite": "ruler-niah",
        "item": item,
        "task": "niah",
        "length": 4096,
        "model": "m",
        "policy": policy,
        "seed": 0,
        "score": score,
        "status": "ok",
        "answer": "x",
        "references": ("x",),
        "metric": "string_match_all",
    }
    values.update(fields)
    return TrialResult(**values)


def run(cost: float) -> list[TrialResult]:
    return [
        trial(str(i), float(i % 2), policy, output_tokens=50 * (i + 1) * k, cost=cost * i,
              wall_s=1.0 + i)
        for k, policy in ((1, "repl"), (3, "context"), (5, "repl-nosub"))
        for i in range(6)
    ]  # fmt: skip


def curves(cost: float) -> list[Curve]:
    return expenditure_curves(run(cost))


def test_the_steps_are_the_mean_score_within_each_expenditure() -> None:
    curve = Curve("c", "cost", 4, (), None, ((1.0, 0.0), (0.5, 2.0), (1.0, 2.0), (0.0, 3.0)))
    assert plots.steps(curve) == (0.25, [2.0, 3.0], [0.625, 0.625])


def test_one_labelled_line_per_configuration() -> None:
    fig = plots.figure(curves(0.01), "output_tokens")
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["m · repl (n=6)", "m · context (n=6)", "m · repl-nosub (n=6)"]
    assert ax.get_xscale() == "log"  # 50 .. 1500 output tokens: 30x
    assert fig.axes[0].get_ylabel() == "mean score within budget"
    # wall time spans 1 .. 6 s: a linear axis
    assert plots.figure(curves(0.01), "wall_s").axes[0].get_xscale() == "linear"


def test_the_files_are_a_png_and_an_svg_with_a_line_per_configuration(tmp_path: Path) -> None:
    paths = plots.write_plot(tmp_path, "score-vs-output-tokens", curves(0.01), "output_tokens")
    png, svg = paths
    assert (png.name, svg.name) == ("score-vs-output-tokens.png", "score-vs-output-tokens.svg")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tree = ElementTree.parse(svg)
    ids = [g.get("id") for g in tree.iter("{http://www.w3.org/2000/svg}g")]
    assert sorted(i for i in ids if i and i.startswith("curve-")) == [
        "curve-0",
        "curve-1",
        "curve-2",
    ]


def test_a_free_axis_is_said_in_words() -> None:
    fig = plots.figure(curves(0.0), "cost")
    (ax,) = fig.axes
    assert ax.get_lines() == []
    (note,) = ax.texts
    assert note.get_text().startswith("No cost recorded: every configuration spent nothing")


def test_without_matplotlib_the_plots_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "matplotlib" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(UsageError, match=r"pip install 'recursa\[evals\]'"):
        plots.figure(curves(0.01), "cost")


def test_trials_that_spent_nothing_start_the_curve(tmp_path: Path) -> None:
    # an error before any call costs 0; nothing won: the plateau is at 0, off the axis
    lost = [trial("a", 0.0, "repl", cost=0.0), trial("b", 0.0, "repl", cost=0.02)]
    won = [trial("a", 1.0, "context", cost=0.0), trial("b", 1.0, "context", cost=0.5)]
    fig = plots.figure(expenditure_curves(lost + won), "cost")
    (ax,) = fig.axes
    first, second = ax.get_lines()
    assert numpy.asarray(second.get_ydata()).tolist() == [0.5, 1.0, 1.0]  # the free win first
    assert numpy.asarray(first.get_ydata()).tolist() == [0.0, 0.0]
    assert plots.write_plot(tmp_path, "cost", expenditure_curves(lost + won), "cost")


def test_the_same_results_write_the_same_svg(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = plots.write_plot(tmp_path / "one", "p", curves(0.01), "wall_s")[1]
    second = plots.write_plot(tmp_path / "two", "p", curves(0.01), "wall_s")[1]
    assert first.read_bytes() == second.read_bytes()

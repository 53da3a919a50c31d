"""The report's figures, tables and files on hand-made results, checked by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from recursa.errors import UsageError
from recursa.evals.figures import ALL, budgets, expenditure_curves, group_rows, report_json
from recursa.evals.report import render_report, report_markdown, write_report
from recursa.evals.trials import TrialResult, append_result, read_results


def trial(item: str, score: float, **fields: Any) -> TrialResult:
    values: dict[str, Any] = {
        "trial": f"m|repl|{item}",
        "suite": "ruler-niah",
        "item": item,
        "task": "niah",
        "length": 4096,
        "model": "m",
        "policy": "repl",
        "seed": 0,
        "score": score,
        "status": "ok",
        "answer": "x",
        "references": ("x",),
        "metric": "string_match_all",
    }
    values.update(fields)
    return TrialResult(**values)


def small_run() -> list[TrialResult]:
    """Two configurations of one model; repl has two lengths."""
    return [
        trial("a", 1.0, input_tokens=1000, output_tokens=100, cached_tokens=500, cost=0.01,
              wall_s=2.0, subagents=1),
        trial("b", 0.0, input_tokens=3000, output_tokens=300, cached_tokens=0, cost=0.03,
              wall_s=4.0, subagents=0, status="limit"),
        trial("c", 0.5, input_tokens=2000, output_tokens=200, cached_tokens=1000, cost=0.02,
              wall_s=6.0, subagents=2),
        trial("d", 1.0, length=8192, input_tokens=4000, output_tokens=400, cost=0.04,
              wall_s=8.0),
        trial("a", 0.0, policy="context", input_tokens=5000, output_tokens=50, cost=0.05,
              wall_s=1.0, status="error"),
        trial("b", 1.0, policy="context", input_tokens=5000, output_tokens=50, cost=0.05,
              wall_s=1.0),
    ]  # fmt: skip


def test_the_table_has_a_row_per_cell_and_an_all_row_per_configuration() -> None:
    rows = group_rows(small_run())
    keys = [(r.policy, r.task, r.length) for r in rows]
    assert keys == [
        ("repl", "niah", 4096),
        ("repl", "niah", 8192),
        ("repl", ALL, 0),
        ("context", "niah", 4096),
        ("context", ALL, 0),
    ]
    first = rows[0]  # items a, b, c
    assert first.score.n == 3 and first.score.mean == pytest.approx(0.5)
    assert (first.input_tokens, first.output_tokens, first.cached_tokens) == (2000, 200, 500)
    assert first.cost == pytest.approx(0.02) and first.wall_s == 4.0 and first.subagents == 1.0
    assert first.not_ok == 1
    repl_all = rows[2]  # a, b, c, d: (1 + 0 + 0.5 + 1) / 4
    assert repl_all.score.n == 4 and repl_all.score.mean == pytest.approx(0.625)
    assert repl_all.input_tokens == 2500 and repl_all.wall_s == 5.0 and repl_all.not_ok == 1
    context = rows[4]
    assert context.score.mean == 0.5 and context.not_ok == 1 and context.cost == 0.05


def test_the_interval_is_deterministic_and_holds_the_mean() -> None:
    first = group_rows(small_run())
    assert group_rows(small_run()) == first
    for row in first:
        assert 0.0 <= row.score.low <= row.score.mean <= row.score.high <= 1.0
    # a single trial's interval is the point itself
    assert first[1].score.low == first[1].score.high == 1.0


def test_budgets_are_log_spaced_past_ten_times_and_even_below() -> None:
    assert budgets([1000.0, 1.0, 0.0], count=4) == pytest.approx([1, 10, 100, 1000])
    assert budgets([2.0, 8.0, 5.0], count=4) == [2.0, 4.0, 6.0, 8.0]
    assert budgets([0.0, 0.0]) == []
    assert budgets([3.0, 3.0]) == [3.0]


def test_the_score_at_fixed_expenditure_is_the_mean_score_within_budget() -> None:
    curves = expenditure_curves(small_run(), count=4)
    repl = next(c for c in curves if c.axis == "output_tokens" and c.config == "m · repl")
    # budgets 50..400 (8x: even): 50, 166.7, 283.3, 400; within each: a(1.0)@100,
    # c(0.5)@200, b(0)@300, d(1.0)@400, over 4 trials
    assert [b for b, _ in repl.points] == pytest.approx([50, 50 + 350 / 3, 50 + 700 / 3, 400])
    assert [s for _, s in repl.points] == [0.0, 0.25, 0.375, 0.625]
    # the last trial scored, at the largest expenditure: still climbing
    assert repl.plateau is None
    context = next(c for c in curves if c.axis == "output_tokens" and c.config == "m · context")
    assert [s for _, s in context.points] == [0.5, 0.5, 0.5, 0.5]
    assert context.plateau is None  # its only win is at its only expenditure
    wall = next(c for c in curves if c.axis == "wall_s" and c.config == "m · context")
    assert [s for _, s in wall.points] == [0.5] * 4


def test_the_plateau_follows_the_last_climb() -> None:
    run = [trial(str(i), 1.0 if i < 3 else 0.0, output_tokens=100 * (i + 1)) for i in range(6)]
    (curve,) = [c for c in expenditure_curves(run) if c.axis == "output_tokens"]
    assert curve.plateau == 300.0  # wins at 100, 200, 300; 400-600 add nothing
    assert curve.points[-1][1] == 0.5


def test_the_rendered_report_shows_the_tables() -> None:
    console = Console(record=True, width=240, color_system=None)
    render_report(small_run(), console)
    text = console.export_text()
    assert "m · repl: means per trial" in text and "m · context: means per trial" in text
    # repl at 4k: n 3, score 0.5, 2k input, 200 output, 500 cached, $0.02, 4 s, 1 sub, 1 fail
    cells = [line.split() for line in text.splitlines()]
    assert [
        "niah",
        "4k",
        "3",
        "0.50",
        "[0.00–1.00]",
        "2k",
        "200",
        "500",
        "$0.02",
        "4",
        "1",
        "1",
    ] in cells
    # all four repl trials: 2.5k input, $0.025, 5 s, 0.75 sub-agents; 0.625 shows as 0.62
    assert [
        "all",
        "4",
        "0.62",
        "[0.25–1.00]",
        "2.5k",
        "250",
        "375",
        "$0.025",
        "5",
        "0.75",
        "1",
    ] in cells
    assert "Mean score within budget of m: output tokens" in text
    assert "Mean score within budget of m: cost (USD)" in text
    assert "plateau still climbing" in text


def test_a_free_axis_says_nothing_was_spent() -> None:
    run = [trial("a", 1.0, output_tokens=10, wall_s=1.0), trial("b", 0.0, output_tokens=20)]
    console = Console(record=True, width=200, color_system=None)
    render_report(run, console)
    assert "Cost (USD): nothing spent (a local or scripted model is free)." in console.export_text()
    assert "Nothing spent (a local or scripted model is free)." in report_markdown(run)


def test_the_json_and_markdown_hold_the_same_figures() -> None:
    data = report_json(small_run())
    assert data["trials"] == 6
    groups = data["groups"]
    assert isinstance(groups, list) and groups[2]["task"] == ALL and groups[2]["score"] == 0.625
    markdown = report_markdown(small_run())
    assert "| m | repl | all |  | 4 | 0.625 [" in markdown
    assert "![score against output tokens](score-vs-output-tokens.png)" in markdown


def test_write_report_writes_tables_and_plots(tmp_path: Path) -> None:
    for result in small_run():
        append_result(tmp_path / "results.jsonl", result)
    written = write_report(tmp_path, read_results(tmp_path))
    names = sorted(p.name for p in written)
    assert names == sorted(
        ["report.md", "report.json"]
        + [
            f"score-vs-{axis}.{suffix}"
            for axis in ("output-tokens", "total-tokens", "cost", "wall-time")
            for suffix in ("png", "svg")
        ]
    )
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)
    assert json.loads((tmp_path / "report.json").read_text())["groups"][0]["n"] == 3


def test_nothing_to_report_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no trial results to report"):
        group_rows([])
    with pytest.raises(UsageError, match="no trial results to report"):
        write_report(tmp_path, [])
    with pytest.raises(UsageError, match="no such results file"):
        read_results(tmp_path)


def test_the_terminal_report_fits_eighty_columns_uncut() -> None:
    run = [
        trial(str(i), i % 2, task="niah_single_1", length=8192, model="anthropic/claude-x",
              policy=policy, input_tokens=123_456, output_tokens=12_345, cached_tokens=99_999,
              cost=0.0755, wall_s=123.4, subagents=2, status="error" if i else "ok")
        for policy in ("repl-nocompact", "context-nosub+refine")
        for i in range(12)
    ]  # fmt: skip
    console = Console(record=True, width=80, color_system=None)
    render_report(run, console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not any("…" in line for line in lines)
    assert lines[2].split()[:4] == ["niah_single_1", "8k", "12", "0.50"]

"""The paired comparison (the harness audit) on hand-computed differences."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from recursa.errors import UsageError
from recursa.evals.compare import OVERALL, compare, comparison_json, render_comparison, select
from recursa.evals.trials import TrialResult


def trial(item: str, score: float, policy: str = "repl", **fields: Any) -> TrialResult:
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


A_SCORES = [1.0, 0.0, 1.0, 0.0, 0.0]
B_SCORES = [1.0, 1.0, 1.0, 0.0, 1.0]


def side(policy: str, scores: list[float], output: int) -> list[TrialResult]:
    return [
        trial(f"i{n}", s, policy, output_tokens=output, input_tokens=1000, wall_s=output / 100)
        for n, s in enumerate(scores)
    ]


def test_the_paired_difference_is_the_hand_computed_one() -> None:
    c = compare(side("context", A_SCORES, 100), side("repl", B_SCORES, 300))
    assert (c.label_a, c.label_b) == ("m · context", "m · repl")
    (cell, overall) = c.rows
    assert (cell.task, cell.length, overall.task) == ("niah", 4096, OVERALL)
    assert overall.n == 5 and overall.mean_a == 0.4 and overall.mean_b == 0.8
    d = overall.difference
    assert d.mean == pytest.approx(0.4)  # differences 0, 1, 0, 0, 1
    # The resampled mean of those differences is Binomial(5, 0.4) / 5. Its 2.5%
    # quantile is 0 (P(0) = 0.6**5 = 0.078) and its 97.5% quantile 0.8
    # (P(<= 3) = 0.913, P(<= 4) = 0.990); 2000 resamples land there for any seed.
    assert d.low == 0.0 and d.high == pytest.approx(0.8)
    assert compare(side("context", A_SCORES, 100), side("repl", B_SCORES, 300)) == c
    assert (overall.wins, overall.losses, overall.ties) == (2, 0, 3)
    assert overall.output_tokens == 200 and overall.total_tokens == 200
    assert overall.input_tokens == 0 and overall.wall_s == pytest.approx(2.0)
    assert (c.only_a, c.only_b) == (0, 0)
    # one configuration run twice (the harness changed in between): named by the caller
    before, after = side("repl", A_SCORES, 100), side("repl", B_SCORES, 100)
    named = compare(before, after, labels=("runs/before", "runs/after"))
    assert (named.label_a, named.label_b) == ("runs/before", "runs/after")
    assert named.overall.difference == d


def test_only_shared_items_pair_and_cells_split_by_task_and_length() -> None:
    a = [*side("context", A_SCORES, 100), trial("x", 1.0, "context", length=8192)]
    b = [
        *side("repl", B_SCORES, 100),
        trial("x", 0.0, "repl", length=8192),
        trial("only-b", 1.0, "repl"),
        trial("i0", 0.0, "repl", suite="other"),  # another suite's item: no pair
    ]
    c = compare(a, b)
    assert [(r.task, r.length, r.n) for r in c.rows] == [
        ("niah", 4096, 5),
        ("niah", 8192, 1),
        (OVERALL, 0, 6),
    ]
    assert c.rows[1].difference.mean == -1.0 and c.rows[1].losses == 1
    assert c.overall.difference.mean == pytest.approx((2 - 1) / 6)
    assert (c.only_a, c.only_b) == (0, 2)
    data = comparison_json(c)
    assert data["only_b"] == 2


def test_nothing_in_common_or_two_trials_of_an_item_is_one_line() -> None:
    with pytest.raises(UsageError, match="share no item"):
        compare(side("a", [1.0], 1), [trial("other", 1.0)])
    both = side("repl", A_SCORES, 1) + side("context", B_SCORES, 1)
    with pytest.raises(UsageError, match=r"A holds two trials of item 'i0'.*select one"):
        compare(both, side("repl", B_SCORES, 1))


def test_select_picks_one_configuration_or_lists_them() -> None:
    run = [
        *side("repl", A_SCORES, 1),
        *side("context", B_SCORES, 1),
        trial("i0", 1.0, "repl", model="n"),
    ]
    assert select(run, "m · context") == run[5:10]
    assert select(run, "m|repl") == run[:5]
    assert select(run, "context") == run[5:10]
    assert select(run, "n") == run[10:]
    with pytest.raises(UsageError, match="several configurations here, choose one: m · repl, "):
        select(run, None)
    with pytest.raises(UsageError, match="'repl' names several configurations"):
        select(run, "repl")
    with pytest.raises(UsageError, match="no configuration 'x' here; there are: m · repl"):
        select(run, "x")
    assert select(run[:5], None) == run[:5]
    with pytest.raises(UsageError, match="no trial results"):
        select([], None)


def test_the_rendered_comparison_shows_the_difference_and_a_verdict() -> None:
    console = Console(record=True, width=200, color_system=None)
    render_comparison(compare(side("context", A_SCORES, 100), side("repl", B_SCORES, 300)), console)
    text = console.export_text()
    assert "A: m · context" in text and "B: m · repl" in text
    cells = [line.split() for line in text.splitlines()]
    assert ["all", "5", "0.40", "0.80", "+0.40", "[+0.00,", "+0.80]", "2/0/3"] in cells
    # B spent 200 more output tokens per item, nothing more in cost, 2 s more
    assert ["all", "5", "+200", "+200", "0", "+2.0"] in cells
    assert "No clear difference: the 95% interval [+0.000, +0.800] holds 0." in text
    worse = compare(side("a", [1.0] * 8, 1), side("b", [0.0] * 8, 1))
    console = Console(record=True, width=200, color_system=None)
    render_comparison(worse, console)
    assert "B scores lower than A by 1.000 (95% interval below 0)." in console.export_text()


def test_items_of_another_seed_never_pair() -> None:
    """RULER's ids repeat under every seed (niah_single_1/4096/0): the seed pairs too."""
    a = side("repl", A_SCORES, 10)
    b = [trial(r.item, r.score, "context", seed=1) for r in side("context", B_SCORES, 10)]
    with pytest.raises(UsageError, match="share no item"):
        compare(a, b)

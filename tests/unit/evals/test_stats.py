"""Report statistics on hand-checked inputs."""

from __future__ import annotations

import pytest

from recursa.evals.stats import bootstrap, paired_bootstrap, plateau, plateau_of, solved_within


def test_the_bootstrap_interval_holds_the_mean_and_is_deterministic_by_seed() -> None:
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    first = bootstrap(scores, seed=3)
    assert first.mean == 0.75 and first.n == 8
    assert 0.0 <= first.low <= first.mean <= first.high <= 1.0
    assert first.low < first.high
    assert bootstrap(scores, seed=3) == first
    constant = bootstrap([0.5] * 10)
    assert (constant.low, constant.mean, constant.high) == (0.5, 0.5, 0.5)


def test_the_paired_difference_is_b_minus_a_item_by_item() -> None:
    a = [0.0, 1.0, 0.0, 1.0]
    b = [1.0, 1.0, 1.0, 1.0]
    diff = paired_bootstrap(a, b)
    assert diff.mean == 0.5  # (1 + 0 + 1 + 0) / 4, computed by hand
    assert 0.0 <= diff.low <= 0.5 <= diff.high <= 1.0
    same = paired_bootstrap(a, a)
    assert (same.low, same.mean, same.high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap(a, b[:3])


def test_score_at_fixed_expenditure_counts_only_trials_within_budget() -> None:
    trials = [(1.0, 100.0), (1.0, 250.0), (0.5, 80.0), (0.0, 10.0)]
    assert solved_within(trials, [50, 100, 300]) == [(50, 0.0), (100, 1.5), (300, 2.5)]


def test_the_plateau_is_where_ten_percent_more_budget_stops_paying() -> None:
    curve = [(100.0, 1.0), (110.0, 3.0), (120.0, 3.05), (130.0, 3.1), (200.0, 3.1)]
    # at 100: 110 gives +2 (climbing); at 110: 120 gives +0.05 < 0.1 -> plateau at 110
    assert plateau(curve, gain=0.1) == 110.0
    # with gain 0.01 every step within 10% adds 0.05 or more, and 130 has no point
    # within 10% after it: still climbing as far as the curve can tell
    assert plateau(curve, gain=0.01) is None
    assert plateau([(100.0, 1.0), (110.0, 2.0)], gain=0.1) is None


def test_the_plateau_of_trials_is_past_the_last_climb() -> None:
    # mean over 5 trials; wins at 100 and 300, nothing after: flat from 300 on
    trials = [(1.0, 100.0), (0.0, 200.0), (1.0, 300.0), (0.0, 400.0), (0.0, 1000.0)]
    assert plateau_of(trials, gain=0.01) == 300.0
    # a win of 0.1 (0.5 / 5) counts only when the gain asked is at most 0.1
    trials = [(1.0, 100.0), (0.5, 300.0), (0.0, 400.0), (0.0, 500.0), (0.0, 600.0)]
    assert plateau_of(trials, gain=0.1) == 300.0
    assert plateau_of(trials, gain=0.2) == 100.0
    # the last win at the largest expenditure: still climbing
    assert plateau_of([(0.0, 10.0), (1.0, 20.0)], gain=0.01) is None
    # nothing won: flat from the first expenditure; no trials: nothing to say
    assert plateau_of([(0.0, 10.0), (0.0, 20.0)], gain=0.01) == 10.0
    assert plateau_of([], gain=0.01) is None


def test_the_plateau_window_is_ten_percent_wide_and_no_wider() -> None:
    # at 100, 10% more reaches 109 (both wins: +0.5) but not 110 (one win: +0.25)
    assert plateau_of([(0.0, 50.0), (1.0, 100.0), (1.0, 109.0), (0.0, 200.0)], gain=0.5) == 100.0
    assert plateau_of([(0.0, 50.0), (1.0, 100.0), (1.0, 110.0), (0.0, 200.0)], gain=0.5) == 50.0

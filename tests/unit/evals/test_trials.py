"""results.jsonl: durable appends, torn lines, bad lines; a run's directory lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recursa.errors import UsageError
from recursa.evals.plan import Plan, TrialLimits
from recursa.evals.runner import _run_lock
from recursa.evals.trials import TrialResult, append_result, read_results


def result(item: str) -> TrialResult:
    return TrialResult(
        trial=f"m|repl|{item}",
        suite="s",
        item=item,
        task="t",
        length=0,
        model="m",
        policy="repl",
        seed=0,
        score=1.0,
        status="ok",
        answer="a",
        references=("a",),
        metric="exact_match",
        metrics={"exact_match": 1.0},
    )


def test_a_line_torn_by_a_crash_is_skipped_and_the_next_append_survives(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_result(path, result("one"))
    whole = path.read_text()
    path.write_text(whole + whole[: len(whole) // 2])  # a crash in the middle of a write
    assert [r.item for r in read_results(path)] == ["one"]
    append_result(path, result("two"))  # a resumed run goes on appending
    append_result(path, result("three"))
    assert [r.item for r in read_results(tmp_path)] == ["one", "two", "three"]
    assert read_results(path)[1].metrics == {"exact_match": 1.0}


@pytest.mark.parametrize("line", ['["a list"]', '{"trial": "x"}', "42"])
def test_json_that_is_not_a_result_is_one_line_naming_it(tmp_path: Path, line: str) -> None:
    path = tmp_path / "results.jsonl"
    append_result(path, result("one"))
    with path.open("a") as stream:
        stream.write(line + "\n")
    with pytest.raises(UsageError, match=r"results.jsonl:2: not a trial result"):
        read_results(path)


def test_one_run_at_a_time_in_a_directory(tmp_path: Path) -> None:
    with (
        _run_lock(tmp_path),
        pytest.raises(UsageError, match="another recursa eval is running"),
        _run_lock(tmp_path),
    ):
        pass
    with _run_lock(tmp_path):  # released with the first
        pass


@pytest.mark.parametrize(
    "limits",
    [TrialLimits(time=0), TrialLimits(tokens=0), TrialLimits(steps=0), TrialLimits(cost=0.0)],
)
def test_limits_that_would_stop_every_trial_are_refused(limits: TrialLimits) -> None:
    with pytest.raises(UsageError, match="limit must be"):
        Plan(suite="s", models=("m",), limits=limits)


def test_plan_json_round_trips() -> None:
    plan = Plan(suite="s", models=("m",), limits=TrialLimits(tokens=5, cost=0.5))
    assert json.loads(plan.to_json())["limits"] == {
        "tokens": 5,
        "cost": 0.5,
        "time": 600.0,
        "steps": None,
    }

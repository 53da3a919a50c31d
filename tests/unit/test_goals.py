"""Goals as pure decisions, and the goal and schedule tables of the store
(schema v5): usage toward a goal, counted from the log, across a reopen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recursa.control.goals import (
    GoalContinue,
    GoalStop,
    GoalView,
    after_turn,
    check_budget,
    check_objective,
    continuation,
    first_prompt,
    remaining,
)
from recursa.errors import NotFound
from recursa.protocol.events import ModelUsage
from recursa.store import Store

ACTIVE = GoalView("ship the release notes", "active", budget=1000, used=400)


def usage(tokens_in: int, tokens_out: int) -> ModelUsage:
    return ModelUsage(model="faux/x", input_tokens=tokens_in, output_tokens=tokens_out)


# -- decisions ---------------------------------------------------------------------------


def test_an_answered_turn_is_continued_with_the_objective_and_the_budget_left() -> None:
    decision = after_turn(ACTIVE, "answered", waiting=False)
    assert isinstance(decision, GoalContinue)
    assert "ship the release notes" in decision.prompt
    assert "600 of 1,000 left" in decision.prompt
    assert "await goal.complete()" in decision.prompt


def test_per_turn_limits_do_not_end_a_goal() -> None:
    for reason in ("max_steps", "max_tokens", "max_time"):
        assert isinstance(after_turn(ACTIVE, reason, waiting=False), GoalContinue)


def test_a_spent_budget_stops_the_goal_before_anything_else() -> None:
    spent = GoalView("x", "active", budget=1000, used=1000)
    decision = after_turn(spent, "provider_error", waiting=True)
    assert isinstance(decision, GoalStop)
    assert decision.status == "exhausted"
    assert "1,000 of 1,000 tokens" in decision.notice


def test_a_failed_turn_pauses_the_goal() -> None:
    for reason in ("provider_error", "internal_error", "budget", "stuck", "empty_reply"):
        decision = after_turn(ACTIVE, reason, waiting=False)
        assert isinstance(decision, GoalStop)
        assert decision.status == "paused"
        assert reason in decision.notice


def test_waiting_input_interrupts_and_inactive_goals_are_left_alone() -> None:
    assert after_turn(ACTIVE, "answered", waiting=True) is None
    assert after_turn(ACTIVE, "interrupted", waiting=False) is None
    for status in ("paused", "completed", "exhausted", "cleared"):
        goal = GoalView("x", status, budget=None, used=0)  # type: ignore[arg-type]
        assert after_turn(goal, "answered", waiting=False) is None


def test_prompts_without_a_budget_say_so() -> None:
    free = GoalView("count the stars", "active", budget=None, used=1234)
    assert remaining(free) is None
    assert "No token budget is set (1,234 tokens used so far)" in continuation(free)
    assert first_prompt(free).startswith("You have a goal: count the stars")
    assert remaining(GoalView("x", "active", budget=10, used=50)) == 0


def test_objectives_and_budgets_are_checked() -> None:
    assert check_objective("  tidy up  ") == "tidy up"
    with pytest.raises(ValueError, match="empty"):
        check_objective(" ")
    with pytest.raises(ValueError, match="longer than"):
        check_objective("x" * 5000)
    assert check_budget(None) is None
    assert check_budget(5000.0) == 5000
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="budget"):
            check_budget(bad)


# -- the store ---------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "recursa.db") as s:
        yield s


def test_usage_toward_a_goal_counts_the_subtree_since_it_was_set(store: Store) -> None:
    root = store.create_session(model="faux/x", cwd="/", workspace="/").id
    child = store.create_session(model="faux/x", cwd="/", workspace="/", parent_id=root).id
    store.append(root, usage(100, 10))  # before the goal: not counted
    goal = store.goals.create(root, "objective", budget=500)
    store.append(root, usage(20, 5))
    store.append(child, usage(30, 5))  # a sub-agent's call counts too
    assert store.goals.used(store.goals.get(goal.id)) == 60
    paused = store.goals.change(goal.id, "paused")
    store.append(root, usage(100, 0))  # a pause does not stop the count
    assert store.goals.used(paused) == 160
    done = store.goals.change(goal.id, "completed")
    assert (done.spent, done.since_seq) == (160, None)
    store.append(root, usage(1000, 0))  # after its end: not counted
    assert store.goals.used(store.goals.get(done.id)) == 160


def test_a_new_goal_replaces_the_current_one_and_cleared_means_none(store: Store) -> None:
    sid = store.create_session(model="faux/x", cwd="/", workspace="/").id
    first = store.goals.create(sid, "first", budget=None)
    second = store.goals.create(sid, "second \udcff", budget=10)  # a lone surrogate survives
    current = store.goals.current(sid)
    assert current is not None and current.id == second.id
    assert current.objective == "second \udcff"
    assert store.goals.get(first.id).status == "cleared"
    assert [g.id for g in store.goals.active()] == [second.id]
    store.goals.change(second.id, "cleared", "by a person")
    assert store.goals.current(sid) is None
    assert [g.status for g in store.goals.history(sid)] == ["cleared", "cleared"]
    with pytest.raises(NotFound):
        store.goals.create("s-nope", "x", budget=None)


def test_goal_state_and_usage_survive_a_reopen(tmp_path: Path) -> None:
    with Store.open(tmp_path / "r.db") as s:
        sid = s.create_session(model="faux/x", cwd="/", workspace="/").id
        goal = s.goals.create(sid, "persist", budget=100)
        s.append(sid, usage(40, 2))
    with Store.open(tmp_path / "r.db") as s:
        again = s.goals.current(sid)
        assert again is not None and again.id == goal.id
        assert (again.status, again.budget, s.goals.used(again)) == ("active", 100, 42)


def test_a_claim_moves_a_job_once(store: Store) -> None:
    sid = store.create_session(model="faux/x", cwd="/", workspace="/").id
    job = store.schedules.add(sid, prompt="ping", spec="every 10m", mode="follow_up", next_at=1000)
    [due] = store.schedules.due(1000.0)
    assert store.schedules.claim(due, next_at=1600.0, missed=2, now=1005.0)
    assert not store.schedules.claim(due, next_at=1600.0, missed=2, now=1005.0)  # as read: gone
    moved = store.schedules.get(job.id)
    assert (moved.next_at, moved.fired, moved.missed, moved.last_at) == (1600.0, 1, 2, 1005.0)
    assert store.schedules.due(1599.0) == []
    assert store.schedules.next_due() == 1600.0
    [again] = store.schedules.due(1600.0)
    assert store.schedules.claim(again, next_at=None, missed=0, now=1600.0)
    assert store.schedules.get(job.id).status == "done"
    assert store.schedules.jobs(sid) == []
    assert [j.id for j in store.schedules.jobs(sid, finished=True)] == [job.id]

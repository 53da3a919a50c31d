"""Autonomous mode's pure decisions, its state's round trip, the workspace
fingerprint and the bounding of a gate's output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recursa.control.autonomous import (
    GateResult,
    Progress,
    RunContinue,
    RunState,
    RunStop,
    Spec,
    TurnOutcome,
    decide,
    first_failure,
    limit_reached,
    should_rerun,
)
from recursa.errors import UsageError
from recursa.protocol.wire import Autonomous, CreateSession, from_json, to_json
from recursa.runtime import autonomy
from recursa.runtime.autonomy import _Capture, fingerprint

GATE = "test -f done.txt"
ANSWERED = TurnOutcome(reason="answered", turn=1)


def failed(gate: str = GATE, output: str = "no such file", code: int = 1) -> GateResult:
    return GateResult(gate=gate, status="failed", exit_code=code, output=output, duration=0.25)


def passed(gate: str = GATE) -> GateResult:
    return GateResult(gate=gate, status="passed", exit_code=0, duration=0.1)


# -- decisions ----------------------------------------------------------------------


def test_every_gate_passing_is_success_and_says_so() -> None:
    spec = Spec(gates=("make", "make test"), max_turns=5)
    decision = decide(
        spec, Progress(turns=2), [passed("make"), passed("make test")], rerun=True, turn=ANSWERED
    )
    assert decision == RunStop("passed", "autonomous: gates passed (2/2)")
    assert decision.success


def test_a_failed_gate_continues_with_its_output_and_what_is_left() -> None:
    spec = Spec(gates=("make", GATE), max_turns=5, max_tokens=10_000)
    decision = decide(
        spec,
        Progress(turns=1, tokens=1234),
        [passed("make"), failed(output="missing done.txt\n")],
        rerun=True,
        turn=ANSWERED,
    )
    assert isinstance(decision, RunContinue)
    assert "(1/2 passed)" in decision.prompt
    assert f"Gate 2 of 2, `{GATE}`, failed (exit 1, 0.2 s)" in decision.prompt
    assert "Its output:\nmissing done.txt" in decision.prompt
    assert "1 turn of 5, 1,234 of 10,000 tokens" in decision.prompt


def test_an_unchanged_workspace_is_told_to_the_model() -> None:
    spec = Spec(gates=(GATE,), max_turns=5)
    decision = decide(spec, Progress(turns=2), [failed()], rerun=False, turn=ANSWERED)
    assert isinstance(decision, RunContinue)
    assert "has not changed since gate 1 of 1" in decision.prompt
    assert "not run again" in decision.prompt
    assert "Its output" not in decision.prompt


def test_a_reached_limit_is_never_success_even_after_an_answer() -> None:
    spec = Spec(gates=(GATE,), max_turns=5)
    decision = decide(spec, Progress(turns=5), [failed()], rerun=True, turn=ANSWERED)
    assert decision == RunStop(
        "max_turns", f"autonomous: stopped, max_turns 5 reached; gate {GATE!r} still failing"
    )
    assert not decision.success


def test_passing_on_the_last_allowed_turn_is_success() -> None:
    spec = Spec(gates=(GATE,), max_turns=1)
    decision = decide(spec, Progress(turns=1), [passed()], rerun=True, turn=ANSWERED)
    assert isinstance(decision, RunStop)
    assert decision.outcome == "passed"


@pytest.mark.parametrize(
    ("progress", "outcome", "phrase"),
    [
        (Progress(turns=1, tokens=5000), "max_tokens", "max_tokens 5,000 reached"),
        (Progress(turns=1, cost=0.75), "max_cost", "max_cost $0.5 reached"),
        (Progress(turns=1, elapsed=61), "max_time", "max_time 60 s reached (61 s elapsed)"),
    ],
)
def test_each_limit_of_the_run_stops_it(progress: Progress, outcome: str, phrase: str) -> None:
    spec = Spec(gates=(GATE,), max_tokens=5000, max_cost=0.5, max_time=60)
    decision = decide(spec, progress, [failed()], rerun=True, turn=ANSWERED)
    assert isinstance(decision, RunStop)
    assert decision.outcome == outcome
    assert phrase in decision.detail


def test_a_budget_refusal_names_the_limit_nearest_to_being_spent() -> None:
    spec = Spec(gates=(GATE,), max_tokens=10_000, max_time=600)
    progress = Progress(turns=1, tokens=9_800, elapsed=30)
    assert limit_reached(spec, progress) is None  # the counters alone are short
    name, phrase = limit_reached(spec, progress, budget_stopped=True) or ("", "")
    assert name == "max_tokens"
    assert "the next model call would not fit" in phrase
    budget = TurnOutcome(reason="budget", detail="the budget ... is exhausted")
    decision = decide(spec, progress, [failed()], rerun=True, turn=budget)
    assert isinstance(decision, RunStop)
    assert decision.outcome == "max_tokens"


def test_a_failed_turn_stops_the_run_with_its_reason() -> None:
    spec = Spec(gates=(GATE,), max_turns=5)
    turn = TurnOutcome(reason="provider_error", detail="server_error: 500\nupstream")
    decision = decide(spec, Progress(turns=1), [failed()], rerun=True, turn=turn)
    assert decision == RunStop(
        "error",
        "autonomous: stopped, the last turn ended with provider_error (server_error: 500 "
        f"upstream); gate {GATE!r} still failing",
    )


def test_a_timed_out_gate_is_reported_as_such() -> None:
    spec = Spec(gates=("pytest",), max_turns=1)
    timeout = GateResult(gate="pytest", status="timeout", output="...", duration=600)
    decision = decide(spec, Progress(turns=1), [timeout], rerun=True, turn=ANSWERED)
    assert isinstance(decision, RunStop)
    assert decision.detail.endswith("gate 'pytest' still timing out")
    more = decide(Spec(gates=("pytest",)), Progress(turns=1), [timeout], rerun=True, turn=ANSWERED)
    assert isinstance(more, RunContinue)
    assert "timed out after 600 s and was killed" in more.prompt


def test_gates_never_run_count_as_failing() -> None:
    spec = Spec(gates=("a", "b"))
    assert first_failure(spec, [passed("a")]) == GateResult(
        gate="b", status="error", output="(not run)"
    )
    assert first_failure(spec, [passed("a"), passed("b")]) is None


def test_gates_rerun_unless_the_workspace_is_provably_unchanged() -> None:
    assert should_rerun(None, "abc")  # they never failed
    assert should_rerun("abc", None)  # no fingerprint now: cannot tell
    assert should_rerun("abc", "abd")
    assert not should_rerun("abc", "abc")


# -- the spec and the stored state ------------------------------------------------


def test_a_spec_checks_its_gates_and_limits() -> None:
    assert Spec(gates=(GATE,), max_turns=3).check().max_turns == 3
    with pytest.raises(UsageError, match="at least one --gate"):
        Spec(gates=()).check()
    with pytest.raises(UsageError, match="non-empty shell command"):
        Spec(gates=("  ",)).check()
    with pytest.raises(UsageError, match="--max-turns must be a positive"):
        Spec(gates=(GATE,), max_turns=0).check()
    with pytest.raises(UsageError, match="--max-cost must be a positive"):
        Spec(gates=(GATE,), max_cost=-1.0).check()


def test_a_spec_describes_itself_and_makes_its_budget() -> None:
    spec = Spec(gates=(GATE,), max_turns=5, max_tokens=1000, max_time=120)
    assert spec.describe() == (
        f"autonomous: until its gate passes ({GATE!r}); "
        "limits: max_turns 5, max_tokens 1,000, max_time 120 s"
    )
    assert spec.budget() == {"tokens": 1000, "cost": None, "time": 120}
    assert Spec(gates=(GATE,), max_turns=5).budget() is None  # turns are counted by the control
    intro = spec.introduction()
    assert f"- `{GATE}`" in intro
    assert "turns 5" in intro


def test_the_run_state_round_trips_through_json() -> None:
    spec = Spec(gates=("make", GATE), max_turns=4, max_cost=1.5, gate_timeout=30)
    state = RunState(
        spec=spec,
        turns=2,
        checked_turn=3,
        results=(passed("make"), failed()),
        fingerprint="f" * 32,
        started=1234.5,
    )
    assert RunState.from_json(state.to_json()) == state
    ended = state.ended(RunStop("max_turns", "autonomous: stopped, ..."))
    assert ended.status == "stopped"
    assert RunState.from_json(ended.to_json()) == ended
    assert RunState.from_json(None) is None
    assert RunState.from_json({"nonsense": 1}) is None


def test_the_wire_carries_an_autonomous_run() -> None:
    request = CreateSession(
        task="make it",
        autonomous=Autonomous(gates=("make", GATE), max_turns=3, max_cost=0.5, max_time=60.0),
    )
    assert from_json(CreateSession, to_json(request)) == request
    assert from_json(CreateSession, {"task": "x"}).autonomous is None


# -- the workspace fingerprint ----------------------------------------------------


def test_the_fingerprint_changes_with_the_files_and_only_with_them(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    first = fingerprint(tmp_path)
    assert first is not None
    assert fingerprint(tmp_path) == first
    (tmp_path / "src" / "a.py").write_text("x = 22\n")
    changed = fingerprint(tmp_path)
    assert changed != first
    (tmp_path / "b.txt").write_text("new")
    added = fingerprint(tmp_path)
    assert added != changed
    (tmp_path / "b.txt").unlink()
    assert fingerprint(tmp_path) == changed


def test_the_fingerprint_leaves_out_vcs_caches_and_harness_dirs(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    home = tmp_path / "home"
    home.mkdir()
    before = fingerprint(tmp_path, skip=[home])
    for name in (".git", "__pycache__", ".pytest_cache"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("churn")
    (home / "recursa.db").write_text("rows")
    assert fingerprint(tmp_path, skip=[home]) == before


def test_the_fingerprint_does_not_follow_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(outside, work / "link")
    before = fingerprint(work)
    (outside / "big.txt").write_text("not the workspace's")
    assert fingerprint(work) == before


def test_a_too_large_workspace_has_no_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autonomy, "FINGERPRINT_MAX_ENTRIES", 3)
    for i in range(4):
        (tmp_path / f"f{i}").write_text("x")
    assert fingerprint(tmp_path) is None
    assert fingerprint(tmp_path / "missing") is None


# -- a gate's output, bounded as it arrives ----------------------------------------


def test_short_output_is_kept_whole() -> None:
    capture = _Capture(keep=1000)
    capture.add(b"line 1\n\x1b[31mred\x1b[0m\n")
    assert capture.text(500) == ("line 1\nred\n", 11, False)


def test_output_over_the_limit_keeps_head_and_tail() -> None:
    capture = _Capture(keep=100_000)
    text = "".join(f"line {i:05d}\n" for i in range(5000))
    for i in range(0, len(text), 999):
        capture.add(text[i : i + 999].encode())
    shown, chars, truncated = capture.text(2000)
    assert truncated
    assert chars == len(text)
    assert len(shown) < 2200
    assert shown.startswith("line 00000\n")
    assert shown.endswith("line 04999\n")
    assert "characters omitted of 55,000" in shown


def test_output_past_what_is_kept_is_counted_not_held() -> None:
    capture = _Capture(keep=4000)
    lines = [f"line {i:07d}\n".encode() for i in range(200_000)]
    for line in lines:
        capture.add(line)
    total = sum(len(line) for line in lines)
    assert len(capture.head) == len(capture.tail) == 4000
    shown, chars, truncated = capture.text(1000)
    assert truncated
    assert chars == total
    assert len(shown) < 1200
    assert shown.startswith("line 0000000\n")
    assert shown.endswith("line 0199999\n")
    assert f"bytes omitted of {total:,}" in shown

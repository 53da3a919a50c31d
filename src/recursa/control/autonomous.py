"""Autonomous mode as pure decisions: an autonomous run's state, and what to
do after each of its turns.

An autonomous run goes on turn after turn until every *gate* passes (a shell
command that exits 0, checked after each turn) or a limit of the whole run
is reached: turns (counted here), tokens, cost and wall clock (kept by the
subtree budgets, :mod:`recursa.control.budget`). Gates run in order and
the first that fails ends the check, as ``&&`` would. A failed gate starts
another turn that shows the model the gate's bounded output; when the
workspace has not changed since a gate failed, the gate is not run again and
the model is told so.

:func:`decide` turns what happened (the gates' results, the turn's end, the
run's progress) into :class:`RunContinue` (a prompt for the next turn) or
:class:`RunStop` (an outcome and the one line that says exactly why). Only the
outcome ``passed`` is success: a reached limit never is, even when the last
turn answered. Nothing here runs a gate, reads a clock or touches the store;
the runtime does (:mod:`recursa.runtime.autonomy`).

The run's state is a plain JSON object (:meth:`RunState.to_json`), kept in
the session row's ``meta`` under :data:`META_KEY`, so a restarted daemon
carries on where the last one stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal, cast, get_args

from recursa.errors import UsageError, one_line
from recursa.protocol.events import AutonomousOutcome, GateStatus, TurnEndReason
from recursa.store import JSONValue

META_KEY = "autonomous"
"""Where a session row's ``meta`` keeps its autonomous run (:class:`RunState`)."""

DEFAULT_GATE_TIMEOUT = 600.0
"""Seconds a gate may run before it is killed and counted as failed."""

MAX_GATES = 16
MAX_GATE_CHARS = 4000
"""A gate is a command line, not a script: write a script and gate on it."""

RunStatus = Literal["running", "passed", "stopped"]

LimitName = Literal["max_turns", "max_tokens", "max_cost", "max_time"]

TURN_FAILURES: frozenset[TurnEndReason] = frozenset({"provider_error", "internal_error"})
"""A turn that ended so stops the run: another turn would most likely fail the same way."""


@dataclass(frozen=True, slots=True)
class Spec:
    """What an autonomous run was asked for. Limits are over the whole run; None: no limit."""

    gates: tuple[str, ...]
    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_time: float | None = None
    gate_timeout: float = DEFAULT_GATE_TIMEOUT

    def check(self) -> Spec:
        """This spec, or a one-line :class:`UsageError` saying what is wrong with it."""
        if not self.gates:
            raise UsageError("--autonomous needs at least one --gate COMMAND")
        if len(self.gates) > MAX_GATES:
            raise UsageError(f"at most {MAX_GATES} gates")
        for gate in self.gates:
            if not isinstance(gate, str) or not gate.strip():
                raise UsageError("a gate must be a non-empty shell command")
            if len(gate) > MAX_GATE_CHARS or "\x00" in gate:
                raise UsageError(
                    f"a gate is one command line of at most {MAX_GATE_CHARS} characters"
                )
        for name in ("max_turns", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise UsageError(f"--{name.replace('_', '-')} must be a positive whole number")
        for name in ("max_cost", "max_time", "gate_timeout"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise UsageError(f"--{name.replace('_', '-')} must be a positive number")
        return self

    def to_json(self) -> dict[str, JSONValue]:
        return {**asdict(self), "gates": list(self.gates)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Spec:
        gates = data.get("gates")
        return cls(
            gates=tuple(g for g in gates if isinstance(g, str)) if isinstance(gates, list) else (),
            max_turns=_int(data.get("max_turns")),
            max_tokens=_int(data.get("max_tokens")),
            max_cost=_float(data.get("max_cost")),
            max_time=_float(data.get("max_time")),
            gate_timeout=_float(data.get("gate_timeout")) or DEFAULT_GATE_TIMEOUT,
        )

    def budget(self) -> dict[str, JSONValue] | None:
        """The subtree budget (session meta ``budget``) that keeps the run's tokens,
        cost and time: the subtree budgets refuse a model call that would not fit."""
        values: dict[str, JSONValue] = {
            "tokens": self.max_tokens,
            "cost": self.max_cost,
            "time": self.max_time,
        }
        return values if any(v is not None for v in values.values()) else None

    def describe(self) -> str:
        """One line: the gates and the limits (the notice that starts a run)."""
        gates = ", ".join(repr(g) for g in self.gates)
        limits = [
            f"{name} {_amount(name, value)}" for name, value in self._limits() if value is not None
        ]
        which = "its gate passes" if len(self.gates) == 1 else f"all {len(self.gates)} gates pass"
        return f"autonomous: until {which} ({gates}); " + (
            "limits: " + ", ".join(limits) if limits else "no limits"
        )

    def introduction(self) -> str:
        """What the model is told with the task: how the run ends."""
        gates = "\n".join(f"- `{gate}`" for gate in self.gates)
        limits = [
            f"{name.removeprefix('max_')} {_amount(name, value)}"
            for name, value in self._limits()
            if value is not None
        ]
        bound = f" It stops without success at its limits: {', '.join(limits)}." if limits else ""
        return (
            "This is an autonomous run. After each of your turns these gates run, in order, "
            f"as shell commands in your working directory:\n{gates}\n"
            "The run ends when every gate exits 0. While one fails, you get its output "
            f"and another turn.{bound} Work until the gates pass; your answer alone does not "
            "end the run."
        )

    def _limits(self) -> list[tuple[LimitName, float | None]]:
        return [
            ("max_turns", self.max_turns),
            ("max_tokens", self.max_tokens),
            ("max_cost", self.max_cost),
            ("max_time", self.max_time),
        ]


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate, as run after a turn. ``output`` is bounded (head and tail);
    ``chars`` is the full output's size."""

    gate: str
    status: GateStatus
    exit_code: int | None = None
    output: str = ""
    chars: int = 0
    truncated: bool = False
    duration: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict[str, JSONValue]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> GateResult:
        status = data.get("status")
        return cls(
            gate=str(data.get("gate", "")),
            status=cast(GateStatus, status) if status in get_args(GateStatus) else "error",
            exit_code=_int(data.get("exit_code")),
            output=str(data.get("output", "")),
            chars=_int(data.get("chars")) or 0,
            truncated=data.get("truncated") is True,
            duration=_float(data.get("duration")) or 0.0,
        )


@dataclass(frozen=True, slots=True)
class RunState:
    """An autonomous run as the session row keeps it.

    ``turns``: turns checked so far; ``checked_turn``: the number of the last
    turn checked (a turn is checked once, even across a restart);
    ``results``: the last gates that ran; ``fingerprint``: the workspace as it
    was when those gates failed (None: they passed, or it could not be taken);
    ``started``: when the run began (the store's clock, unix seconds).
    """

    spec: Spec
    status: RunStatus = "running"
    turns: int = 0
    checked_turn: int = 0
    results: tuple[GateResult, ...] = ()
    fingerprint: str | None = None
    outcome: AutonomousOutcome | None = None
    detail: str = ""
    started: float = 0.0

    def to_json(self) -> dict[str, JSONValue]:
        return {
            **asdict(self),
            "spec": self.spec.to_json(),
            "results": [r.to_json() for r in self.results],
        }

    @classmethod
    def from_json(cls, data: object) -> RunState | None:
        """The state stored in a row's meta; None when there is none (or it is unreadable)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("spec"), Mapping):
            return None
        status = data.get("status")
        outcome = data.get("outcome")
        results = data.get("results")
        fingerprint = data.get("fingerprint")
        return cls(
            spec=Spec.from_json(data["spec"]),
            status=cast(RunStatus, status) if status in get_args(RunStatus) else "stopped",
            turns=_int(data.get("turns")) or 0,
            checked_turn=_int(data.get("checked_turn")) or 0,
            results=tuple(GateResult.from_json(r) for r in results if isinstance(r, Mapping))
            if isinstance(results, list)
            else (),
            fingerprint=fingerprint if isinstance(fingerprint, str) else None,
            outcome=cast(AutonomousOutcome, outcome)
            if outcome in get_args(AutonomousOutcome)
            else None,
            detail=str(data.get("detail", "")),
            started=_float(data.get("started")) or 0.0,
        )

    def ended(self, stop: RunStop) -> RunState:
        return replace(
            self,
            status="passed" if stop.outcome == "passed" else "stopped",
            outcome=stop.outcome,
            detail=stop.detail,
        )


@dataclass(frozen=True, slots=True)
class Progress:
    """What the run has used: turns (this one included), tokens and cost over the
    session's whole subtree, and seconds since it started."""

    turns: int
    tokens: int = 0
    cost: float = 0.0
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class RunContinue:
    """Start another turn with ``prompt`` (a ``gate`` input)."""

    prompt: str


@dataclass(frozen=True, slots=True)
class RunStop:
    """End the run. ``detail`` is the one line that says exactly why."""

    outcome: AutonomousOutcome
    detail: str

    @property
    def success(self) -> bool:
        return self.outcome == "passed"


Decision = RunContinue | RunStop


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How the turn the gates follow ended (``budget``: a subtree budget refused a call)."""

    reason: TurnEndReason
    detail: str = ""
    turn: int = 0


def should_rerun(failed_at: str | None, now: str | None) -> bool:
    """Whether to run the gates again: always, unless they failed before and the
    workspace is provably unchanged since (both fingerprints taken, and equal)."""
    return failed_at is None or now is None or failed_at != now


def first_failure(spec: Spec, results: Sequence[GateResult]) -> GateResult | None:
    """The gate that keeps the run from passing (None: every gate passed)."""
    for result in results:
        if not result.passed:
            return result
    if len(results) < len(spec.gates):  # never run: counts as failing, and says so
        return GateResult(gate=spec.gates[len(results)], status="error", output="(not run)")
    return None


def limit_reached(
    spec: Spec, progress: Progress, *, budget_stopped: bool = False
) -> tuple[LimitName, str] | None:
    """The first limit of the run that is reached, as ``(name, phrase)``.

    ``budget_stopped``: a subtree budget refused a model call of the last turn. Its
    reservations run ahead of what is spent, so the counters may all still be
    short of their limits; the limit that is then reported is the one nearest
    to being spent."""
    if spec.max_turns is not None and progress.turns >= spec.max_turns:
        return "max_turns", f"max_turns {spec.max_turns} reached"
    measures: list[tuple[LimitName, float | None, float, str]] = [
        ("max_tokens", spec.max_tokens, progress.tokens, f"{progress.tokens:,} tokens used"),
        ("max_cost", spec.max_cost, progress.cost, f"${progress.cost:.4f} spent"),
        ("max_time", spec.max_time, progress.elapsed, f"{progress.elapsed:.0f} s elapsed"),
    ]
    limited = [
        (name, limit, used, what) for name, limit, used, what in measures if limit is not None
    ]
    for name, limit, used, what in limited:
        if used >= limit:
            return name, f"{name} {_amount(name, limit)} reached ({what})"
    if not budget_stopped or not limited:
        return None
    name, limit, _, what = max(limited, key=lambda measure: measure[2] / measure[1])
    if name != "max_time":
        what += "; the next model call would not fit"
    return name, f"{name} {_amount(name, limit)} reached ({what})"


def decide(
    spec: Spec,
    progress: Progress,
    results: Sequence[GateResult],
    *,
    rerun: bool,
    turn: TurnOutcome,
) -> Decision:
    """What follows a turn of the run: the gates' ``results`` (fresh when ``rerun``,
    else those of the last check, not run again), the turn's end, the progress.

    In order: every gate passed → stop, success; the turn failed (provider or
    internal error) → stop; a limit is reached → stop; else continue with a
    prompt that shows the failing gate."""
    total = len(spec.gates)
    failing = first_failure(spec, results)
    if failing is None:
        return RunStop("passed", f"autonomous: gates passed ({total}/{total})")
    still = _still_failing(spec, results, failing)
    if turn.reason in TURN_FAILURES:
        why = f"the last turn ended with {turn.reason}"
        if turn.detail:
            why += f" ({one_line(turn.detail, limit=200)})"
        return RunStop("error", f"autonomous: stopped, {why}; {still}")
    limit = limit_reached(spec, progress, budget_stopped=turn.reason == "budget")
    if limit is not None:
        name, phrase = limit
        return RunStop(name, f"autonomous: stopped, {phrase}; {still}")
    return RunContinue(continuation(spec, progress, results, failing, rerun=rerun))


def continuation(
    spec: Spec,
    progress: Progress,
    results: Sequence[GateResult],
    failing: GateResult,
    *,
    rerun: bool,
) -> str:
    """The message that starts the next turn: what failed, and what is left."""
    total = len(spec.gates)
    index = spec.gates.index(failing.gate) + 1 if failing.gate in spec.gates else len(results)
    passed = sum(1 for r in results if r.passed)
    lines: list[str] = []
    if rerun:
        lines.append(
            f"The end-condition gates have not passed yet ({passed}/{total} passed). "
            f"Gate {index} of {total}, `{failing.gate}`, {_status_phrase(failing)}."
        )
        output = failing.output.strip()
        lines.append("Its output:\n" + output if output else "It printed nothing.")
    else:
        lines.append(
            f"The workspace has not changed since gate {index} of {total}, `{failing.gate}`, "
            f"{_status_phrase(failing)}, so it was not run again: its output is the same as "
            "before. Change the files it checks before you end your turn."
        )
    lines.append(
        "Keep working until it passes: every gate runs again after your next turn, "
        f"and the run ends when all of them pass. Used so far: {_usage(spec, progress)}."
    )
    return "\n".join(lines)


# ------------------------------------------------------------------ helpers


def _still_failing(spec: Spec, results: Sequence[GateResult], failing: GateResult) -> str:
    passed = sum(1 for r in results if r.passed)
    count = f" ({passed}/{len(spec.gates)} passed)" if len(spec.gates) > 1 else ""
    verb = "still timing out" if failing.status == "timeout" else "still failing"
    return f"gate {failing.gate!r} {verb}{count}"


def _status_phrase(result: GateResult) -> str:
    match result.status:
        case "failed":
            return f"failed (exit {result.exit_code}, {result.duration:.1f} s)"
        case "timeout":
            return f"timed out after {result.duration:.0f} s and was killed"
        case "error":
            return f"could not be run ({one_line(result.output, limit=200) or 'no reason given'})"
        case "skipped":
            return "was not run again"
        case _:
            return "passed"


def _usage(spec: Spec, progress: Progress) -> str:
    parts = [
        f"{_plural(progress.turns, 'turn')}"
        + (f" of {spec.max_turns}" if spec.max_turns is not None else "")
    ]
    if spec.max_tokens is not None:
        parts.append(f"{progress.tokens:,} of {spec.max_tokens:,} tokens")
    if spec.max_cost is not None:
        parts.append(f"${progress.cost:.4f} of ${spec.max_cost:.4g}")
    if spec.max_time is not None:
        parts.append(f"{progress.elapsed:.0f} s of {spec.max_time:.0f} s")
    return ", ".join(parts)


def _amount(name: LimitName, value: float) -> str:
    if name == "max_cost":
        return f"${value:.4g}"
    if name == "max_time":
        return f"{value:.0f} s"
    return f"{int(value):,}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


__all__ = [
    "DEFAULT_GATE_TIMEOUT",
    "MAX_GATES",
    "META_KEY",
    "TURN_FAILURES",
    "Decision",
    "GateResult",
    "LimitName",
    "Progress",
    "RunContinue",
    "RunState",
    "RunStatus",
    "RunStop",
    "Spec",
    "TurnOutcome",
    "continuation",
    "decide",
    "first_failure",
    "limit_reached",
    "should_rerun",
]

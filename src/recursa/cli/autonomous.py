"""``recursa run --autonomous``: the flags checked into a plan, the last word
on how the run ended, and its exit code (0 only when every gate passed)."""

from __future__ import annotations

from recursa.cli.exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    EXIT_NO_PROGRESS,
    EXIT_OK,
)
from recursa.errors import ProviderError, UsageError
from recursa.protocol.events import AutonomousEnded, TurnEnded
from recursa.protocol.wire import Autonomous

EXIT_BY_REASON = {  # a turn's end reason → the exit code of recursa run
    "answered": EXIT_OK,
    "provider_error": ProviderError.exit_code,
    "max_steps": EXIT_LIMIT,
    "max_tokens": EXIT_LIMIT,
    "max_time": EXIT_LIMIT,
    "budget": EXIT_LIMIT,
    "empty_reply": EXIT_NO_PROGRESS,
    "stuck": EXIT_NO_PROGRESS,
    "interrupted": EXIT_INTERRUPTED,
    "internal_error": EXIT_FAILED,
}


def plan(
    autonomous: bool,
    gates: list[str] | None,
    max_turns: int | None,
    max_tokens: int | None,
    max_cost: float | None,
    max_time: str | None,
    gate_timeout: str | None,
    interactive: bool,
) -> Autonomous | None:
    """The autonomous run the flags ask for (None: not autonomous), or a UsageError."""
    if not autonomous:
        given = [
            flag
            for flag, value in (
                ("--gate", gates),
                ("--max-turns", max_turns),
                ("--max-cost", max_cost),
                ("--gate-timeout", gate_timeout),
            )
            if value
        ]
        if given:
            raise UsageError(f"{', '.join(given)} needs --autonomous")
        return None
    if interactive:
        raise UsageError("--autonomous runs on its own: it takes no --interactive")
    if not gates:
        raise UsageError("--autonomous needs at least one --gate COMMAND")
    from recursa.config import parse_duration  # an autonomous run only

    return Autonomous(
        gates=tuple(gates),
        max_turns=max_turns or None,
        max_tokens=max_tokens or None,
        max_cost=max_cost or None,
        max_time=parse_duration(max_time, key="--max-time") if max_time is not None else None,
        gate_timeout=parse_duration(gate_timeout, key="--gate-timeout")
        if gate_timeout is not None
        else None,
    )


def exit_code(end: AutonomousEnded | None, last: TurnEnded | None) -> int:
    """0 only when the gates passed; a reached limit is 8; a failed turn exits by
    its reason; a run that did not end (interrupted, detached) by its last turn,
    never 0."""
    if end is not None and end.outcome == "passed":
        return EXIT_OK
    if end is not None and end.outcome != "error":
        return EXIT_LIMIT
    code = EXIT_BY_REASON.get(last.reason, EXIT_FAILED) if last is not None else EXIT_FAILED
    return code or EXIT_FAILED


def last_word(
    session_id: str, run_end: AutonomousEnded | None, end: TurnEnded | None
) -> tuple[str, dict[str, object]]:
    """The last word on an autonomous run: exactly why it ended, or that it has
    not (its turn was interrupted: it goes on with the next message); and its
    outcome for the JSON result line."""
    if run_end is not None:
        line = run_end.detail
    else:
        why = f"the last turn ended ({end.reason})" if end is not None else "no turn ended"
        line = f"autonomous: not finished, {why}; it goes on with: recursa send {session_id} TEXT"
    outcome: dict[str, object] = {
        "outcome": run_end.outcome if run_end else None,
        "passed": run_end is not None and run_end.outcome == "passed",
        "turns": run_end.turns if run_end else None,
    }
    return line, outcome


__all__ = ["EXIT_BY_REASON", "EXIT_LIMIT", "exit_code", "last_word", "plan"]

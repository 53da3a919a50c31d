"""Reading a session back from its log: the context, the counters, and the
work a crash cut short.

:func:`read_log` applies every stored event to the conversation and returns
what the session object needs to go on: its turn and cell counters, its last
turn's end and answer, its status, and the :class:`Cut` (a turn started and
never ended, with its cells that never finished; or inputs delivered and
never answered). A cell whose result was lost is never run again: it is
closed with :func:`lost_results`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from recursa.protocol.events import (
    CellFinished,
    CellStarted,
    EventRecord,
    SessionStatus,
    StatusChanged,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.session.context import Conversation

LOST_CELL = (
    "the daemon stopped while this cell ran: its result was lost, and it was not run again. "
    "Check its effects before relying on them."
)


@dataclass(frozen=True, slots=True)
class Cut:
    """Work the log shows as begun and never finished: a turn that started and
    never ended (``turn``, with the cells that never finished), or inputs that
    were delivered and never answered (``turn`` None: a turn must start)."""

    turn: int | None
    lost: tuple[CellStarted, ...] = ()


@dataclass(slots=True)
class Replayed:
    """What a session's log says about it (None or 0: the log does not say)."""

    turns: int = 0
    cells: int = 0
    last_end: TurnEnded | None = None
    last_answer: str | None = None
    last_activity: float = 0.0
    status: SessionStatus | None = None
    cut: Cut | None = None


def read_log(records: Iterable[EventRecord], conversation: Conversation) -> Replayed:
    """Apply every record to ``conversation`` and read the session's state from them."""
    state = Replayed()
    cut_turn: int | None = None
    unanswered = False
    running: dict[int, CellStarted] = {}
    for record in records:
        event = record.event
        conversation.apply(event, record.seq)
        state.last_activity = record.ts
        match event:
            case UserInput(mode="turn") if cut_turn is None:
                unanswered = True
            case TurnStarted(turn=turn):
                state.turns = max(state.turns, turn)
                cut_turn, running, unanswered = turn, {}, False
            case TurnEnded():
                cut_turn, running = None, {}
                state.last_end = event
                if event.answer is not None:
                    state.last_answer = event.answer
            case CellStarted(cell=cell):
                state.cells = max(state.cells, cell)
                running[cell] = event
            case CellFinished(cell=cell):
                state.cells = max(state.cells, cell)
                running.pop(cell, None)
            case StatusChanged(status=status):
                state.status = status
            case _:
                pass
    if cut_turn is not None:
        state.cut = Cut(cut_turn, tuple(running.values()))
    elif unanswered:
        state.cut = Cut(None)
    return state


def lost_results(cut: Cut) -> list[CellFinished]:
    """The results that close the cells a crash cut short (never run again)."""
    return [
        CellFinished(
            cell=started.cell,
            call_id=started.call_id,
            status="interrupted",
            output=LOST_CELL,
            chars=len(LOST_CELL),
        )
        for started in cut.lost
    ]


__all__ = ["LOST_CELL", "Cut", "Replayed", "lost_results", "read_log"]

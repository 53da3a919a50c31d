"""A session's events as readable blocks: what the session pane shows.

Pure. A :class:`Blocks` takes :class:`~recursa.protocol.events.EventRecord`\\ s
in order (:meth:`Blocks.add`) and keeps a list of :class:`Block`\\ s: one per
thing a person reads (an input, the assistant's text, a cell with its code and
output, a compaction, a gate, a harness edit, a turn's end, ...). A cell's
``cell_started`` and ``cell_finished`` make one block; the transient pieces
(``text_delta``, ``cell_output``, seq 0) are appended to the open block of
their kind while it streams, and the stored event that completes it replaces
what was streamed. :meth:`Blocks.add` returns the indexes of the blocks it
created or changed, so a view redraws only those.

Texts here are plain strings from the model and its kernel: a renderer must
treat them as text, never as markup.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from recursa.protocol.events import (
    AssistantReply,
    AutonomousEnded,
    CellFinished,
    CellOutput,
    CellStarted,
    Compacted,
    EventRecord,
    GateChecked,
    InboxRead,
    InputPlaced,
    KernelStatus,
    ModelRetry,
    ModelUsage,
    Notice,
    SessionCreated,
    StatusChanged,
    TextDelta,
    TurnEnded,
    TurnStarted,
    UserInput,
)

BlockKind = Literal[
    "input",
    "assistant",
    "cell",
    "compaction",
    "gate",
    "harness",
    "notice",
    "turn_end",
    "meta",
]
"""``meta``: a one-line fact (turn started, status, kernel, session created)."""

NameOf = Callable[[str], str]
"""A session's name for a person, from its id (senders are ids)."""

FOLD_LINES = 20
"""Lines of a long text shown before ``… N more lines``."""

_HARNESS_NOTICE = re.compile(r"^harness: .*\(([^()\s]+)\)\s*$", re.DOTALL)


@dataclass(slots=True)
class Block:
    """One readable piece of a session's history.

    ``title`` is one line; ``body`` the text under it (an input, the reply, a
    summary, an answer); a cell's ``code`` and ``output`` are kept apart so the
    code can be highlighted. ``seqs`` are the stored events it shows (empty
    while only streamed pieces made it). ``open``: more streamed pieces may
    still come. ``entry_id``: the harness entry a harness notice is about."""

    kind: BlockKind
    title: str
    ts: float
    body: str = ""
    code: str | None = None
    output: str = ""
    status: str = ""
    detail: str = ""
    seqs: list[int] = field(default_factory=list)
    open: bool = False
    entry_id: str | None = None
    call_id: str | None = None
    cell: int = 0

    @property
    def seq(self) -> int:
        """The first stored event shown (0: none yet)."""
        return self.seqs[0] if self.seqs else 0

    @property
    def foldable(self) -> bool:
        return line_count(self.body) > FOLD_LINES or line_count(self.output) > FOLD_LINES


def line_count(text: str) -> int:
    return len(text.splitlines())


def fold(text: str, lines: int = FOLD_LINES) -> tuple[str, int]:
    """``text`` cut to its first ``lines`` lines, and how many lines were left out."""
    split = text.splitlines()
    if len(split) <= lines:
        return text, 0
    return "\n".join(split[:lines]), len(split) - lines


def _input_title(event: UserInput, name_of: NameOf) -> str:
    mode = "steer" if event.mode == "steer" else "turn"
    match event.source:
        case "user":
            who = "person"
        case "schedule":
            who = "schedule tick"
        case "goal":
            who = "goal continuation"
        case "gate":
            who = "gate result"
        case "system":
            who = "system"
        case source:
            who = f"{source} {name_of(event.sender)}" if event.sender else source
    return f"▶ {who} · {mode}"


def _usage_line(event: ModelUsage) -> str:
    cost = f" · ${event.cost:.4f}" if event.cost is not None else ""
    guess = " (estimated)" if event.estimated else ""
    return f"{event.model}: {event.input_tokens} in · {event.output_tokens} out{cost}{guess}"


class Blocks:
    """The blocks of one session's events, built incrementally (see the module
    docstring). Records may be given in any batches but in seq order; a stored
    record already seen is ignored."""

    def __init__(self, name_of: NameOf | None = None) -> None:
        self.name_of: NameOf = name_of or str
        self.items: list[Block] = []
        self._seen: set[int] = set()
        self._cells: dict[str, int] = {}  # call_id -> index of its open cell block
        self._reply: int | None = None  # index of the reply streaming now

    def extend(self, records: Iterable[EventRecord]) -> set[int]:
        changed: set[int] = set()
        for record in records:
            changed |= self.add(record)
        return changed

    def add(self, record: EventRecord) -> set[int]:
        """Take one record; the indexes of the blocks it created or changed."""
        if record.seq:
            if record.seq in self._seen:
                return set()
            self._seen.add(record.seq)
        event = record.event
        match event:
            case TextDelta():
                return self._delta(record, event)
            case CellOutput():
                return self._cell_piece(event)
            case AssistantReply():
                return self._reply_done(record, event)
            case CellStarted():
                title = f"cell {event.cell}"
                index = self._open_cell_for(event.call_id)
                if index is None:
                    index = self._new(record, "cell", title, open=True)
                    self._cells[event.call_id] = index
                block = self.items[index]
                block.code, block.call_id, block.cell = event.code, event.call_id, event.cell
                return {index}
            case CellFinished():
                return self._cell_done(record, event)
            case ModelUsage():
                return self._usage(event)
        kind, title, body = _one_off(event, self.name_of)
        index = self._new(record, kind, title, body=body)
        if isinstance(event, Notice):
            found = _HARNESS_NOTICE.match(event.text)
            self.items[index].entry_id = found.group(1) if found else None
        return {index}

    # -- the pieces ----------------------------------------------------------------------------

    def _new(
        self, record: EventRecord, kind: BlockKind, title: str, body: str = "", open: bool = False
    ) -> int:
        block = Block(kind, title, record.ts, body=body, open=open)
        if record.seq:
            block.seqs.append(record.seq)
        self.items.append(block)
        return len(self.items) - 1

    def _delta(self, record: EventRecord, event: TextDelta) -> set[int]:
        if self._reply is None:
            self._reply = self._new(record, "assistant", "assistant", open=True)
        self.items[self._reply].body += event.text
        return {self._reply}

    def _reply_done(self, record: EventRecord, event: AssistantReply) -> set[int]:
        index, self._reply = self._reply, None
        title = "assistant · cut off at the output limit" if event.cut_off else "assistant"
        if not event.text.strip():
            if index is not None and index == len(self.items) - 1:
                # Only code was streamed as text (tool calls): the cells show it.
                self.items.pop()
                return {index}
            return set()
        if index is None:
            index = self._new(record, "assistant", title)
        block = self.items[index]
        block.title, block.body, block.open = title, event.text, False
        if record.seq:
            block.seqs.append(record.seq)
        return {index}

    def _usage(self, event: ModelUsage) -> set[int]:
        # A turn's call is shown on the reply it produced; calls outside the
        # context (summaries, refinements) only count in the usage pane.
        if event.step == 0 or not self.items:
            return set()
        for index in range(len(self.items) - 1, max(-1, len(self.items) - 4), -1):
            if self.items[index].kind == "assistant" and not self.items[index].detail:
                self.items[index].detail = _usage_line(event)
                return {index}
        return set()

    def _open_cell_for(self, call_id: str) -> int | None:
        index = self._cells.get(call_id)
        return index if index is not None and self.items[index].open else None

    def _cell_piece(self, event: CellOutput) -> set[int]:
        for index in reversed(self._cells.values()):
            block = self.items[index]
            if block.open and block.cell == event.cell:
                block.output += event.text
                return {index}
        return set()

    def _cell_done(self, record: EventRecord, event: CellFinished) -> set[int]:
        index = self._open_cell_for(event.call_id)
        if index is None:
            # Its start is on an earlier page that is not held: show the outcome alone.
            index = self._new(record, "cell", f"cell {event.cell}")
            self.items[index].cell = event.cell
        else:
            self.items[index].seqs.append(record.seq)
        self._cells.pop(event.call_id, None)
        block = self.items[index]
        block.output, block.open, block.status = event.output, False, event.status
        more = f" · {event.chars} chars, full text in _out[{event.cell}]" if event.truncated else ""
        block.detail = f"{event.status} · {event.duration:.1f}s{more}"
        return {index}


def _one_off(event: object, name_of: NameOf) -> tuple[BlockKind, str, str]:
    """The kind, title and body of an event that makes a block by itself."""
    match event:
        case UserInput():
            return "input", _input_title(event, name_of), event.text
        case InboxRead():
            lines = [
                f"{name_of(m.sender) if m.sender else m.source} ({m.source}): {m.text}"
                for m in event.messages
            ]
            return "input", f"▶ inbox read · {len(event.messages)} message(s)", "\n".join(lines)
        case InputPlaced():
            label = f" from {event.label}" if event.label else ""
            title = f"input{label} placed in the kernel as {event.name}"
            return "meta", f"{title} ({event.chars} chars, {event.lines} lines)", ""
        case TurnStarted():
            return "meta", f"turn {event.turn} started", ""
        case TurnEnded():
            detail = f" · {event.detail}" if event.detail else ""
            return (
                "turn_end",
                f"turn {event.turn} ended: {event.reason}{detail}",
                event.answer or "",
            )
        case Compacted():
            title = (
                f"compaction ({event.reason}): {event.tokens_before} → {event.tokens_after} "
                f"tokens, through #{event.through}"
            )
            return "compaction", title, event.summary
        case GateChecked():
            code = f" · exit {event.exit_code}" if event.exit_code is not None else ""
            title = f"gate {event.gate}: {event.status}{code} · {event.duration:.1f}s"
            return "gate", title, event.output
        case AutonomousEnded():
            return "gate", f"autonomous run ended: {event.outcome}", event.detail
        case Notice():
            if _HARNESS_NOTICE.match(event.text):
                return "harness", event.text, ""
            return "notice", f"{event.level}: {event.text}", ""
        case ModelRetry():
            title = f"model retry {event.attempt} ({event.kind}) in {event.delay:.1f}s"
            return "notice", title, event.message
        case KernelStatus():
            detail = f": {event.detail}" if event.detail else ""
            return "meta", f"kernel {event.state}{detail}", ""
        case StatusChanged():
            return "meta", f"status → {event.status}", ""
        case SessionCreated():
            return "meta", f"session created · {event.model} · {event.cwd}", ""
    return "meta", f"{type(event).__name__}", ""


__all__ = ["FOLD_LINES", "Block", "BlockKind", "Blocks", "NameOf", "fold", "line_count"]

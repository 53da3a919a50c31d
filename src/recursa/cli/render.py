"""Turning session events into what a person reads, or into JSON lines.

The human transcript goes to stderr and the final answer to stdout, so
``answer=$(recursa run "...")`` captures just the answer while the work
stays visible. ``--json`` writes one object per line to stdout instead.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from recursa.cli.spend import cost_text, usage_dict, usage_line
from recursa.cli.terminal import printable
from recursa.protocol.events import (
    AssistantReply,
    AutonomousEnded,
    CellFinished,
    CellOutput,
    CellStarted,
    Compacted,
    EventRecord,
    GateChecked,
    InputPlaced,
    KernelStatus,
    ModelRetry,
    Notice,
    SessionCreated,
    TextDelta,
    TurnEnded,
    UserInput,
    json_text,
)

if TYPE_CHECKING:
    from recursa.protocol.wire import SessionInfo, Usage

_RESET = "\x1b[0m"

SHOWN_CELL_CHARS = 4000
"""Characters of one cell's output shown while it runs; the rest is counted.
(The model's view is bounded separately; the full text is in the store.)"""

_STYLES = {
    "dim": "\x1b[2m",
    "code": "\x1b[36m",
    "error": "\x1b[31m",
    "ok": "\x1b[32m",
    "bold": "\x1b[1m",
}

LIMIT_REASONS = frozenset({"max_steps", "max_tokens", "max_time"})


@dataclass
class TranscriptPrinter:
    """Prints a readable transcript as events arrive. Streams reply text as it is
    generated; prints each cell's code, then its output as it runs."""

    out: TextIO = field(default_factory=lambda: sys.stderr)
    color: bool = False
    echo_user: bool = True
    _at_line_start: bool = True
    _cell_shown: int = 0
    _streamed_reply: bool = False
    _streamed_cell: bool = False
    _code_already_shown: bool = False

    def _style(self, name: str, text: str) -> str:
        return f"{_STYLES[name]}{text}{_RESET}" if self.color else text

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self._at_line_start = text.endswith("\n")

    def _text(self, text: str) -> None:
        """Write text that came from the model or a cell."""
        self._write(printable(text))

    def _line(self, text: str = "") -> None:
        """Print ``text`` on a line of its own, ending any streamed line first."""
        if not self._at_line_start:
            self._write("\n")
        self._write(text + "\n")

    def handle(self, record: EventRecord) -> None:
        event = record.event
        match event:
            case SessionCreated(model=model):
                self._line(self._style("dim", f"── session {record.session_id} · {model}"))
            case UserInput(text=text, source=source):
                if source != "user" or self.echo_user:
                    label = "you" if source == "user" else source
                    self._line(self._style("bold", f"{label} ▸ ") + printable(text))
            case TextDelta(text=text):
                self._streamed_reply = True
                self._text(text)
            case AssistantReply(text=text, fenced=fenced):
                if not self._streamed_reply and text:
                    self._text(text)
                # A fenced reply's code is in its text, already on screen.
                self._code_already_shown = fenced and bool(text)
                self._streamed_reply = False
                if not self._at_line_start:
                    self._write("\n")
            case ModelRetry(kind=kind, attempt=attempt, delay=delay, message=message):
                self._streamed_reply = False
                self._line(
                    self._style(
                        "dim",
                        f"   retrying ({kind}, attempt {attempt}, in {delay:.1f} s): {message}",
                    )
                )
            case CellStarted(cell=cell, code=code):
                self._line(self._style("dim", f"┌─ cell {cell}"))
                if not self._code_already_shown:
                    for line in printable(code).rstrip().splitlines():
                        self._line(self._style("dim", "│ ") + self._style("code", line))
                self._streamed_cell = False
                self._cell_shown = 0
            case CellOutput(text=text, stream=stream):
                self._streamed_cell = True
                room = SHOWN_CELL_CHARS - self._cell_shown
                self._cell_shown += len(text)
                if room > 0:
                    piece = printable(text[:room])
                    self._write(
                        self._style("error", piece) if stream in ("stderr", "error") else piece
                    )
            case CellFinished(
                cell=cell, status=status, output=output, chars=chars, duration=duration
            ):
                if status == "rejected":
                    self._line(self._style("error", f"✗ tool call rejected: {printable(output)}"))
                    return
                if not self._streamed_cell and output.strip():
                    self._line(printable(output).rstrip())
                elif self._cell_shown > SHOWN_CELL_CHARS:
                    hidden = self._cell_shown - SHOWN_CELL_CHARS
                    self._line(
                        self._style("dim", f"[... {hidden:,} more characters not shown here]")
                    )
                mark = self._style("ok", "ok") if status == "ok" else self._style("error", status)
                facts = self._style("dim", f" · {chars:,} chars · {duration:.2f} s")
                self._line(self._style("dim", f"└─ cell {cell} ") + mark + facts)
            case InputPlaced(name=name, chars=chars, label=label):
                what = (
                    f"{printable(label)} is" if label else "the input is too long for the window:"
                )
                self._line(
                    self._style("dim", f"   {what} in the kernel as `{name}` ({chars:,} chars)")
                )
            case KernelStatus(state=state, detail=detail):
                self._line(self._style("dim", f"   kernel {state}: {printable(detail)}"))
            case Notice(text=text, level=level):
                self._line(
                    self._style("error" if level != "info" else "dim", f"   {printable(text)}")
                )
            case TurnEnded(reason=reason, detail=detail):
                if reason != "answered":
                    self._line(self._style("error", f"stopped ({reason}): {printable(detail)}"))
            case Compacted(tokens_before=before, tokens_after=after, reason=why):
                who = "as the agent asked" if why == "agent" else "near the context window"
                self._line(
                    self._style("dim", f"── context compacted {who}: {before:,} → {after:,} tokens")
                )
            case GateChecked():
                self._gate(event)
            case AutonomousEnded(outcome=outcome, detail=detail):
                self._line(self._style("ok" if outcome == "passed" else "error", detail))
            case _:
                pass

    def _gate(self, event: GateChecked) -> None:
        gate = printable(event.gate)
        match event.status:
            case "passed":
                self._line(self._style("ok", "✓ gate ") + f"{gate} · {event.duration:.2f} s")
                return
            case "skipped":
                self._line(
                    self._style("dim", f"– gate {gate}: not run again, ")
                    + self._style("dim", "the workspace has not changed since it failed")
                )
                return
            case "failed":
                how = f"failed (exit {event.exit_code})"
            case "timeout":
                how = "timed out"
            case _:
                how = "could not run"
        self._line(self._style("error", "✗ gate ") + f"{gate} {how} · {event.duration:.2f} s")
        output = printable(event.output[:SHOWN_CELL_CHARS]).rstrip()
        for line in output.splitlines():
            self._line(self._style("dim", "│ ") + line)

    def summary(self, totals: Usage, elapsed: float) -> None:
        self._line(self._style("dim", f"── {usage_line(totals)} · {elapsed:.1f} s"))


def session_footer(info: SessionInfo) -> str:
    """The last line of ``recursa logs``: the session, its status, its usage
    and its last answer."""
    answer = f" · last answer: {printable(info.last_answer)}" if info.last_answer else ""
    return f"── {info.id} {info.status} · {usage_line(info.usage)}{answer}"


def json_line(value: dict[str, object], out: TextIO) -> None:
    out.write(json_text(value) + "\n")
    out.flush()


def result_line(
    session_id: str,
    end: TurnEnded | None,
    detail: str,
    totals: Usage,
    elapsed: float,
    **extra: object,
) -> dict[str, object]:
    """The last JSON line of ``recursa run --json``: how the run ended."""
    return {
        "type": "result",
        "session_id": session_id,
        "reason": end.reason if end else None,
        "answer": end.answer if end else None,
        "detail": detail,
        **extra,
        "usage": usage_dict(totals),
        "elapsed": round(elapsed, 3),
    }


__all__ = [
    "LIMIT_REASONS",
    "SHOWN_CELL_CHARS",
    "TranscriptPrinter",
    "cost_text",
    "json_line",
    "printable",
    "result_line",
    "session_footer",
    "usage_dict",
    "usage_line",
]

"""Turning session events into what a person reads, or into JSON lines.

The human transcript goes to stderr and the final answer to stdout, so
``answer=$(recursa run "...")`` captures just the answer while the work
stays visible. ``--json`` writes one object per line to stdout instead.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TextIO

from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellOutput,
    CellStarted,
    EventRecord,
    KernelStatus,
    ModelRetry,
    ModelUsage,
    Notice,
    SessionCreated,
    TextDelta,
    TurnEnded,
    UserInput,
    record_to_dict,
)

_RESET = "\x1b[0m"
_STYLES = {
    "dim": "\x1b[2m",
    "code": "\x1b[36m",
    "error": "\x1b[31m",
    "ok": "\x1b[32m",
    "bold": "\x1b[1m",
}

LIMIT_REASONS = frozenset({"max_steps", "max_tokens", "max_time"})


@dataclass
class Tally:
    """Usage over what was rendered: the one-line summary at the end."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    unknown_cost: int = 0

    def add(self, usage: ModelUsage) -> None:
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        if usage.cost is None:
            self.unknown_cost += 1
        else:
            self.cost += usage.cost

    def cost_text(self) -> str:
        if self.calls and self.unknown_cost == self.calls:
            return "cost unknown"
        text = f"${self.cost:.4f}"
        return f"{text} + unknown for {self.unknown_cost} calls" if self.unknown_cost else text

    def summary(self) -> str:
        cached = f" ({self.cached_tokens:,} cached)" if self.cached_tokens else ""
        return (
            f"{self.calls} model call{'s' * (self.calls != 1)} · "
            f"{self.input_tokens:,} in{cached} / {self.output_tokens:,} out tokens · {self.cost_text()}"
        )


@dataclass
class TranscriptPrinter:
    """Prints a readable transcript as events arrive. Streams reply text as it is
    generated; prints each cell's code, then its output as it runs."""

    out: TextIO = field(default_factory=lambda: sys.stderr)
    color: bool = False
    tally: Tally = field(default_factory=Tally)
    _at_line_start: bool = True
    _streamed_reply: bool = False
    _streamed_cell: bool = False
    _code_already_shown: bool = False

    def _style(self, name: str, text: str) -> str:
        return f"{_STYLES[name]}{text}{_RESET}" if self.color else text

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self._at_line_start = text.endswith("\n")

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
                label = "you" if source == "user" else source
                self._line(self._style("bold", f"{label} ▸ ") + text)
            case TextDelta(text=text):
                self._streamed_reply = True
                self._write(text)
            case AssistantReply(text=text, fenced=fenced):
                if not self._streamed_reply and text:
                    self._write(text)
                # A fenced reply's code is in its text, already on screen.
                self._code_already_shown = fenced and bool(text)
                self._streamed_reply = False
                if not self._at_line_start:
                    self._write("\n")
            case ModelUsage():
                self.tally.add(event)
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
                    for line in code.rstrip().splitlines():
                        self._line(self._style("dim", "│ ") + self._style("code", line))
                self._streamed_cell = False
            case CellOutput(text=text, stream=stream):
                self._streamed_cell = True
                self._write(self._style("error", text) if stream in ("stderr", "error") else text)
            case CellFinished(
                cell=cell, status=status, output=output, chars=chars, duration=duration
            ):
                if status == "rejected":
                    self._line(self._style("error", f"✗ tool call rejected: {output}"))
                    return
                if not self._streamed_cell and output.strip():
                    self._line(output.rstrip())
                mark = self._style("ok", "ok") if status == "ok" else self._style("error", status)
                facts = self._style("dim", f" · {chars:,} chars · {duration:.2f} s")
                self._line(self._style("dim", f"└─ cell {cell} ") + mark + facts)
            case KernelStatus(state=state, detail=detail):
                self._line(self._style("dim", f"   kernel {state}: {detail}"))
            case Notice(text=text, level=level):
                self._line(self._style("error" if level != "info" else "dim", f"   {text}"))
            case TurnEnded(reason=reason, detail=detail):
                if reason != "answered":
                    self._line(self._style("error", f"stopped ({reason}): {detail}"))
            case _:
                pass

    def summary(self, elapsed: float) -> None:
        self._line(self._style("dim", f"── {self.tally.summary()} · {elapsed:.1f} s"))


def json_line(record: EventRecord, out: TextIO) -> None:
    out.write(json.dumps(record_to_dict(record), ensure_ascii=False) + "\n")
    out.flush()


__all__ = ["LIMIT_REASONS", "Tally", "TranscriptPrinter", "json_line"]

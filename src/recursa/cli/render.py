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
    Notice,
    SessionCreated,
    TextDelta,
    TurnEnded,
    UserInput,
    record_to_dict,
)
from recursa.store import UsageTotals

_RESET = "\x1b[0m"
_STYLES = {
    "dim": "\x1b[2m",
    "code": "\x1b[36m",
    "error": "\x1b[31m",
    "ok": "\x1b[32m",
    "bold": "\x1b[1m",
}

LIMIT_REASONS = frozenset({"max_steps", "max_tokens", "max_time"})


def usage_line(totals: UsageTotals) -> str:
    """One line of usage: calls, tokens, and a cost that never reads as free when unknown."""
    cached = f" ({totals.cached_tokens:,} cached)" if totals.cached_tokens else ""
    if totals.calls and totals.unknown_cost_calls == totals.calls:
        cost = "cost unknown"
    elif totals.unknown_cost_calls:
        cost = f"${totals.cost:.4f} + {totals.unknown_cost_calls} unpriced calls"
    elif totals.cost == 0:
        cost = "no cost"
    else:
        cost = f"${totals.cost:.4f}"
    calls = f"{totals.calls} model call{'s' * (totals.calls != 1)}"
    return f"{calls} · {totals.input_tokens:,} in{cached} / {totals.output_tokens:,} out tokens · {cost}"


def usage_dict(totals: UsageTotals) -> dict[str, object]:
    return {
        "calls": totals.calls,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cached_tokens": totals.cached_tokens,
        "cost": round(totals.cost, 6) if totals.cost_complete else None,
        "unknown_cost_calls": totals.unknown_cost_calls,
    }


@dataclass
class TranscriptPrinter:
    """Prints a readable transcript as events arrive. Streams reply text as it is
    generated; prints each cell's code, then its output as it runs."""

    out: TextIO = field(default_factory=lambda: sys.stderr)
    color: bool = False
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

    def summary(self, totals: UsageTotals, elapsed: float) -> None:
        self._line(self._style("dim", f"── {usage_line(totals)} · {elapsed:.1f} s"))


def json_line(record: EventRecord, out: TextIO) -> None:
    out.write(json.dumps(record_to_dict(record), ensure_ascii=False) + "\n")
    out.flush()


__all__ = ["LIMIT_REASONS", "TranscriptPrinter", "json_line", "usage_dict", "usage_line"]

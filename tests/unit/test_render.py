from __future__ import annotations

import io

from recursa.cli.render import SHOWN_CELL_CHARS, TranscriptPrinter, printable, usage_line
from recursa.protocol.events import CellFinished, CellOutput, CellStarted, Event, EventRecord
from recursa.protocol.wire import Usage as UsageTotals


def rec(event: Event) -> EventRecord:
    return EventRecord(seq=1, session_id="s-1", ts=0.0, event=event)


def test_printable_removes_escape_and_control_sequences() -> None:
    hostile = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[31mred\x1b[0m\x9b2J tab\there\nnext\x00\x08"
    assert printable(hostile) == "ok red tab\there\nnext"  # the 8-bit CSI goes whole


def test_a_huge_cell_is_bounded_on_screen() -> None:
    out = io.StringIO()
    printer = TranscriptPrinter(out=out)
    printer.handle(rec(CellStarted(cell=1, call_id="c", code="print('x' * 10**6)")))
    for _ in range(100):
        printer.handle(rec(CellOutput(cell=1, stream="stdout", text="x" * 10_000)))
    printer.handle(
        rec(CellFinished(cell=1, call_id="c", status="ok", output="(bounded)", chars=1_000_000))
    )
    text = out.getvalue()
    assert text.count("x") < SHOWN_CELL_CHARS + 100
    assert f"{1_000_000 - SHOWN_CELL_CHARS:,} more characters" in text


def test_usage_line_never_shows_an_unknown_cost_as_free() -> None:
    assert "cost unknown" in usage_line(UsageTotals(calls=2, unknown_cost_calls=2))
    assert "+ 1 unpriced calls" in usage_line(UsageTotals(calls=2, cost=0.5, unknown_cost_calls=1))
    assert "no cost" in usage_line(UsageTotals(calls=1))

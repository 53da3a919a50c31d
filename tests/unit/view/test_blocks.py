"""Events as readable blocks: cells, streamed text, inputs, compactions, notices."""

from __future__ import annotations

from recursa.models.types import ToolCall
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellOutput,
    CellStarted,
    Compacted,
    Event,
    EventRecord,
    GateChecked,
    ModelUsage,
    Notice,
    TextDelta,
    TurnEnded,
    UserInput,
)
from recursa.view.blocks import FOLD_LINES, Blocks, fold

_seq = iter(range(1, 10_000))


def stored(event: Event) -> EventRecord:
    return EventRecord(next(_seq), "s1", 100.0, event)


def streamed(event: Event) -> EventRecord:
    return EventRecord(0, "s1", 100.0, event)


def test_a_cell_is_one_block_with_code_and_output() -> None:
    blocks = Blocks()
    blocks.add(stored(CellStarted(cell=3, call_id="c1", code="print(1+1)")))
    blocks.add(streamed(CellOutput(cell=3, stream="stdout", text="2")))
    [cell] = blocks.items
    assert (cell.code, cell.output, cell.open) == ("print(1+1)", "2", True)
    done = stored(CellFinished(cell=3, call_id="c1", status="ok", output="2\n", chars=2))
    assert blocks.add(done) == {0}
    [cell] = blocks.items
    assert (cell.output, cell.open, cell.status, len(cell.seqs)) == ("2\n", False, "ok", 2)
    assert cell.detail.startswith("ok · ")


def test_a_truncated_output_says_where_the_full_text_is() -> None:
    blocks = Blocks()
    blocks.add(stored(CellStarted(cell=1, call_id="c", code="x")))
    blocks.add(
        stored(
            CellFinished(cell=1, call_id="c", status="ok", output="...", chars=9000, truncated=True)
        )
    )
    assert "9000 chars, full text in _out[1]" in blocks.items[0].detail


def test_a_cell_whose_start_is_not_held_still_shows_its_outcome() -> None:
    blocks = Blocks()
    blocks.add(stored(CellFinished(cell=2, call_id="x", status="error", output="Boom", chars=4)))
    [cell] = blocks.items
    assert (cell.kind, cell.code, cell.output, cell.status) == ("cell", None, "Boom", "error")


def test_streamed_text_grows_one_block_that_the_reply_completes() -> None:
    blocks = Blocks()
    for piece in ("Hel", "lo"):
        blocks.add(streamed(TextDelta(text=piece, step=1)))
    assert [(b.kind, b.body, b.open) for b in blocks.items] == [("assistant", "Hello", True)]
    blocks.add(stored(AssistantReply(text="Hello!", step=1)))
    blocks.add(stored(ModelUsage(model="openai/m", input_tokens=12, output_tokens=3, step=1)))
    [reply] = blocks.items
    assert (reply.body, reply.open) == ("Hello!", False)
    assert reply.detail == "openai/m: 12 in · 3 out"


def test_a_reply_with_only_code_makes_no_text_block() -> None:
    blocks = Blocks()
    call = ToolCall(id="c", name="python", arguments='{"code": "1"}')
    blocks.add(stored(AssistantReply(text="", tool_calls=(call,), step=1)))
    assert blocks.items == []


def test_inputs_say_source_sender_and_mode() -> None:
    blocks = Blocks()
    blocks.add(stored(UserInput(text="hi", source="parent", sender="root", mode="steer")))
    blocks.add(stored(UserInput(text="tick", source="schedule")))
    blocks.add(stored(UserInput(text="go on", source="goal")))
    titles = [b.title for b in blocks.items]
    assert titles == [
        "▶ parent root · steer",
        "▶ schedule tick · turn",
        "▶ goal continuation · turn",
    ]


def test_compaction_gate_and_turn_end() -> None:
    blocks = Blocks()
    blocks.add(stored(Compacted(summary="sum", through=7, tokens_before=9000, tokens_after=800)))
    blocks.add(stored(GateChecked(gate="pytest", status="failed", exit_code=1, output="F")))
    blocks.add(stored(TurnEnded(turn=2, reason="answered", answer="42")))
    compaction, gate, end = blocks.items
    assert "9000 → 800 tokens" in compaction.title and compaction.body == "sum"
    assert gate.title.startswith("gate pytest: failed · exit 1")
    assert (end.title, end.body) == ("turn 2 ended: answered", "42")


def test_a_harness_notice_links_its_entry() -> None:
    blocks = Blocks()
    blocks.add(stored(Notice(text="harness: created skill 'sq' (proposed) (ab12cd34)")))
    blocks.add(stored(Notice(text="kernel restarted", level="warning")))
    harness, notice = blocks.items
    assert (harness.kind, harness.entry_id) == ("harness", "ab12cd34")
    assert (notice.kind, notice.entry_id) == ("notice", None)


def test_a_stored_record_seen_twice_is_ignored() -> None:
    blocks = Blocks()
    record = stored(UserInput(text="once"))
    assert blocks.add(record) == {0}
    assert blocks.add(record) == set()
    assert len(blocks.items) == 1


def test_long_text_folds_to_twenty_lines() -> None:
    text = "\n".join(str(i) for i in range(50))
    shown, hidden = fold(text)
    assert hidden == 50 - FOLD_LINES and shown.splitlines()[-1] == str(FOLD_LINES - 1)
    assert fold("short") == ("short", 0)

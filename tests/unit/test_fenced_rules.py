"""The fenced-protocol rules of issue 12, each through ``run_turn`` with a
scripted model: answers with nothing behind them get one nudge, the model is
asked for its answer after output, alternating cells count as repeats, and a
cut-off reply leaves the context (the store keeps it)."""

from __future__ import annotations

from test_loop import Harness

from recursa.models.faux import FauxReply, code, register_script, reply
from recursa.models.types import AssistantMessage, UserMessage
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    TurnEnded,
    UserInput,
    event_from_dict,
    event_to_dict,
)
from recursa.session.context import ANSWER_HINT, BASE_PROMPT, FENCED_PROMPT, answer_rules
from recursa.session.loop import (
    CUT_OFF_NUDGE_FENCED,
    FAILED_CELL_NUDGE,
    NO_CODE_NUDGE,
    NOTHING_PRINTED_NUDGE,
    REPAIRED_MARKER_NOTE,
    TAKEN_DETAIL,
    run_turn,
)


def nudges(h: Harness) -> list[str]:
    return [e.text for e in h.of(UserInput) if e.source == "system"]


# -- an answer before any code ---------------------------------------------------


async def test_a_first_answer_without_code_is_nudged_once_and_code_follows() -> None:
    h = Harness(fenced=True)
    steps = [reply("FINAL ANSWER: 45"), code("print(2024 - 1979)"), reply("FINAL ANSWER: 45")]
    end = await h.turn("bare-first", steps, task="How old is someone born in 1979 in 2024?")
    assert (end.reason, end.answer) == ("answered", "45")
    assert nudges(h) == [NO_CODE_NUDGE]
    assert "without running code" in NO_CODE_NUDGE
    assert [c.code for c in h.of(CellStarted)] == ["print(2024 - 1979)"]
    # The model saw its bare answer and then the nudge, as the last message.
    assert h.script.requests[1].messages[-1] == UserMessage("[harness] " + NO_CODE_NUDGE)


async def test_a_second_answer_without_code_is_accepted() -> None:
    h = Harness(fenced=True)
    end = await h.turn("chat", [reply("Hello! How can I help?"), reply("Hello again.")], task="hi")
    assert (end.reason, end.answer) == ("answered", "Hello again.")
    assert nudges(h) == [NO_CODE_NUDGE]
    assert len(h.of(AssistantReply)) == 2


async def test_a_follow_up_turn_is_checked_too() -> None:
    h = Harness(fenced=True)
    await h.turn("first", [code("x = 21"), code("print(x)"), reply("FINAL ANSWER: 21")])
    assert nudges(h) == []
    end = await h.turn(
        "follow-up", [reply("FINAL ANSWER: 42"), code("print(x * 2)"), reply("FINAL ANSWER: 42")]
    )
    assert (end.reason, end.answer) == ("answered", "42")
    assert nudges(h) == [NO_CODE_NUDGE]


async def test_a_resumed_turn_accepts_an_answer_at_once() -> None:
    # Cells may have run before the crash that the turn resumes from.
    h = Harness(fenced=True)
    h.script = register_script("resumed", [reply("FINAL ANSWER: 7")], native_tools=False)
    h.conversation.apply(UserInput(text="task"))
    events = [e async for e in run_turn(1, h.hooks("resumed"), fenced=True, resume=True)]
    ended = events[-1]
    assert isinstance(ended, TurnEnded)
    assert (ended.reason, ended.answer) == ("answered", "7")
    assert not any(isinstance(e, UserInput) for e in events)


async def test_native_tool_answers_are_not_nudged() -> None:
    h = Harness()
    end = await h.turn("native-bare", [reply("42")])
    assert (end.reason, end.answer) == ("answered", "42")
    assert nudges(h) == []
    assert len(h.of(AssistantReply)) == 1


# -- an answer after a cell with nothing to show -----------------------------------


async def test_an_answer_after_a_silent_cell_is_nudged_once() -> None:
    h = Harness(fenced=True)
    steps = [code("x = 6 * 7"), reply("FINAL ANSWER: 42"), code("print(x)"), reply("42")]
    end = await h.turn("silent", steps)
    assert (end.reason, end.answer) == ("answered", "42")
    assert nudges(h) == [NOTHING_PRINTED_NUDGE]
    assert [f.output for f in h.of(CellFinished)] == ["", "42\n"]


async def test_an_answer_after_a_failed_cell_is_nudged_then_accepted() -> None:
    h = Harness(fenced=True)
    steps = [code("print(1 / 0)"), reply("FINAL ANSWER: inf"), reply("FINAL ANSWER: inf")]
    end = await h.turn("failed", steps)
    assert (end.reason, end.answer) == ("answered", "inf")
    assert nudges(h) == [FAILED_CELL_NUDGE]


async def test_answer_nudges_are_bounded_per_turn() -> None:
    h = Harness(fenced=True)
    steps = [
        reply("a"),  # no code yet: nudged
        code("x = 1"),
        reply("b"),  # after a silent cell: nudged
        code("y = 2"),
        reply("c"),  # after a silent cell again: accepted, each nudge comes once a turn
    ]
    end = await h.turn("bounded", steps)
    assert (end.reason, end.answer) == ("answered", "c")
    assert nudges(h) == [NO_CODE_NUDGE, NOTHING_PRINTED_NUDGE]


async def test_an_answer_after_printed_output_is_accepted_at_once() -> None:
    h = Harness(fenced=True)
    end = await h.turn("printed", [code("print(2 ** 10)"), reply("FINAL ANSWER: 1024")])
    assert (end.reason, end.answer) == ("answered", "1024")
    assert nudges(h) == []


# -- asking for the answer after output ------------------------------------------------


async def test_the_model_is_asked_for_its_answer_after_output_in_its_view_only() -> None:
    h = Harness(fenced=True)
    steps = [code("print(2 ** 10)"), code("z = 0"), code("print(1 / 0)"), reply("1024")]
    await h.turn("hint", steps)
    requests = h.script.requests
    after_output, after_silence, after_error = (requests[i].messages[-1] for i in (1, 2, 3))
    assert str(after_output.text).endswith(ANSWER_HINT)
    assert ANSWER_HINT not in after_silence.text
    assert ANSWER_HINT not in after_error.text
    # The stored output is the cell's own.
    assert all(ANSWER_HINT not in f.output for f in h.of(CellFinished))


def test_the_final_answer_rule_is_stated_once_in_both_prompts() -> None:
    assert answer_rules("without a tool call") in BASE_PROMPT
    assert answer_rules("with no code block") in FENCED_PROMPT
    assert FENCED_PROMPT.count("FINAL ANSWER:") == 1
    assert BASE_PROMPT.count("FINAL ANSWER:") == 1


# -- alternating cells ---------------------------------------------------------------


async def test_alternating_cells_are_caught_like_identical_ones() -> None:
    h = Harness(fenced=True)
    end = await h.turn("alternate", [code("print('a')"), code("print('b')")] * 4)
    assert end.reason == "stuck"
    assert "repeat earlier ones 5 times" in end.detail
    finished = h.of(CellFinished)
    assert [f.status for f in finished] == ["ok", "ok", "ok", "rejected", "rejected"]
    assert "same as one you ran 2 cells ago" in finished[2].output
    assert "only repeated earlier ones" in finished[3].output
    assert len(h.of(CellStarted)) == 3  # refused cells never reach the kernel


async def test_native_turns_compare_with_the_previous_cell_only() -> None:
    h = Harness()
    end = await h.turn(
        "native-alternate", [code("print('a')"), code("print('b')")] * 3 + [reply("x")]
    )
    assert (end.reason, end.answer) == ("answered", "x")
    assert [f.status for f in h.of(CellFinished)] == ["ok"] * 6


async def test_a_new_cell_breaks_the_streak() -> None:
    h = Harness(fenced=True)
    cells = ["print('a')", "print('b')", "print('a')", "print('c')", "print('a')", "print('d')"]
    end = await h.turn("progress", [*(code(c) for c in cells), reply("FINAL ANSWER: d")])
    assert (end.reason, end.answer) == ("answered", "d")
    assert [f.status for f in h.of(CellFinished)] == ["ok"] * 6


# -- a cut-off reply -------------------------------------------------------------------


async def test_a_cut_off_reply_is_stored_but_left_out_of_the_context() -> None:
    h = Harness(fenced=True)
    digits = "1267650600228229401496703205376" * 100
    steps = [
        FauxReply(text=digits, stop_reason="max_tokens"),
        code("print(2 ** 100)"),
        reply("FINAL ANSWER: 1267650600228229401496703205376"),
    ]
    end = await h.turn("cut-digits", steps, task="What is 2**100?")
    assert end.answer == "1267650600228229401496703205376"
    stored = h.of(AssistantReply)
    assert stored[0].cut_off and stored[0].text == digits
    assert not any(r.cut_off for r in stored[1:])
    # The next call sees the task and the nudge only: the input does not grow by the reply.
    second = h.script.requests[1].messages
    assert len(second) == 2
    assert all(digits not in str(m.text) for m in second)
    assert second[-1] == UserMessage("[harness] " + CUT_OFF_NUDGE_FENCED)
    assert all(digits not in str(m.text) for m in h.script.requests[2].messages)
    # Replies that were used stay.
    assert AssistantMessage("```python\nprint(2 ** 100)\n```") in h.script.requests[2].messages


async def test_a_native_cut_off_reply_is_left_out_too() -> None:
    h = Harness()
    steps = [reply("The answer is 4" * 50, stop_reason="max_tokens"), reply("42")]
    end = await h.turn("native-cut", steps)
    assert end.answer == "42"
    assert h.of(AssistantReply)[0].cut_off
    assert not any(isinstance(m, AssistantMessage) for m in h.script.requests[1].messages)


def test_the_cut_off_flag_is_stored_and_old_rows_read_false() -> None:
    event = AssistantReply(text="xx", cut_off=True, fenced=True)
    assert event_from_dict(event_to_dict(event)) == event
    old = event_to_dict(AssistantReply(text="xx"))
    del old["cut_off"]
    assert event_from_dict(old) == AssistantReply(text="xx")


# -- the answer marker written in code --------------------------------------------------


async def test_a_printed_marker_is_made_python_and_its_value_ends_the_turn() -> None:
    h = Harness(fenced=True)
    source = "s = sum(range(10))\nprint(FINAL ANSWER: {s})"
    end = await h.turn("marker-in-print", [code(source)])
    assert (end.reason, end.answer) == ("answered", "45")
    assert [c.code for c in h.of(CellStarted)] == [
        's = sum(range(10))\nprint(f"FINAL ANSWER: {s}")'
    ]
    (finished,) = h.of(CellFinished)
    assert (
        finished.output.startswith("FINAL ANSWER: 45\n") and REPAIRED_MARKER_NOTE in finished.output
    )
    assert source in h.of(AssistantReply)[0].text  # the reply is stored as the model wrote it
    assert len(h.script.requests) == 1


async def test_a_bare_marker_line_in_code_is_a_guess_and_is_left_out() -> None:
    h = Harness(fenced=True)
    steps = [code("x = 6 * 7\nprint(x)\nFINAL ANSWER: 30"), reply("FINAL ANSWER: 42")]
    end = await h.turn("marker-line", steps)
    assert (end.reason, end.answer) == ("answered", "42")
    assert [c.code for c in h.of(CellStarted)] == ["x = 6 * 7\nprint(x)"]
    assert h.of(CellFinished)[0].status == "ok"


async def test_code_that_is_python_is_never_rewritten() -> None:
    h = Harness(fenced=True)
    source = "FINAL_ANSWER = 3\nprint('FINAL ANSWER is', FINAL_ANSWER)"
    end = await h.turn("python-already", [code(source), reply("FINAL ANSWER: 3")])
    assert end.answer == "3"
    assert [c.code for c in h.of(CellStarted)] == [source]
    assert REPAIRED_MARKER_NOTE not in h.of(CellFinished)[0].output


async def test_a_cell_whose_last_line_is_the_marker_answers() -> None:
    h = Harness(fenced=True)
    end = await h.turn("printed-answer", [code('print("work")\nprint(f"FINAL ANSWER: {7 * 6}")')])
    assert (end.reason, end.answer) == ("answered", "42")
    assert len(h.script.requests) == 1


async def test_a_printed_marker_answers_only_as_the_last_line_and_only_fenced() -> None:
    h = Harness(fenced=True)
    steps = [code('print("FINAL ANSWER: 1")\nprint("more")'), reply("FINAL ANSWER: 2")]
    assert (await h.turn("not-last", steps)).answer == "2"
    native = Harness()
    steps = [code('print("FINAL ANSWER: 1")'), reply("2")]
    assert (await native.turn("native-printed", steps)).answer == "2"


async def test_a_repeated_cell_is_offered_its_one_line_output_as_the_answer() -> None:
    h = Harness(fenced=True)
    steps = [code("t = 503.67\nprint(t)"), code("print(t)"), code("print(t)")]
    steps.append(reply("FINAL ANSWER: 503.67"))
    end = await h.turn("suggested", steps)
    assert (end.reason, end.answer) == ("answered", "503.67")
    outputs = [f.output for f in h.of(CellFinished)]
    suggestion = "If the output you have, 503.67, answers the task, reply: FINAL ANSWER: 503.67"
    assert suggestion not in outputs[0] and suggestion not in outputs[1]
    assert outputs[2].startswith("503.67\n[this cell is the same") and outputs[2].endswith(
        suggestion
    )


async def test_sending_that_cell_again_gives_its_line_as_the_answer() -> None:
    h = Harness(fenced=True)
    steps = [code("print(549)")] * 3
    end = await h.turn("taken", steps)
    assert (end.reason, end.answer, end.detail) == ("answered", "549", TAKEN_DETAIL)
    assert len(h.of(CellStarted)) == 2 and len(h.script.requests) == 3


async def test_a_repeat_that_printed_more_than_one_line_is_refused_as_before() -> None:
    h = Harness(fenced=True)
    steps = [code("print(1)\nprint(2)")] * 5
    end = await h.turn("not-taken", steps)
    assert end.reason == "stuck"
    assert [f.status for f in h.of(CellFinished)] == ["ok", "ok", "rejected", "rejected"]


async def test_no_answer_is_suggested_from_long_or_failed_output() -> None:
    h = Harness(fenced=True)
    steps = [code("print('a')\nprint('b')"), code("print(1/0)"), code("print(1/0)")]
    steps.append(reply("FINAL ANSWER: b"))
    await h.turn("no-suggestion", steps)
    assert all("answers the task, reply" not in f.output for f in h.of(CellFinished))


async def test_a_marker_line_in_code_answers_when_seen_output_backs_it() -> None:
    h = Harness(fenced=True)
    steps = [
        code("t = 503.67\nprint(t)\nFINAL ANSWER: 120.00"),
        code("print(t)\nFINAL ANSWER: 503.67"),
    ]
    end = await h.turn("backed", steps)
    assert (end.reason, end.answer) == ("answered", "503.67")
    assert len(h.script.requests) == 2  # the guess in the first cell was not taken


async def test_a_marker_value_must_match_whole_in_the_output() -> None:
    h = Harness(fenced=True)
    steps = [
        code("print(503.67)\nFINAL ANSWER: 5"),
        code("print(1)\nFINAL ANSWER: 503.6"),
        reply("x"),
    ]
    end = await h.turn("not-whole", steps)
    assert end.answer == "x"


async def test_an_answer_in_a_comment_is_taken_when_seen_output_backs_it() -> None:
    h = Harness(fenced=True)
    steps = [
        code("print(503.67)  # FINAL ANSWER: 1\n# Final answer: 9"),
        code("# Final answer: 503.67"),
    ]
    end = await h.turn("comment", steps)
    assert (end.reason, end.answer) == ("answered", "503.67")
    assert [c.code for c in h.of(CellStarted)][1] == "# Final answer: 503.67"  # Python: as it is


async def test_a_sentence_in_a_python_fence_ending_on_a_seen_value_is_the_answer() -> None:
    h = Harness(fenced=True)
    sentence = "The special magic number for keen-garden is: 4522457."
    steps = [code("print('numbers for keen-garden is: 4522457.')"), code(sentence)]
    end = await h.turn("prose", steps)
    assert (end.reason, end.answer) == ("answered", sentence)
    assert len(h.of(CellStarted)) == 1  # the sentence was not run as code


async def test_a_sentence_with_an_unseen_value_or_broken_code_still_runs_as_code() -> None:
    h = Harness(fenced=True)
    steps = [code("print(7)"), code("The answer is 8"), code("for x in range(3)")]
    steps += [reply("7"), reply("7")]  # the second: after a failed cell, nudged once
    end = await h.turn("not-prose", steps)
    assert end.answer == "7"
    assert [f.status for f in h.of(CellFinished)] == ["ok", "error", "error"]


async def test_only_the_answer_line_in_a_fence_is_the_answer_when_its_value_was_seen() -> None:
    """Found by `recursa eval run ruler-niah` on the embedded model: it printed the
    needle's number, then sent ```python\nFINAL ANSWER: 9521829``` until it was
    stopped as stuck."""
    h = Harness(fenced=True)
    steps = [code("print(9521829)"), code("FINAL ANSWER: 9521829")]
    end = await h.turn("marker-only", steps)
    assert (end.reason, end.answer) == ("answered", "9521829")
    assert len(h.of(CellStarted)) == 1  # the answer line was not run as code


async def test_an_answer_line_alone_with_an_unseen_value_still_runs() -> None:
    h = Harness(fenced=True)
    steps = [code("print(1)"), code("FINAL ANSWER: 2"), reply("FINAL ANSWER: 1"), reply("1")]
    end = await h.turn("marker-unseen", steps)
    assert end.answer == "1"
    assert [f.status for f in h.of(CellFinished)] == ["ok", "error"]

"""Compaction's pure parts: sizes, units and the cut, the summary prompt and its
parsing, the conversation's projection of ``compacted`` events, and the
history search over an in-memory store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from recursa.errors import UsageError
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    Request,
    StreamEvent,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Compacted,
    Event,
    EventRecord,
    ModelUsage,
    Notice,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.protocol.history import event_text, excerpt
from recursa.session.compaction import (
    MIN_CONTEXT_WINDOW,
    Entry,
    Measure,
    check_context_window,
    estimate,
    estimate_tokens,
    keep_budget,
    parse_summary,
    plan_cut,
    render_transcript,
    reserve,
    summary_message,
    summary_prompt,
    summary_tokens,
    threshold,
    units,
)
from recursa.session.compactor import Compactor, CompactorDeps
from recursa.session.context import Conversation
from recursa.session.gateway import Gateway, GatewayDeps
from recursa.store import Store
from recursa.store import history as store_history


def call(call_id: str, code: str = "x = 1") -> ToolCall:
    return ToolCall(call_id, "python", json.dumps({"code": code}))


def finished(call_id: str, output: str, cell: int = 1) -> CellFinished:
    return CellFinished(cell=cell, call_id=call_id, status="ok", output=output, chars=len(output))


def turn_events(turn: int, task: str, steps: list[str], answer: str) -> list[Event]:
    """One turn: its input, one step per output (a call and its result), an answer.
    Cells are numbered ``turn * 100 + step``."""
    events: list[Event] = [UserInput(text=task), TurnStarted(turn=turn)]
    for index, output in enumerate(steps):
        call_id = f"t{turn}s{index}"
        cell = turn * 100 + index
        events += [
            AssistantReply(text="", tool_calls=(call(call_id),), step=index + 1),
            ModelUsage(model="m", input_tokens=10, output_tokens=5, step=index + 1),
            CellStarted(cell=cell, call_id=call_id, code="x = 1"),
            finished(call_id, output, cell=cell),
        ]
    events += [AssistantReply(text=answer), TurnEnded(turn=turn, reason="answered", answer=answer)]
    return events


def conversation(events: list[Event], *, fenced: bool = False) -> Conversation:
    convo = Conversation(fenced=fenced)
    for seq, event in enumerate(events, start=1):
        convo.apply(event, seq)
    return convo


# ------------------------------------------------------------------- sizes


def test_the_reserve_scales_down_for_small_windows() -> None:
    assert reserve(8000) == 2000
    assert threshold(8000) == 6000
    assert keep_budget(8000) == 2000
    assert reserve(200_000) == 16_384
    assert threshold(200_000) == 200_000 - 16_384
    assert summary_tokens(8000) == 1000
    assert summary_tokens(1_000_000) == 4096
    assert summary_tokens(None) == 2048


def test_context_windows_are_checked() -> None:
    check_context_window(None)
    check_context_window(8000)
    for bad in (100, MIN_CONTEXT_WINDOW - 1, True, 8000.5, "8000"):
        with pytest.raises(UsageError):
            check_context_window(bad)


def test_the_size_is_measured_where_it_can_be() -> None:
    messages = [UserMessage("a" * 300), AssistantMessage("b" * 300)]
    guessed = estimate_tokens("s" * 30, messages)
    assert guessed == (30 + 600) // 3 + 2 * 4 + 150
    assert estimate("s" * 30, messages, None) == guessed
    # The provider counted the first two messages; the third is estimated on top.
    grown = [*messages, UserMessage("c" * 90)]
    assert estimate("s" * 30, grown, Measure(count=2, tokens=500)) == 500 + 30 + 4


def test_only_a_step_measures_the_context() -> None:
    convo = conversation([UserInput(text="task")])
    convo.apply(AssistantReply(text="hi", step=1), 2)
    convo.apply(ModelUsage(model="m", input_tokens=900, output_tokens=9, step=1), 3)
    assert convo.measured == Measure(2, 909)
    # A summary or refinement call (step 0) and an estimate never replace it.
    convo.apply(ModelUsage(model="m", input_tokens=5, output_tokens=5, step=0), 4)
    convo.apply(ModelUsage(model="m", input_tokens=5, output_tokens=5, step=2, estimated=True), 5)
    assert convo.measured == Measure(2, 909)
    convo.apply(Compacted(summary="## Task\nx", through=3, tokens_before=1, tokens_after=1), 6)
    assert convo.measured is None


# --------------------------------------------------------------- the cut


def test_units_are_turn_inputs_and_whole_steps() -> None:
    events: list[Event] = [
        UserInput(text="first"),
        UserInput(text="second, queued"),
        TurnStarted(turn=1),
        AssistantReply(text="", tool_calls=(call("a"), call("b"))),
        finished("a", "A"),
        finished("b", "B", cell=2),
        UserInput(text="steer", mode="steer"),
        AssistantReply(text="done"),
    ]
    convo = conversation(events)
    found = units(convo.entries)
    kinds = [[e.kind for e in convo.entries[u.start : u.end]] for u in found]
    assert kinds == [["input", "input"], ["reply", "result", "result", "steer"], ["reply"]]
    assert [u.turn_start for u in found] == [True, False, False]


def test_the_cut_keeps_whole_recent_turns_when_they_fit() -> None:
    events = [
        *turn_events(1, "old task", ["o" * 3000], "old answer"),
        *turn_events(2, "new task", ["n" * 300], "new answer"),
    ]
    convo = conversation(events)
    cut = plan_cut(convo.entries, keep_tokens=500)
    assert cut is not None
    kept = convo.entries[cut.index :]
    assert kept[0].message == UserMessage("new task")
    assert all(e.seq > cut.through for e in kept)
    assert all(e.seq <= cut.through for e in convo.entries[: cut.index])


def test_a_long_turn_is_cut_between_steps_keeping_the_latest() -> None:
    events = turn_events(1, "the task", ["x" * 3000 for _ in range(5)], "answer")[:-2]
    convo = conversation(events)
    cut = plan_cut(convo.entries, keep_tokens=1500)
    assert cut is not None
    kept = convo.entries[cut.index :]
    assert [e.kind for e in kept] == ["reply", "result"]  # the latest step, whole
    # Asked to keep nothing, it still keeps the last step.
    cut = plan_cut(convo.entries, keep_tokens=0)
    assert cut is not None and [e.kind for e in convo.entries[cut.index :]] == ["reply", "result"]


def test_a_cut_never_separates_a_call_from_its_result() -> None:
    events: list[Event] = []
    for turn in range(1, 5):
        events += turn_events(turn, f"task {turn}", ["y" * (500 * turn)] * turn, "ok")[:-1]
    convo = conversation(events)
    for keep in range(0, 5000, 97):
        cut = plan_cut(convo.entries, keep)
        assert cut is not None
        first = convo.entries[cut.index]
        assert first.kind in ("input", "reply")
        kept_calls = {c.id for e in convo.entries[cut.index :] for c in _calls(e)}
        kept_results = {
            e.message.call_id
            for e in convo.entries[cut.index :]
            if isinstance(e.message, ToolResult)
        }
        assert kept_results == kept_calls


def _calls(entry: Entry) -> tuple[ToolCall, ...]:
    return entry.message.tool_calls if isinstance(entry.message, AssistantMessage) else ()


def test_nothing_to_cut_in_a_single_unit() -> None:
    assert plan_cut(conversation([UserInput(text="just this")]).entries, 0) is None
    assert plan_cut([], 0) is None


# --------------------------------------------------- the projection of compacted


def test_a_compaction_replaces_the_prefix_and_replays_the_same() -> None:
    events = [
        *turn_events(1, "old task", ["old output"], "old answer"),
        UserInput(text="new task"),
        TurnStarted(turn=2),
    ]
    convo = conversation(events)
    through = len(events) - 2  # everything of turn 1
    compacted = Compacted(
        summary="## Task\nthe old task", through=through, tokens_before=100, tokens_after=20
    )
    events.append(compacted)
    convo.apply(compacted, len(events))
    assert [type(m) for m in convo.messages] == [UserMessage, UserMessage]
    assert convo.messages[0].text.startswith("[context compacted]")
    assert "## Task\nthe old task" in convo.messages[0].text
    assert "the request this turn" not in convo.messages[0].text  # its input is kept
    assert convo.messages[1] == UserMessage("new task")
    assert conversation(events).snapshot() == convo.snapshot()
    assert convo.compactions == 1


def test_a_cut_inside_a_turn_repeats_its_request_and_a_second_one_carries_it() -> None:
    events = turn_events(1, "THE TASK", ["a", "b", "c"], "done")[:-2]
    convo = conversation(events)
    cut = plan_cut(convo.entries, keep_tokens=0)
    assert cut is not None
    first = Compacted(summary="## Task\none", through=cut.through, tokens_before=9, tokens_after=3)
    events.append(first)
    convo.apply(first, len(events))
    assert "[the request this turn is working on, as it was given]\nTHE TASK" in (
        convo.messages[0].text
    )
    # More steps, then a second compaction: the old summary goes, the request stays.
    for index, output in enumerate(["d", "e"], start=10):
        reply = AssistantReply(text="", tool_calls=(call(f"c{index}"),))
        events += [reply, finished(f"c{index}", output, cell=index)]
        convo.apply(events[-2], len(events) - 1)
        convo.apply(events[-1], len(events))
    cut = plan_cut(convo.entries, keep_tokens=0)
    assert cut is not None and cut.index > 1
    second = Compacted(summary="## Task\ntwo", through=cut.through, tokens_before=9, tokens_after=3)
    events.append(second)
    convo.apply(second, len(events))
    texts = [m.text for m in convo.messages]
    assert "## Task\ntwo" in texts[0] and "## Task\none" not in texts[0]
    assert "THE TASK" in texts[0]
    assert sum("[context compacted]" in t for t in texts) == 1
    assert conversation(events).snapshot() == convo.snapshot()


def test_an_interrupted_call_is_answered_with_its_reply() -> None:
    events: list[Event] = [
        UserInput(text="t"),
        AssistantReply(text="", tool_calls=(call("a"), call("b"))),
        finished("a", "A"),
        UserInput(text="next"),  # b was never run: closed here, with the reply's seq
    ]
    convo = conversation(events)
    closing = [e for e in convo.entries if isinstance(e.message, ToolResult)][-1]
    assert closing.message.call_id == "b" and closing.seq == 2
    cut = plan_cut(convo.entries, keep_tokens=0)
    assert cut is not None and convo.entries[cut.index].message == UserMessage("next")
    assert cut.through == 3


def test_the_fenced_protocol_compacts_the_same_way() -> None:
    events: list[Event] = [
        UserInput(text="task"),
        AssistantReply(text="```python\nprint(1)\n```", fenced=True),
        finished("f1", "1"),
        AssistantReply(text="```python\nprint(2)\n```", fenced=True),
        finished("f2", "2", cell=2),
    ]
    convo = conversation(events, fenced=True)
    cut = plan_cut(convo.entries, keep_tokens=0)
    assert cut is not None
    assert [e.kind for e in convo.entries[cut.index :]] == ["reply", "result"]


# ------------------------------------------------------------- the summary


def test_the_transcript_fits_its_budget_and_keeps_the_earlier_summary() -> None:
    entries = [
        Entry(1, "summary", UserMessage("SUMMARY " + "s" * 500)),
        Entry(2, "input", UserMessage("task")),
        *(Entry(3 + i, "result", ToolResult(f"c{i}", "r" * 5000)) for i in range(20)),
    ]
    text = render_transcript(entries, budget=6000)
    assert len(text) <= 6000 + 200
    assert text.startswith("[summary of the earlier work]\nSUMMARY")
    assert "earlier items left out" in text or "characters left out" in text
    prompt = summary_prompt(entries, 6000, "keep the file names")
    assert "It begins with the summary of earlier work." in prompt
    assert "keep the file names" in prompt


def test_the_transcript_shows_each_cell_code() -> None:
    entries = [Entry(1, "reply", AssistantMessage("let me look", (call("a", "print(42)"),)))]
    text = render_transcript(entries, budget=10_000)
    assert "[assistant]\nlet me look" in text
    assert "[assistant runs a cell]\nprint(42)" in text


def test_summaries_are_parsed_into_sections() -> None:
    assert parse_summary("Sure! Here it is:\n## Task\nt\n## Progress\np", 1000) == (
        "## Task\nt\n## Progress\np"
    )
    assert parse_summary("just prose", 1000) == "## Summary\njust prose"
    assert parse_summary("<think>hmm</think>\n## Task\nt", 1000) == "## Task\nt"
    assert parse_summary("  \n ", 1000) is None
    long = parse_summary("## Task\n" + "x" * 5000, 1000)
    assert long is not None and len(long) <= 1000
    message = summary_message("## Task\nt", ["do it"])
    assert "history.search" in message and message.endswith("do it")


# ------------------------------------------------------------- history reads


def test_event_text_and_excerpts() -> None:
    assert event_text(CellStarted(cell=1, call_id="a", code="print(1)")) == "print(1)"
    assert event_text(ModelUsage(model="needle", input_tokens=1, output_tokens=1)) == ""
    assert event_text(Notice(text="a notice")) == "a notice"
    assert event_text(TurnEnded(turn=1, reason="answered", answer="yes")) == "yes"
    text = "a" * 1000 + "NEEDLE" + "b" * 1000
    cut = excerpt(text, "needle", width=100)
    assert "NEEDLE" in cut and cut.startswith("…") and cut.endswith("…")
    assert len(cut) <= 102


@pytest.fixture
def store() -> Store:
    return Store.memory()


def test_search_covers_events_and_full_cell_outputs(store: Store) -> None:
    row = store.create_session(model="faux/x", cwd="/", workspace="/w")
    sid = row.id
    events = turn_events(1, "find the Needle", ["short"], "done")
    records = store.append_many(sid, events)
    # The full output of cell 1 held what the model was never shown.
    store.put_cell_output(sid, 100, "t1s0", "short" + "z" * 9000 + "HIDDEN_needle_50%" + "z" * 100)
    store.append_many(sid, turn_events(2, "no match here", ["also none"], "bye"))

    hits = store_history.search(store, sid, "needle", limit=10)
    assert [h.type for h in hits] == ["cell_finished", "user_input"]  # newest first
    cell_hit = hits[0]
    assert cell_hit.full and cell_hit.cell == 100 and cell_hit.turn == 1
    assert "HIDDEN_needle_50%" in cell_hit.text
    assert hits[1].turn == 1 and hits[1].text == "find the Needle"
    # LIKE's wildcards are literal; a non-ASCII query is matched without SQL.
    assert [h.type for h in store_history.search(store, sid, "_50%", limit=10)] == ["cell_finished"]
    store.append(sid, Notice(text="ÉCOLE"))
    assert [h.text for h in store_history.search(store, sid, "école", limit=10)] == ["ÉCOLE"]
    # Field names and bookkeeping never match.
    assert store_history.search(store, sid, "call_id", limit=10) == []
    skip = {records[0].seq}
    assert [h.type for h in store_history.search(store, sid, "needle", limit=10, skip=skip)] == [
        "cell_finished"
    ]
    assert len(store_history.search(store, sid, "e", limit=3)) == 3


def test_turns_number_every_event(store: Store) -> None:
    sid = store.create_session(model="faux/x", cwd="/", workspace="/w").id
    store.append_many(sid, turn_events(1, "one", ["a"], "A"))
    store.append(sid, Notice(text="between turns"))
    store.append_many(sid, turn_events(2, "two", ["b"], "B"))
    recent = store_history.recent(store, sid, type=None, after=None, limit=100)
    turns = {(e.record.event.type, e.turn) for e in recent}
    assert ("notice", None) in turns
    assert {e.turn for e in recent if e.record.event.type == "user_input"} == {1, 2}
    second = store_history.turn(store, sid, 2, limit=100)
    assert [e.record.event.type for e in second][:2] == ["user_input", "turn_started"]
    assert second[-1].record.event.type == "turn_ended" and {e.turn for e in second} == {2}
    only = store_history.recent(store, sid, type="turn_ended", after=None, limit=1)
    assert [e.to_dict()["answer"] for e in only] == ["B"]
    first = store_history.recent(store, sid, type=None, after=0, limit=2)
    assert [e.to_dict()["type"] for e in first] == ["user_input", "turn_started"]
    with pytest.raises(ValueError, match="unknown event type"):
        store_history.recent(store, sid, type="bogus", after=None, limit=1)


def test_an_earlier_summary_is_summarized_without_its_note_to_the_agent() -> None:
    entry = Entry(1, "summary", UserMessage(summary_message("## Task\nthe task", ["do it"])))
    text = render_transcript([entry], budget=10_000)
    assert text.startswith("[summary of the earlier work]\n## Task\nthe task")
    assert "[context compacted]" not in text and "do it" in text


# ------------------------------------------------------------ the controller


class Recorder:
    def __init__(self, convo: Conversation) -> None:
        self.convo = convo
        self.events: list[Event] = []

    def __call__(self, event: Event) -> EventRecord:
        self.events.append(event)
        seq = 1000 + len(self.events)
        self.convo.apply(event, seq)
        return EventRecord(seq, "s", 0.0, event)


def compactor(
    convo: Conversation, replies: list[StreamEvent], window: int, *, auto: bool = True
) -> Compactor:
    def call_model(request: Request) -> AsyncIterator[StreamEvent]:
        async def stream() -> AsyncIterator[StreamEvent]:
            yield replies.pop(0)

        return stream()

    async def no_sleep(delay: float) -> None:
        return None

    gateway = Gateway(
        GatewayDeps(
            provider=call_model,
            model_name="m",
            model_ref="faux/m",
            cost=lambda usage: None,
            clock=lambda: 0.0,
            max_retries=0,
            retry_sleep=no_sleep,
        )
    )
    return Compactor(
        CompactorDeps(
            session_id="s",
            conversation=convo,
            window=window,
            system=lambda: "system",
            gateway=gateway,
            record=Recorder(convo),
            auto=auto,
        )
    )


async def test_a_failed_compaction_is_told_and_not_retried_at_once() -> None:
    events = turn_events(1, "task", ["o" * 9000, "p" * 9000], "done")[:-2]
    convo = conversation(events)
    replies: list[StreamEvent] = [
        Failed(kind="server_error", message="down"),
        Done(message=AssistantMessage("## Task\nt"), usage=Usage(input_tokens=9, output_tokens=3)),
    ]
    compacting = compactor(convo, replies, window=4000)
    recorder = compacting.deps.record
    assert isinstance(recorder, Recorder)
    assert compacting.due
    assert await compacting.make_room() is False
    [notice] = recorder.events
    assert isinstance(notice, Notice) and "server_error: down" in notice.text
    assert await compacting.make_room() is False  # not again before the context grows
    assert len(recorder.events) == 1
    for index in range(2):
        convo.apply(AssistantReply(text="", tool_calls=(call(f"n{index}"),)), 500 + 2 * index)
        convo.apply(finished(f"n{index}", "q" * 9000, cell=900 + index), 501 + 2 * index)
    assert await compacting.make_room() is True
    usage, done = recorder.events[1:]
    assert isinstance(usage, ModelUsage) and usage.step == 0
    assert isinstance(done, Compacted) and done.reason == "auto"
    assert convo.messages[0].text.startswith("[context compacted]")
    assert not compacting.due or len(units(convo.entries)) == 1


async def test_with_compaction_off_only_the_agent_compacts() -> None:
    events = turn_events(1, "task", ["o" * 9000, "p" * 9000], "done")[:-2]
    convo = conversation(events)
    summary = Done(message=AssistantMessage("## Task\nt"), usage=Usage(input_tokens=9))
    compacting = compactor(convo, [summary], window=4000, auto=False)
    assert compacting.due  # past the window, yet nothing happens by itself
    assert await compacting.make_room() is False
    assert await compacting.make_room(overflow=True) is False
    assert convo.compactions == 0
    reply = await compacting.compact("agent")
    assert reply.compacted and convo.compactions == 1

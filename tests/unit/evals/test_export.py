"""A session's events as chat messages: hand-built logs, exact messages, and
the result accepted by the openai SDK's own message types."""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from recursa.evals.export import protocol_of, session_messages, session_record, write_records
from recursa.models.types import ToolCall
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Compacted,
    Event,
    EventRecord,
    InputPlaced,
    ModelUsage,
    SessionCreated,
    TextDelta,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.protocol.wire import SessionInfo
from recursa.session.context import ANSWER_HINT, BASE_PROMPT, FENCED_PROMPT

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])


def log(*events: Event) -> list[EventRecord]:
    return [EventRecord(seq, "s-1", 0.0, event) for seq, event in enumerate(events, 1)]


def call(call_id: str, code: str) -> ToolCall:
    return ToolCall(call_id, "python", json.dumps({"code": code}))


def cell(n: int, call_id: str, code: str, output: str) -> tuple[Event, Event]:
    return (
        CellStarted(cell=n, call_id=call_id, code=code),
        CellFinished(cell=n, call_id=call_id, status="ok", output=output, chars=len(output)),
    )


def two_cells() -> list[Event]:
    return [
        SessionCreated(model="openai/m", cwd="/w"),
        UserInput(text="add two numbers"),
        TurnStarted(turn=1),
        AssistantReply(text="", tool_calls=(call("c1", "x = 2 + 3"),), step=1),
        ModelUsage(model="openai/m", input_tokens=10, output_tokens=5, step=1),
        *cell(1, "c1", "x = 2 + 3", ""),
        AssistantReply(text="Now print it.", tool_calls=(call("c2", "print(x)"),), step=2),
        *cell(2, "c2", "print(x)", "5\n"),
        AssistantReply(text="FINAL ANSWER: 5", step=3),
        TurnEnded(turn=1, reason="answered", answer="5"),
    ]


def test_a_two_cell_session_is_the_exact_chat_the_model_saw() -> None:
    messages = session_messages(log(*two_cells()))
    assert messages == [
        {"role": "system", "content": BASE_PROMPT},
        {"role": "user", "content": "add two numbers"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "python", "arguments": '{"code": "x = 2 + 3"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "(no output)"},
        {
            "role": "assistant",
            "content": "Now print it.",
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "python", "arguments": '{"code": "print(x)"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "5\n"},
        {"role": "assistant", "content": "FINAL ANSWER: 5"},
    ]
    MESSAGES.validate_python(messages)


def test_inputs_read_as_the_model_read_them() -> None:
    """A placed variable is described, a sub-agent's message is prefixed, a
    steering message lands between cells; transient records are ignored."""
    events = [
        InputPlaced(name="context", origin="file", chars=9000, lines=120, label="doc.txt"),
        UserInput(text="Find the needle. (`context`: doc.txt, 9,000 characters)"),
        TurnStarted(turn=1),
        AssistantReply(text="", tool_calls=(call("c1", "len(context)"),), step=1),
        *cell(1, "c1", "len(context)", "9000"),
        UserInput(text="the needle is numeric", source="child", sender="kid", mode="steer"),
        AssistantReply(text="42", step=2),
    ]
    records = log(*events)
    records.insert(3, EventRecord(0, "s-1", 0.0, TextDelta(text="partial")))
    messages = session_messages(records)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert messages[1]["content"] == "Find the needle. (`context`: doc.txt, 9,000 characters)"
    assert messages[4]["content"] == "[message from a sub-agent kid] the needle is numeric"
    MESSAGES.validate_python(messages)


def test_a_call_cut_off_by_an_interruption_is_answered_as_not_run() -> None:
    events = [
        UserInput(text="go"),
        AssistantReply(text="", tool_calls=(call("a", "1"), call("b", "2")), step=1),
        *cell(1, "a", "1", "1"),
        TurnEnded(turn=1, reason="interrupted"),
    ]
    messages = session_messages(log(*events))
    assert [(m["role"], m.get("tool_call_id")) for m in messages[2:]] == [
        ("assistant", None),
        ("tool", "a"),
        ("tool", "b"),
    ]
    assert messages[-1]["content"].startswith("(not run")
    MESSAGES.validate_python(messages)


def compacted_log() -> list[Event]:
    events = two_cells()
    summary = Compacted(
        summary="added 2 and 3: x = 5", through=12, tokens_before=900, tokens_after=60
    )
    return [*events, summary, UserInput(text="double it"), AssistantReply(text="10", step=1)]


def test_full_view_keeps_every_message_and_notes_the_compaction() -> None:
    records = log(*compacted_log())
    info = SessionInfo("s-1", None, None, "idle", "openai/m", "/w", 0.0, 0.0)
    record = session_record(info, records, root="s-1")
    messages = record["messages"]
    assert len(messages) == 7 + 2
    assert messages[-2:] == [
        {"role": "user", "content": "double it"},
        {"role": "assistant", "content": "10"},
    ]
    [note] = record["compactions"]
    assert note["at"] == 7  # the seven messages before it are the system prompt and six
    assert (note["summary"], note["through"], note["seq"]) == ("added 2 and 3: x = 5", 12, 13)
    assert record["tools"][0]["function"]["name"] == "python"
    assert (record["protocol"], record["model"], record["parent"]) == ("tools", "openai/m", None)


def test_seen_view_is_the_context_after_the_compaction() -> None:
    messages = session_messages(log(*compacted_log()), view="seen")
    assert [m["role"] for m in messages] == ["system", "user", "user", "assistant"]
    assert messages[1]["content"].startswith("[context compacted]")
    assert "added 2 and 3: x = 5" in messages[1]["content"]
    MESSAGES.validate_python(messages)


def test_a_fenced_session_is_exported_as_fenced_text() -> None:
    events = [
        UserInput(text="2 ** 10?"),
        AssistantReply(
            text="```python\nprint(2 ** 10)\n```",
            tool_calls=(call("f1", "print(2 ** 10)"),),
            fenced=True,
            step=1,
        ),
        *cell(1, "f1", "print(2 ** 10)", "1024\n"),
        AssistantReply(text="FINAL ANSWER: 1024", fenced=True, step=2),
    ]
    records = log(*events)
    assert protocol_of(records) == "fenced"
    messages = session_messages(records)
    assert messages == [
        {"role": "system", "content": FENCED_PROMPT},
        {"role": "user", "content": "2 ** 10?"},
        {"role": "assistant", "content": "```python\nprint(2 ** 10)\n```"},
        {"role": "user", "content": f"Output:\n```\n1024\n```\n{ANSWER_HINT}"},
        {"role": "assistant", "content": "FINAL ANSWER: 1024"},
    ]
    info = SessionInfo("s-1", "k", "s-0", "idle", "local/x", "/w", 0.0, 0.0)
    assert "tools" not in session_record(info, records, root="s-0")


def test_records_are_one_json_object_a_line_even_with_undecodable_text() -> None:
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            lines.append(text)
            return len(text)

    records: list[dict[str, Any]] = [{"a": "caf\udce9"}, {"b": 1}]
    assert write_records(records, Sink()) == 2  # type: ignore[arg-type]
    assert [json.loads(line) for line in lines] == [{"a": "caf\udce9"}, {"b": 1}]
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)


def test_a_fenced_session_can_be_rewritten_as_tool_calls() -> None:
    events = [
        UserInput(text="2 ** 10?"),
        AssistantReply(
            text="Let me compute.\n```python\nprint(2 ** 10)\n```\nThe answer will be 1024.",
            tool_calls=(call("fenced_1_1", "print(2 ** 10)"),),
            fenced=True,
            step=1,
        ),
        *cell(1, "fenced_1_1", "print(2 ** 10)", "1024\n"),
        AssistantReply(text="FINAL ANSWER: 1024", fenced=True, step=2),
    ]
    records = log(*events)
    messages = session_messages(records, as_tools=True)
    assert messages == [
        {"role": "system", "content": BASE_PROMPT},
        {"role": "user", "content": "2 ** 10?"},
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [
                {
                    "id": "fenced_1_1",
                    "type": "function",
                    "function": {"name": "python", "arguments": '{"code": "print(2 ** 10)"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "fenced_1_1", "content": "1024\n"},
        {"role": "assistant", "content": "FINAL ANSWER: 1024"},
    ]
    MESSAGES.validate_python(messages)
    info = SessionInfo("s-1", None, None, "idle", "local/x", "/w", 0.0, 0.0)
    record = session_record(info, records, root="s-1", as_tools=True)
    assert record["protocol"] == "fenced"
    assert record["tools"][0]["function"]["name"] == "python"

from __future__ import annotations

from pathlib import Path

from recursa.models.types import AssistantMessage, ToolCall, ToolResult, UserMessage
from recursa.protocol.events import AssistantReply, CellFinished, ModelUsage, UserInput
from recursa.session.context import (
    ANSWER_HINT,
    BASE_PROMPT,
    Conversation,
    find_context_files,
    system_prompt,
)


def finished(call_id: str, output: str, cell: int = 1) -> CellFinished:
    return CellFinished(cell=cell, call_id=call_id, status="ok", output=output, chars=len(output))


def test_context_files_from_the_root_down(tmp_path: Path) -> None:
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    (tmp_path / "AGENTS.md").write_text("outer rules")
    (inner / "CLAUDE.md").write_text("inner rules")
    (tmp_path / "a" / "AGENTS.md").mkdir()  # a directory named like the file is skipped
    files = find_context_files(inner)
    texts = [f.text for f in files]
    assert texts == ["outer rules", "inner rules"]
    prompt = system_prompt(BASE_PROMPT, files)
    assert prompt.startswith(BASE_PROMPT)
    assert prompt.index("outer rules") < prompt.index("inner rules")


def test_native_projection_pairs_tool_calls_with_results() -> None:
    convo = Conversation(fenced=False)
    calls = (ToolCall("a", "python", '{"code": "1"}'), ToolCall("b", "python", '{"code": "2"}'))
    for event in [
        UserInput(text="task"),
        AssistantReply(text="", tool_calls=calls),
        ModelUsage(model="m", input_tokens=1, output_tokens=1),
        finished("a", "1"),
        finished("b", ""),
    ]:
        convo.apply(event)
    assert convo.messages == [
        UserMessage("task"),
        AssistantMessage("", calls),
        ToolResult("a", "1"),
        ToolResult("b", "(no output)"),
    ]


def test_unanswered_calls_are_closed_before_the_conversation_moves_on() -> None:
    convo = Conversation(fenced=False)
    convo.apply(
        AssistantReply(
            text="", tool_calls=(ToolCall("a", "python", "{}"), ToolCall("b", "python", "{}"))
        )
    )
    convo.apply(finished("a", "ok"))
    convo.apply(UserInput(text="what happened?"))
    results = [m for m in convo.messages if isinstance(m, ToolResult)]
    assert [r.call_id for r in results] == ["a", "b"]
    assert "not run" in results[1].text
    assert convo.messages[-1] == UserMessage("what happened?")


def test_a_resumed_turn_closes_the_calls_that_never_ran() -> None:
    # A crash after a reply with two calls, before the second cell started:
    # the resumed turn calls the model with no new input or reply in between.
    convo = Conversation(fenced=False)
    convo.apply(
        AssistantReply(
            text="", tool_calls=(ToolCall("a", "python", "{}"), ToolCall("b", "python", "{}"))
        )
    )
    convo.apply(finished("a", "interrupted"))
    convo.close_unanswered()
    results = [m for m in convo.snapshot() if isinstance(m, ToolResult)]
    assert [r.call_id for r in results] == ["a", "b"] and "not run" in results[1].text
    assert isinstance(convo.snapshot()[-1], ToolResult)


def test_fenced_projection_feeds_outputs_back_as_user_messages() -> None:
    convo = Conversation(fenced=True)
    convo.apply(UserInput(text="task"))
    convo.apply(
        AssistantReply(
            text="```python\nprint(1)\n```",
            tool_calls=(ToolCall("f", "python", "print(1)"),),
            fenced=True,
        )
    )
    convo.apply(finished("f", "1\n"))
    assert convo.messages[1] == AssistantMessage("```python\nprint(1)\n```")
    assert convo.messages[2] == UserMessage("Output:\n```\n1\n```\n" + ANSWER_HINT)


def test_inputs_from_other_agents_are_labelled() -> None:
    convo = Conversation(fenced=False)
    convo.apply(UserInput(text="done", source="child", sender="worker-1"))
    assert convo.messages == [UserMessage("[message from a sub-agent worker-1] done")]

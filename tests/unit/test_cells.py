from __future__ import annotations

import json

import pytest

from recursa.models.types import ToolCall
from recursa.session.cells import check_tool_call, final_answer, parse_fenced


def call(arguments: str, name: str = "python") -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=arguments)


def test_a_well_formed_call_becomes_a_cell() -> None:
    request = check_tool_call(call(json.dumps({"code": "print(1)"})))
    assert (request.call_id, request.code, request.error) == ("c1", "print(1)", None)


@pytest.mark.parametrize(
    ("arguments", "name", "fragment"),
    [
        ('{"code": "print(1)"', "python", "not valid JSON"),
        ('{"source": "print(1)"}', "python", 'string "code"'),
        ('["print(1)"]', "python", 'string "code"'),
        ('{"code": "   "}', "python", "empty"),
        ('{"code": "1"}', "bash", "no tool named 'bash'"),
    ],
)
def test_malformed_calls_are_rejected_with_a_message_for_the_model(
    arguments: str, name: str, fragment: str
) -> None:
    request = check_tool_call(call(arguments, name))
    assert request.code is None
    assert request.error is not None
    assert fragment in request.error


def test_fenced_reply_runs_its_first_block_only() -> None:
    text = "Let me compute.\n```python\nx = 2\nprint(x)\n```\nand\n```python\nprint(3)\n```"
    parsed = parse_fenced(text)
    assert parsed.code == "x = 2\nprint(x)"
    assert parsed.ignored_blocks == 1
    assert parsed.answer is None


def test_fenced_bash_block_becomes_a_bash_cell() -> None:
    assert parse_fenced("```bash\nls -la\n```").code == "%%bash\nls -la"


def test_fenced_unterminated_block_still_runs() -> None:
    assert parse_fenced("```python\nprint('cut off')").code == "print('cut off')"


def test_fenced_answer_marker_and_plain_answer() -> None:
    assert parse_fenced("The sum is large.\nFINAL ANSWER: 338350").answer == "338350"
    assert parse_fenced("It is 42.").answer == "It is 42."
    # An empty code fence is not code.
    assert parse_fenced("```python\n\n```\nFINAL ANSWER: 7").answer == "7"


def test_code_with_an_answer_runs_the_code_first() -> None:
    parsed = parse_fenced("```python\nprint(6*7)\n```\nFINAL ANSWER: 42")
    assert parsed.code == "print(6*7)"
    assert parsed.answer is None


def test_final_answer_takes_the_last_marker() -> None:
    assert final_answer("final answer: 1\nwait\nFINAL ANSWER: 2") == "2"


def test_history_keeps_a_fenced_reply_only_up_to_its_first_block() -> None:
    parsed = parse_fenced(
        "I'll check.\n```python\nprint(2)\n```\nFINAL ANSWER: 461\n```python\nprint(3)\n```"
    )
    assert parsed.kept == "I'll check.\n```python\nprint(2)\n```"
    assert parse_fenced("```python\nprint(1)").kept == "```python\nprint(1)\n```"
    assert parse_fenced("It is 7.").kept == "It is 7."


def test_a_bare_final_answer_call_is_an_answer() -> None:
    assert final_answer('Done.\nfinal_answer("338350")') == "338350"
    assert final_answer("final_answer(42)") == "42"


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        # The suggested cell copied without its fence, then prose copied from the prompt.
        (
            'search(context, "Question: who?")\nsearch again with other words if it is not there)',
            'search(context, "Question: who?")',
        ),
        (
            'x = search(context, "a")\nprint(x)\nThe answer is above.',
            'x = search(context, "a")\nprint(x)',
        ),
        ('r = await rlm("look it up")', 'r = await rlm("look it up")'),
        ("print(6 * 7)", "print(6 * 7)"),
    ],
)
def test_a_bare_call_without_a_fence_runs_as_a_cell(reply: str, code: str) -> None:
    parsed = parse_fenced(reply)
    assert parsed.code == code
    assert parsed.answer is None
    assert parsed.kept == f"```python\n{code}\n```"


@pytest.mark.parametrize(
    "reply",
    [
        "4430567",
        "Richard Strauss",
        "yes",
        "The answer is f(x).",
        "result = 5",  # nothing called: a statement of the answer, not work
        "import math",
        "Paris: the capital",
        'final_answer("Paris")',
        "FINAL ANSWER: print(3)",
    ],
)
def test_an_answer_that_merely_looks_like_python_stays_an_answer(reply: str) -> None:
    parsed = parse_fenced(reply)
    assert parsed.code is None
    assert parsed.answer is not None

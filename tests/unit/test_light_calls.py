"""The pure parts of ``llm()``: the kernel side's argument checks and the
runtime's reply cap and transcript line."""

from __future__ import annotations

import pytest

from recursa.api.llm import (
    MAX_BATCH,
    call_body,
    check_concurrency,
    check_max_tokens,
    check_prompts,
)
from recursa.errors import UsageError
from recursa.protocol.kernel_ops import LlmCall, LlmReply
from recursa.protocol.wire import from_json
from recursa.runtime.light_calls import (
    DEFAULT_REPLY_TOKENS,
    MAX_REPLY_TOKENS,
    reply_cap,
    transcript_line,
)


def test_a_call_body_carries_its_checked_arguments() -> None:
    body = call_body("hi", "faux/x", "be brief", 10, "prompt")
    assert body == {"prompt": "hi", "model": "faux/x", "system": "be brief", "max_tokens": 10}
    assert from_json(LlmCall, body) == LlmCall("hi", "faux/x", "be brief", 10)


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        (b"abc", TypeError, "prompt must be a str, not bytes"),
        ("", ValueError, "prompt is empty"),
    ],
)
def test_a_bad_prompt_is_refused_before_any_request(
    value: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=f"^{text}$"):
        call_body(value, None, None, None, "prompt")


def test_batch_arguments_are_bounded() -> None:
    assert check_prompts(iter(["a", "b"])) == ["a", "b"]
    with pytest.raises(TypeError, match="not str"):
        check_prompts("one prompt")
    with pytest.raises(TypeError, match="not int"):
        check_prompts(5)
    with pytest.raises(ValueError, match=f"at most {MAX_BATCH} prompts"):
        check_prompts("x" for _ in range(MAX_BATCH + 1))
    assert check_concurrency(64) == 64
    for bad in (0, 65, -1):
        with pytest.raises(ValueError, match="from 1 to 64"):
            check_concurrency(bad)
    for wrong in (True, 2.0, "3"):
        with pytest.raises(TypeError):
            check_concurrency(wrong)
    assert check_max_tokens(None) is None
    with pytest.raises(TypeError, match="max_tokens must be an int, not bool"):
        check_max_tokens(True)


def test_the_wire_refuses_what_a_hostile_kernel_could_send() -> None:
    for body, field in (
        ({"prompt": ""}, "prompt"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ({"prompt": "x", "model": ""}, "model"),
        ({"prompt": 3}, "prompt"),
    ):
        with pytest.raises(ValueError, match=f"^{field} must be"):
            from_json(LlmCall, body)


def test_the_reply_cap_leaves_the_prompt_its_room() -> None:
    assert reply_cap(None, "p", "s", None, "m") == DEFAULT_REPLY_TOKENS
    assert reply_cap(10, "p", "s", 8192, "m") == 10
    # 4,000 characters are about 1,000 tokens: 100 left of a window of 1,100.
    assert reply_cap(None, "x" * 3996, "sys!", 1100, "m") == 100
    with pytest.raises(UsageError, match="does not fit local/default's context window of 1,000"):
        reply_cap(None, "x" * 3996, "sys!", 1000, "local/default")
    with pytest.raises(UsageError, match=f"at most {MAX_REPLY_TOKENS:,}"):
        reply_cap(MAX_REPLY_TOKENS + 1, "p", "s", None, "m")


def test_the_transcript_line_shows_heads_and_tokens() -> None:
    reply = LlmReply("y" * 500, "faux/m", 12, 3400, cost=0.5, cut_off=True)
    line = transcript_line("a\nprompt", reply)
    assert line.startswith("llm() faux/m: 'a prompt' -> 'yyy")
    assert "…' (cut off at its cap) [12 in, 3,400 out, $0.5000]" in line
    assert len(line) < 250

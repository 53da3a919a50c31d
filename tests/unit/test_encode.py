"""Request bodies encoded with each message's JSON kept between calls: the
bytes are what the SDK's own encoder gives for the whole body, and a message
is translated once per conversation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from openai._utils._json import openapi_dumps

from recursa.config import Config, ProviderConfig
from recursa.models._encode import MessageJSON, encode_body
from recursa.models.openai import (
    COMPATIBLE_DIALECT,
    OFFICIAL_DIALECT,
    OpenAIProvider,
    build_body,
    translate_message,
)
from recursa.models.types import (
    AssistantMessage,
    Message,
    Request,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
)

TOOL = ToolSpec("python", "Run a cell.", {"type": "object", "properties": {"code": {}}})
HISTORY: tuple[Message, ...] = (
    UserMessage('compute x — «naïve» 数据 \u2028 "quoted" \\ back'),
    AssistantMessage("", (ToolCall("call_a", "python", '{"code": "x = 1"}'),)),
    ToolResult("call_a", "ok\n"),
    AssistantMessage("done", ()),
)
REQUESTS = [
    Request(model="m", system="Be brief.", messages=HISTORY, tools=(TOOL,), cache_key="c1"),
    Request(model="m", system="", messages=HISTORY[:1]),
    Request(
        model="m",
        system="s",
        messages=HISTORY,
        max_output_tokens=300,
        temperature=0.25,
        stop=("STOP",),
        cache_key="c2",
    ),
    Request(model="m", system="s", messages=()),
]


def provider(tmp_path: Path) -> OpenAIProvider:
    table = ProviderConfig(name="openai", kind="openai", base_url="http://127.0.0.1:9/v1")
    return OpenAIProvider(table, Config(home=tmp_path), dialect=OFFICIAL_DIALECT)


@pytest.mark.parametrize("request_", REQUESTS)
def test_the_bytes_are_the_sdks_encoding_of_the_whole_body(
    request_: Request, tmp_path: Path
) -> None:
    ours = provider(tmp_path)
    for dialect in (OFFICIAL_DIALECT, COMPATIBLE_DIALECT):
        ours.dialect = dialect
        want = openapi_dumps(build_body(request_, dialect))
        assert ours.encode(request_) == want
        assert ours.encode(request_) == want  # again, from the kept pieces


def test_encode_body_puts_the_pieces_at_the_key_wherever_it_is() -> None:
    body = {"a": 1, "xs": ["ignored"], "b": {"c": "d"}}
    assert encode_body(body, "xs", ['{"y":2}', "3"]) == b'{"a":1,"xs":[{"y":2},3],"b":{"c":"d"}}'
    assert encode_body({"xs": []}, "xs", []) == b'{"xs":[]}'
    assert encode_body({"xs": [], "z": None}, "xs", ["1"]) == b'{"xs":[1],"z":null}'


def test_a_message_is_translated_once_per_conversation() -> None:
    translated: list[Message] = []

    def counting(message: Message) -> list[dict[str, object]]:
        translated.append(message)
        return list(translate_message(message))  # type: ignore[arg-type]

    kept = MessageJSON(counting, conversations=2)
    first = kept.pieces("c", HISTORY[:2])
    assert kept.pieces("c", HISTORY)[:2] == first
    assert translated == [*HISTORY[:2], *HISTORY[2:]]  # only the new ones the second time
    # An equal message that is another object is encoded anew (pieces follow
    # objects, not values), and one that left the conversation is let go.
    copy = replace(HISTORY[0])  # type: ignore[type-var]
    translated.clear()
    kept.pieces("c", (copy, HISTORY[3]))
    assert translated == [copy]
    kept.pieces("c", HISTORY[:1])
    assert translated == [copy, HISTORY[0]]
    # Unnamed conversations keep nothing; the least recently used one goes first.
    translated.clear()
    kept.pieces(None, HISTORY[:1])
    kept.pieces(None, HISTORY[:1])
    assert translated == [HISTORY[0], HISTORY[0]]
    kept.pieces("d", HISTORY[:1])
    kept.pieces("e", HISTORY[:1])  # "c" goes
    translated.clear()
    kept.pieces("d", HISTORY[:1])
    kept.pieces("c", HISTORY[:1])
    assert translated == [HISTORY[0]]  # "d" was kept, "c" was not


def test_kept_pieces_equal_a_fresh_encoding_through_growth_and_any_other_change() -> None:
    def translate(message: Message) -> list[dict[str, object]]:
        return list(translate_message(message))  # type: ignore[arg-type]

    kept = MessageJSON(translate)
    changes = [
        HISTORY[:1],
        HISTORY[:2],
        HISTORY,  # grown: only the new ones are encoded
        HISTORY,  # the same again
        HISTORY[1:],  # the first left (a compaction)
        (*HISTORY[1:], HISTORY[0]),  # reordered
        (),
        HISTORY,
    ]
    for messages in changes:
        pieces = kept.pieces("c", messages)
        assert pieces == kept.pieces(None, messages)
        pieces.insert(0, '{"role":"system"}')  # the caller's own list (encode() does this)
        assert kept.pieces("c", messages) == kept.pieces(None, messages)

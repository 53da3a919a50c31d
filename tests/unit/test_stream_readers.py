"""The adapters' own stream readers against the SDKs' parsing, on recorded streams.

Every recording in ``tests/fixtures/streams`` (recorded from the fake server by
``record.py`` there, plus hand-written ``*_wild.sse`` shapes it does not send)
is fed, in several splittings and line endings, to (a) the adapter's reader
(:class:`~recursa.models.openai.ChunkReader`,
:class:`~recursa.models.anthropic.EventReader`) and (b) the SDK's own
``AsyncStream`` of pydantic events, read by the translation the adapters used
before they read raw events (kept below as :func:`sdk_events`). The two lists
of recursa events must be equal, and each recording's result is also checked
against what it should be.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Literal

import anthropic
import httpx2
import openai
import pytest
from anthropic.types import (
    RawMessageStreamEvent,
)
from openai.types.chat import ChatCompletionChunk

from recursa.models._sdk import StreamReader
from recursa.models.anthropic import EventReader
from recursa.models.openai import ChunkReader
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from recursa.testing import sdk_reference

Vendor = Literal["openai", "anthropic"]
STREAMS = Path(__file__).parent.parent / "fixtures" / "streams"
RECORDINGS = sorted(p.stem for p in STREAMS.glob("*.sse"))
SECRET = "sk-secret-in-the-stream-0123"


def vendor_of(name: str) -> Vendor:
    return "openai" if name.startswith("openai") else "anthropic"


def reader_for(vendor: Vendor) -> StreamReader:
    if vendor == "openai":
        return ChunkReader("openai", (SECRET,), [{"role": "user", "content": "hi"}])
    return EventReader("anthropic", (SECRET,))


def reader_events(vendor: Vendor, chunks: Iterable[bytes]) -> list[StreamEvent]:
    """What the adapter's reader makes of ``chunks`` (the loop of ``SDKProvider._run``)."""
    reader = reader_for(vendor)
    events: list[StreamEvent] = []
    for chunk in chunks:
        events.extend(reader.feed(chunk))
        if reader.finished or reader.ended:
            break
    events.extend(reader.close())
    return events


# --- the SDK path: the adapters' translation before they read raw events ----------


async def _body(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def _response(vendor: Vendor, chunks: list[bytes]) -> httpx2.Response:
    path = "/v1/chat/completions" if vendor == "openai" else "/v1/messages"
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=_body(chunks),
        request=httpx2.Request("POST", f"http://127.0.0.1:9{path}"),
    )


async def sdk_events(vendor: Vendor, chunks: list[bytes]) -> list[StreamEvent]:
    """What the SDK's own stream parsing, read as the adapters read it before, makes of ``chunks``."""
    if vendor == "openai":
        return await _openai_sdk_events(chunks)
    return await _anthropic_sdk_events(chunks)


async def _openai_sdk_events(chunks: list[bytes]) -> list[StreamEvent]:
    client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0)
    try:
        stream = openai.AsyncStream(
            cast_to=ChatCompletionChunk, response=_response("openai", chunks), client=client
        )
        return await sdk_reference.openai_events(stream, (SECRET,))
    finally:
        await client.close()


async def _anthropic_sdk_events(chunks: list[bytes]) -> list[StreamEvent]:
    client = anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0)
    try:
        stream = anthropic.AsyncStream(
            cast_to=RawMessageStreamEvent,  # type: ignore[arg-type]
            response=_response("anthropic", chunks),
            client=client,
        )
        return await sdk_reference.anthropic_events(stream, (SECRET,))
    finally:
        await client.close()


# --- feeds -------------------------------------------------------------------------


def whole(data: bytes) -> list[bytes]:
    return [data]


def every_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def random_pieces(data: bytes) -> list[bytes]:
    rng = random.Random(len(data))
    out, at = [], 0
    while at < len(data):
        size = rng.randint(1, 97)
        out.append(data[at : at + size])
        at += size
    return out


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def cr(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r")


FEEDS: dict[str, Callable[[bytes], list[bytes]]] = {
    "whole": whole,
    "every_byte": every_byte,
    "random": random_pieces,
    "crlf_whole": lambda d: whole(crlf(d)),
    "crlf_every_byte": lambda d: every_byte(crlf(d)),
    "cr_random": lambda d: random_pieces(cr(d)),
}


@pytest.mark.parametrize("feed", FEEDS)
@pytest.mark.parametrize("name", RECORDINGS)
async def test_the_reader_and_the_sdk_agree_on_every_recording(name: str, feed: str) -> None:
    vendor = vendor_of(name)
    chunks = FEEDS[feed]((STREAMS / f"{name}.sse").read_bytes())
    ours = reader_events(vendor, chunks)
    theirs = await sdk_events(vendor, chunks)
    assert ours == theirs
    assert isinstance(ours[-1], Done | Failed)
    assert sum(isinstance(e, Done | Failed) for e in ours) == 1


def test_the_recordings_cover_both_vendors_and_every_scenario() -> None:
    stems = set(RECORDINGS)
    for vendor in ("openai", "anthropic"):
        for scenario in (
            "text",
            "tool_calls",
            "max_tokens",
            "stream_error",
            "incomplete",
            "garbled",
            "wild",
        ):
            assert f"{vendor}_{scenario}" in stems


def result_of(name: str) -> StreamEvent:
    return reader_events(vendor_of(name), [(STREAMS / f"{name}.sse").read_bytes()])[-1]


TOOL_MESSAGE = AssistantMessage(
    "Let me run that, caf\u00e9 \u2603.",
    (
        ToolCall("call_first0", "python", '{"code":"import math\\nprint(math.pi)"}'),
        ToolCall("call_second", "python", '{"code":"x = \'caf\\u00e9 \\u2603\'"}'),
    ),
)


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_tool_call_reply_streams_its_pieces_and_its_usage(vendor: Vendor) -> None:
    events = reader_events(vendor, [(STREAMS / f"{vendor}_tool_calls.sse").read_bytes()])
    assert events[-1] == Done(TOOL_MESSAGE, Usage(1200, 40, cached_tokens=1024), "tool_calls")
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    firsts = [(d.index, d.id, d.name) for d in deltas if d.id is not None]
    assert firsts == [(0, "call_first0", "python"), (1, "call_second", "python")]
    assert len(deltas) > 10  # incremental arguments, not one piece
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == TOOL_MESSAGE.text


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_other_endings(vendor: Vendor) -> None:
    done = result_of(f"{vendor}_max_tokens")
    assert isinstance(done, Done)
    assert done.stop_reason == "max_tokens"
    assert done.usage == Usage(9, 5)
    error = result_of(f"{vendor}_stream_error")
    assert isinstance(error, Failed)
    assert "The model is overloaded mid-answer." in error.message
    assert error.kind == ("server_error" if vendor == "openai" else "overloaded")
    incomplete = result_of(f"{vendor}_incomplete")
    assert isinstance(incomplete, Failed)
    assert (incomplete.kind, "ended before" in incomplete.message) == ("malformed", True)
    garbled = result_of(f"{vendor}_garbled")
    assert isinstance(garbled, Failed)
    assert (garbled.kind, "undecodable" in garbled.message) == ("malformed", True)


def test_openai_usage_is_estimated_only_when_the_server_reports_none() -> None:
    # The messages are made again (the whole conversation) only for an estimate.
    made: list[int] = []

    def messages() -> list[dict[str, str]]:
        made.append(1)
        return [{"role": "user", "content": "x" * 400}]

    def done_of(stream: bytes) -> Done:
        reader = ChunkReader("openai", (SECRET,), messages)
        events = [*reader.feed(stream), *reader.close()]
        assert isinstance(events[-1], Done)
        return events[-1]

    reported = done_of((STREAMS / "openai_tool_calls.sse").read_bytes())
    assert reported.usage == Usage(1200, 40, cached_tokens=1024) and made == []
    unreported = b"".join(
        line + b"\n\n"
        for line in (STREAMS / "openai_tool_calls.sse").read_bytes().split(b"\n\n")
        if line.strip() and b'"usage":{' not in line
    )
    estimated = done_of(unreported)
    assert made == [1] and estimated.usage.estimated
    assert estimated.usage.input_tokens > 100  # the 400 characters, at four a token


def test_openai_wild_shapes() -> None:
    """Comments, ``data:`` without a space, a refusal, a second choice, one event's
    JSON over several data lines, a "stop" that carried tool calls, cache
    writes, and bytes after ``[DONE]`` that are never read."""
    events = reader_events("openai", [(STREAMS / "openai_wild.sse").read_bytes()])
    assert events[-1] == Done(
        AssistantMessage(
            "I cannot do all of that. But this:",
            (
                ToolCall("call_wild_a", "python", '{"code": "print(1)"}'),
                ToolCall("call_wild_b", "python", "{}"),
            ),
        ),
        Usage(2100, 33, cached_tokens=2048, cache_write_tokens=12),
        "tool_calls",
    )


def test_anthropic_wild_shapes() -> None:
    """Thinking and signature deltas, an unnamed event, a text block that starts
    with text, citations, empty data, a server tool, and a tool_use whose
    input comes whole with its start."""
    events = reader_events("anthropic", [(STREAMS / "anthropic_wild.sse").read_bytes()])
    assert events[-1] == Done(
        AssistantMessage(
            "Hi. Here it is",
            (
                ToolCall("toolu_wild_a", "python", '{"code": "print(\'whole\')"}'),
                ToolCall("toolu_wild_b", "python", '{"code": "1"}'),
            ),
        ),
        Usage(2130, 57, cached_tokens=2000, cache_write_tokens=100),
        "tool_calls",
    )


ERROR_EVENTS: list[tuple[Vendor, bytes]] = [
    ("openai", b'data: {"error": "a bare string"}\n\n'),
    ("openai", b'data: {"error": {"message": "' + SECRET.encode() + b' leaked", "code": 42}}\n\n'),
    ("openai", b'data: {"error": {"type": "rate_limit_exceeded", "message": ""}}\n\n'),
    (
        "anthropic",
        b'event: error\ndata: {"type": "error", "error": {"type": "api_error", "message": "'
        + SECRET.encode()
        + b'", "details": {"error_code": "context_length_exceeded"}}}\n\n',
    ),
]


@pytest.mark.parametrize(("vendor", "data"), ERROR_EVENTS)
async def test_error_events_fail_as_the_sdk_path_did_and_never_echo_a_secret(
    vendor: Vendor, data: bytes
) -> None:
    ours = reader_events(vendor, [data])
    assert ours == await sdk_events(vendor, [data])
    failed = ours[-1]
    assert isinstance(failed, Failed)
    assert SECRET not in failed.message
    assert failed.message.startswith(f"{vendor}: ")


@pytest.mark.parametrize(
    ("data", "said"), [("not json at all", "not json at all"), ("", "Error code: 200")]
)
async def test_an_error_event_that_is_not_json_fails_as_the_sdk_path_did(
    data: str, said: str
) -> None:
    """The SDK's wording of such an error is its own and changes between
    releases (anthropic 2.17 adds the status and the request's path): the
    kind is what must agree, and the message says what the event said (or,
    empty, the stream's status)."""
    event = f"event: error\ndata: {data}\n\n".encode()
    ours = reader_events("anthropic", [event])
    theirs = await sdk_events("anthropic", [event])
    assert [type(e) for e in ours] == [type(e) for e in theirs] == [Failed]
    failed, reference = ours[-1], theirs[-1]
    assert isinstance(failed, Failed) and isinstance(reference, Failed)
    assert (failed.kind, failed.status) == (reference.kind, reference.status) == ("unknown", None)
    assert failed.message == f"anthropic: request failed: {said}"


WRONG_SHAPES: list[tuple[Vendor, bytes]] = [
    ("openai", b"data: [1, 2]\n\n"),
    ("openai", b'data: {"choices": 5}\n\n'),
    ("openai", b'data: {"choices": [{"index": 0, "delta": "text"}]}\n\n'),
    ("openai", b'data: {"choices": [], "usage": {"prompt_tokens_details": 3}}\n\n'),
    ("openai", b'data: {"choices": [], "usage": {"prompt_tokens": "12"}}\n\n'),
    ("anthropic", b"event: message_start\ndata: [1]\n\n"),
    (
        "anthropic",
        b'event: x\ndata: {"type": "message_delta", "usage": {"output_tokens": 1.5}}\n\n',
    ),
    ("anthropic", b'event: x\ndata: {"type": "content_block_delta", "delta": 7}\n\n'),
    (
        "anthropic",
        b'event: x\ndata: {"type": "content_block_start", "index": [], '
        b'"content_block": {"type": "tool_use", "input": {"a": 1}}}\n\n',
    ),
]


@pytest.mark.parametrize(("vendor", "data"), WRONG_SHAPES)
def test_json_of_the_wrong_shape_is_a_malformed_stream_not_an_exception(
    vendor: Vendor, data: bytes
) -> None:
    events = reader_events(vendor, [b"data: \n\n" if vendor == "anthropic" else b"", data])
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.kind == "malformed"
    assert "undecodable stream data" in failed.message


def test_nothing_is_read_after_the_end() -> None:
    reader = reader_for("openai")
    head = (STREAMS / "openai_text.sse").read_bytes()
    events = reader.feed(head)
    assert reader.ended
    assert reader.feed(b'data: {"error": "after the end"}\n\n') == []
    done = reader.close()
    assert [type(e) for e in done] == [Done]
    assert reader.close() == []
    assert isinstance(events[0], TextDelta)


LATE_WRONG_TYPES: list[tuple[Vendor, bytes]] = [
    ("openai", b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": ["stop"]}]}\n\n'),
    (
        "anthropic",
        b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": '
        b'{"a": 1}}, "usage": {"output_tokens": "many"}}\n\n'
        b'event: message_stop\ndata: {"type": "message_stop"}\n\n',
    ),
]


@pytest.mark.parametrize(("vendor", "data"), LATE_WRONG_TYPES)
def test_fields_of_the_wrong_type_found_at_the_end_are_a_malformed_stream(
    vendor: Vendor, data: bytes
) -> None:
    events = reader_events(vendor, [data])
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.kind == "malformed"
    assert len(events) == 1

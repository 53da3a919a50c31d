"""The server-sent-events decoder: the standard's rules, checked by hand and
against the OpenAI SDK's decoder (which the adapters used before) on the same bytes."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest
from openai._streaming import SSEDecoder as SDKDecoder

from recursa.models._sse import ServerSentEvent, SSEDecoder


def decode(chunks: Iterable[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.finish())
    return events


def sdk_decode(chunks: Iterable[bytes]) -> list[ServerSentEvent]:
    return [ServerSentEvent(e.event, e.data) for e in SDKDecoder().iter_bytes(iter(chunks))]


def every_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_data_lines_events_and_comments() -> None:
    data = (
        b": a comment, then an unnamed event\n"
        b"data: one\n\n"
        b"event: named\n"
        b"data:no space\n"
        b"data:  two spaces keep one\n"
        b"\n"
        b":only a comment\n\n"
        b"unknown: field\n"
        b"data\n"  # a field with no colon: data with an empty value
        b"\n"
    )
    assert decode([data]) == [
        ServerSentEvent(None, "one"),
        ServerSentEvent("named", "no space\n two spaces keep one"),
        ServerSentEvent(None, ""),
    ]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending_split_anywhere(ending: bytes) -> None:
    data = b"event: e\ndata: a\ndata: b\n\ndata: [DONE]\n\n".replace(b"\n", ending)
    want = [ServerSentEvent("e", "a\nb"), ServerSentEvent(None, "[DONE]")]
    assert decode([data]) == want
    assert decode(every_byte(data)) == want


def test_a_crlf_split_between_chunks_is_one_line_ending() -> None:
    # Were the LF read as a second line ending, the blank line would end the
    # event before its second data line.
    assert decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [ServerSentEvent(None, "a\nb")]


def test_a_character_split_between_chunks_is_decoded_whole() -> None:
    data = "data: caf\u00e9 \u2603 \U0001f600\n\n".encode()
    assert decode(every_byte(data)) == [ServerSentEvent(None, "caf\u00e9 \u2603 \U0001f600")]


def test_undecodable_bytes_raise_a_value_error_after_the_events_before_them() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"data: fine\n\ndata: \xff\xfe\n\n")
    assert next(events) == ServerSentEvent(None, "fine")
    with pytest.raises(UnicodeDecodeError, match="utf-8"):
        next(events)


def test_an_event_not_closed_by_a_blank_line_is_not_dispatched() -> None:
    assert decode([b"data: whole\n\ndata: cut"]) == [ServerSentEvent(None, "whole")]


def test_an_id_keeps_blank_lines_dispatching_as_the_standard_says() -> None:
    # The last event id survives dispatch, so a later blank line dispatches an
    # empty event; the SDK's decoder does the same, and the readers see it.
    data = b"id: 7\ndata: a\n\n\n"
    assert decode([data]) == [ServerSentEvent(None, "a"), ServerSentEvent(None, "")]
    assert decode([data]) == sdk_decode([data])


SAMPLES = [
    b"data: x\n\n",
    b"event: ping\ndata: {}\r\n\r\nevent: message_stop\rdata: {}\r\r",
    b": c\n\n\n\ndata: a\ndata:\ndata: b\n\n",
    b"retry: 10\n\nretry: x\ndata: r\n\nid: \x00\ndata: z\n\n",
    b"event:\ndata: unnamed\n\nevent: \n\n",
    b"data: last line without ending",
    b"data: last event without blank line\n",
    b"field without colon\ndata\n\n",
]


@pytest.mark.parametrize("data", SAMPLES)
def test_the_decoder_agrees_with_the_sdk(data: bytes) -> None:
    for chunks in ([data], every_byte(data)):
        assert decode(chunks) == sdk_decode(chunks)


def test_the_decoder_agrees_with_the_sdk_on_random_streams() -> None:
    rng = random.Random(15)
    pieces = [b"data: ", b"event: ", b"id: 1", b": c", b"x", b"{}", b"\n", b"\r", b"\r\n", b" "]
    for _ in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))
        cuts = (
            sorted(rng.sample(range(1, len(data)), min(len(data) - 1, 3))) if len(data) > 1 else []
        )
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert decode(chunks) == sdk_decode(chunks), data

"""The fake model server is right: the OFFICIAL SDKs parse what it sends.

Each test talks to ``FakeModelServer`` with ``openai.AsyncOpenAI`` or
``anthropic.AsyncAnthropic`` directly (no recursa adapter in between), so a
mistake in the fake's wire format shows up here and not as a puzzling adapter
failure elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

from recursa.models.types import Usage
from recursa.testing.fake_script import EXHAUSTED_TEXT, FaultKind
from recursa.testing.fake_server import FakeModelServer, Fault, Reply, ToolCallSpec

KEY = "sk-test-0123456789abcdef"
MODEL_OPENAI = "gpt-4o-mini"
MODEL_ANTHROPIC = "claude-haiku-4-5"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


@pytest.fixture
async def oai(server: FakeModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=server.openai_base_url, api_key=KEY, max_retries=0, timeout=5
    )
    yield client
    await client.close()


@pytest.fixture
async def ant(server: FakeModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(
        base_url=server.anthropic_base_url, api_key=KEY, max_retries=0, timeout=5
    )
    yield client
    await client.close()


async def drain_openai(client: openai.AsyncOpenAI) -> None:
    """Make one streamed call and read it to the end."""
    stream = await client.chat.completions.create(model=MODEL_OPENAI, messages=HI, stream=True)
    async for _chunk in stream:
        pass


async def final_anthropic(client: anthropic.AsyncAnthropic) -> anthropic.types.Message:
    """Make one call with the stream helper and return its final message."""
    async with client.messages.stream(model=MODEL_ANTHROPIC, max_tokens=10, messages=HI) as stream:
        return await stream.get_final_message()


TOOL_REPLY = Reply(
    text="Let me run that.",
    tool_calls=[
        ToolCallSpec("python", {"code": "x = 1\nprint(x)"}),
        ToolCallSpec("python", {"code": "y = 2"}, id="call_fixed"),
    ],
    usage=Usage(input_tokens=1200, output_tokens=30, cached_tokens=1024, cache_write_tokens=64),
    chunk=3,
)


async def test_openai_stream_assembles_text_tool_calls_and_usage(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    server.push(TOOL_REPLY)
    stream = await oai.chat.completions.create(
        model=MODEL_OPENAI, messages=HI, stream=True, stream_options={"include_usage": True}
    )
    text, args, ids, names, finish, usage = [], {0: "", 1: ""}, {}, {}, None, None
    pieces = 0
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                pieces += 1
                if call.id:
                    ids[call.index] = call.id
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                args[call.index] += (call.function.arguments or "") if call.function else ""
    assert "".join(text) == "Let me run that."
    assert [json.loads(args[0]), json.loads(args[1])] == [
        {"code": "x = 1\nprint(x)"},
        {"code": "y = 2"},
    ]
    assert ids[1] == "call_fixed"
    assert ids[0].startswith("call_")
    assert names == {0: "python", 1: "python"}
    assert pieces > 6  # the argument JSON arrived in several small pieces
    assert finish == "tool_calls"
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (1200, 30)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 1024


async def test_openai_stream_is_chunked_sse_with_done(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    server.push(Reply(text="ok"))
    raw = await oai.chat.completions.with_raw_response.create(
        model=MODEL_OPENAI, messages=HI, stream=True
    )
    assert raw.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert raw.headers["transfer-encoding"] == "chunked"
    assert raw.headers["x-request-id"].startswith("req_")
    body = (await raw.http_response.aread()).decode()
    assert body.endswith("data: [DONE]\n\n")
    assert '"usage"' not in body  # only sent when stream_options asks for it


async def test_openai_non_streaming_returns_a_completion(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    server.push(TOOL_REPLY)
    completion = await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI)
    message = completion.choices[0].message
    assert message.content == "Let me run that."
    assert message.tool_calls is not None
    assert [c.function.arguments for c in message.tool_calls if c.type == "function"] == [
        '{"code":"x = 1\\nprint(x)"}',
        '{"code":"y = 2"}',
    ]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.total_tokens == 1230


async def test_anthropic_stream_helper_builds_the_final_message(
    server: FakeModelServer, ant: anthropic.AsyncAnthropic
) -> None:
    server.push(TOOL_REPLY)
    deltas: list[str] = []
    async with ant.messages.stream(model=MODEL_ANTHROPIC, max_tokens=100, messages=HI) as stream:
        async for text in stream.text_stream:
            deltas.append(text)
        message = await stream.get_final_message()
    assert len(deltas) > 1
    assert "".join(deltas) == "Let me run that."
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    tools = [b for b in message.content if b.type == "tool_use"]
    assert [t.input for t in tools] == [{"code": "x = 1\nprint(x)"}, {"code": "y = 2"}]
    assert tools[1].id == "call_fixed"
    assert message.stop_reason == "tool_use"
    usage = message.usage
    assert (
        usage.input_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
    ) == (
        1200 - 1024 - 64,
        1024,
        64,
    )
    assert usage.output_tokens == 30


async def test_anthropic_raw_events_are_named_and_ordered(
    server: FakeModelServer, ant: anthropic.AsyncAnthropic
) -> None:
    server.push(Reply(text="hello world", stop_reason="stop_sequence"))
    stream = await ant.messages.create(
        model=MODEL_ANTHROPIC, max_tokens=10, messages=HI, stop_sequences=["STOP"], stream=True
    )
    kinds = [event.type async for event in stream]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 3
    raw = await ant.messages.with_raw_response.create(
        model=MODEL_ANTHROPIC, max_tokens=10, messages=HI, stream=True
    )
    assert raw.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert raw.headers["request-id"].startswith("req_")
    text = (await raw.http_response.aread()).decode()
    assert text.startswith("event: message_start\ndata: {")
    assert 'event: ping\ndata: {"type": "ping"}\n\n' in text


async def test_anthropic_non_streaming_returns_a_message(
    server: FakeModelServer, ant: anthropic.AsyncAnthropic
) -> None:
    server.push(Reply(text="plain", stop_reason="stop_sequence"))
    message = await ant.messages.create(
        model=MODEL_ANTHROPIC, max_tokens=10, messages=HI, stop_sequences=["END"]
    )
    assert [b.type for b in message.content] == ["text"]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")


OPENAI_FAULTS: list[tuple[FaultKind, type[Exception], int | None]] = [
    ("rate_limit", openai.RateLimitError, 429),
    ("server_error", openai.InternalServerError, 500),
    ("overloaded", openai.InternalServerError, 503),
    ("auth", openai.AuthenticationError, 401),
    ("bad_request", openai.BadRequestError, 400),
    ("context_overflow", openai.BadRequestError, 400),
    ("truncated", openai.APIConnectionError, None),
]


@pytest.mark.parametrize(("kind", "error", "status"), OPENAI_FAULTS)
async def test_openai_faults_raise_the_matching_sdk_error(
    server: FakeModelServer,
    oai: openai.AsyncOpenAI,
    kind: FaultKind,
    error: type[Exception],
    status: int | None,
) -> None:
    server.push(Fault(kind, retry_after=2))
    with pytest.raises(error) as caught:
        await drain_openai(oai)
    if status is not None:
        assert isinstance(caught.value, openai.APIStatusError)
        assert caught.value.status_code == status
    if kind == "rate_limit":
        assert isinstance(caught.value, openai.APIStatusError)
        assert caught.value.response.headers["retry-after"] == "2"
        assert caught.value.response.headers["retry-after-ms"] == "2000"
    if kind == "context_overflow":
        assert isinstance(caught.value, openai.APIStatusError)
        assert caught.value.code == "context_length_exceeded"
    if kind == "auth":
        assert KEY in str(caught.value)  # echoed, so adapters must scrub it


ANTHROPIC_FAULTS: list[
    tuple[FaultKind, type[Exception] | tuple[type[Exception], ...], int | None]
] = [
    ("rate_limit", anthropic.RateLimitError, 429),
    ("server_error", anthropic.InternalServerError, 500),
    ("overloaded", anthropic.OverloadedError, 529),
    ("auth", anthropic.AuthenticationError, 401),
    ("bad_request", anthropic.BadRequestError, 400),
    ("context_overflow", anthropic.BadRequestError, 400),
    # A body cut short: up to anthropic 2.16 the SDK lets httpx2's error
    # through; from 2.17 it raises its own connection error.
    ("truncated", (httpx2.RemoteProtocolError, anthropic.APIConnectionError), None),
]


@pytest.mark.parametrize(("kind", "error", "status"), ANTHROPIC_FAULTS)
async def test_anthropic_faults_raise_the_matching_sdk_error(
    server: FakeModelServer,
    ant: anthropic.AsyncAnthropic,
    kind: FaultKind,
    error: type[Exception] | tuple[type[Exception], ...],
    status: int | None,
) -> None:
    server.push(Fault(kind, retry_after=3))
    with pytest.raises(error) as caught:
        await final_anthropic(ant)
    if status is not None:
        assert isinstance(caught.value, anthropic.APIStatusError)
        assert caught.value.status_code == status
        assert caught.value.request_id is not None
    if kind == "rate_limit":
        assert isinstance(caught.value, anthropic.APIStatusError)
        assert caught.value.response.headers["retry-after"] == "3"
    if kind == "context_overflow":
        assert "prompt is too long" in str(caught.value)


async def test_a_timeout_fault_times_the_sdk_out(server: FakeModelServer) -> None:
    server.push(Fault("timeout"), Fault("timeout"))
    async with (
        openai.AsyncOpenAI(
            base_url=server.openai_base_url, api_key=KEY, max_retries=0, timeout=0.2
        ) as oai,
        anthropic.AsyncAnthropic(
            base_url=server.anthropic_base_url, api_key=KEY, max_retries=0, timeout=0.2
        ) as ant,
    ):
        with pytest.raises(openai.APITimeoutError):
            await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI, stream=True)
        with pytest.raises(anthropic.APITimeoutError):
            await ant.messages.create(model=MODEL_ANTHROPIC, max_tokens=5, messages=HI, stream=True)
    assert [r.answer for r in server.requests] == [Fault("timeout"), Fault("timeout")]


async def test_garbled_and_incomplete_streams_fail_to_decode(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    server.push(Fault("garbled"), Fault("incomplete"))
    with pytest.raises(json.JSONDecodeError):
        await drain_openai(oai)
    stream = await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI, stream=True)
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert finishes
    assert all(f is None for f in finishes)  # cleanly ended, but never finished


async def test_an_error_inside_a_stream_raises_the_sdk_error(
    server: FakeModelServer, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic
) -> None:
    server.push(Fault("stream_error"), Fault("stream_error"))
    with pytest.raises(openai.APIError) as oai_error:
        await drain_openai(oai)
    assert not isinstance(oai_error.value, openai.APIStatusError)
    assert oai_error.value.type == "server_error"
    with pytest.raises(anthropic.APIStatusError) as ant_error:
        await final_anthropic(ant)
    assert ant_error.value.type == "overloaded_error"


async def test_stopping_with_a_held_request_does_not_hang() -> None:
    async with FakeModelServer([Fault("timeout")]) as fake:
        client = openai.AsyncOpenAI(
            base_url=fake.openai_base_url, api_key=KEY, max_retries=0, timeout=5
        )
        call = asyncio.ensure_future(
            client.chat.completions.create(model=MODEL_OPENAI, messages=HI)
        )
        async with asyncio.timeout(5):
            await fake.wait_for(lambda: len(fake.requests) == 1)
        started = time.monotonic()
    assert time.monotonic() - started < 2
    with pytest.raises(openai.APIConnectionError):
        await call
    await client.close()


async def test_requests_are_recorded_and_connections_kept_alive(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    server.push(Reply(text="one"), Reply(text="two"))
    before = time.monotonic()
    for _ in range(2):
        stream = await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI, stream=True)
        async for _chunk in stream:
            pass
    first, second = server.requests
    assert (first.path, first.body["model"], first.body["messages"]) == (
        "/v1/chat/completions",
        MODEL_OPENAI,
        HI,
    )
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert before <= first.received_at <= second.received_at
    assert first.finished_at is not None
    assert first.finished_at >= first.received_at
    assert first.connection == second.connection  # keep-alive reused the connection


async def test_an_exhausted_script_says_so_and_a_responder_takes_over(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    first = await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI)
    assert first.choices[0].message.content == EXHAUSTED_TEXT

    def echo(path: str, body: dict[str, object]) -> Reply | Fault:
        messages = body["messages"]
        assert isinstance(messages, list)
        return Reply(text=f"{path} saw {messages[-1]['content']}")

    server.responder = echo
    second = await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI)
    assert second.choices[0].message.content == "/v1/chat/completions saw hi"


async def test_unknown_paths_get_a_404_and_consume_nothing(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    server.push(Reply(text="kept"))
    with pytest.raises(openai.NotFoundError):
        await oai.embeddings.create(model="text-embedding-3-small", input="x")
    assert server.remaining == 1


async def test_every_connection_sets_tcp_nodelay(
    server: FakeModelServer, oai: openai.AsyncOpenAI
) -> None:
    # Without TCP_NODELAY a streamed response can wait ~40 ms for a delayed ACK.
    server.push(Reply(text="quick"))
    stream = await oai.chat.completions.create(model=MODEL_OPENAI, messages=HI, stream=True)
    async for _chunk in stream:
        pass
    assert server.requests[0].tcp_nodelay is True


def test_the_thread_hosted_server_serves_synchronous_clients() -> None:
    with FakeModelServer.in_thread([Reply(text="from a thread")]) as fake:
        with openai.OpenAI(base_url=fake.openai_base_url, api_key=KEY, max_retries=0) as client:
            answer = client.chat.completions.create(model=MODEL_OPENAI, messages=HI)
        fake.wait_until(lambda: fake.requests[0].finished_at is not None)
    assert answer.choices[0].message.content == "from a thread"


def test_the_command_line_server_reads_a_script_and_writes_its_port(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "scripted"}, {"fault": "auth"}]), encoding="utf-8")
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recursa.testing.fake_server",
            "--script",
            str(script),
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first_line = proc.stdout.readline()  # printed once the server listens
        port = int(port_file.read_text(encoding="utf-8"))
        assert first_line == f"openai: http://127.0.0.1:{port}/v1\n"
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0
        ) as client:
            answer = client.chat.completions.create(model=MODEL_OPENAI, messages=HI)
            with pytest.raises(openai.AuthenticationError):
                client.chat.completions.create(model=MODEL_OPENAI, messages=HI)
        assert answer.choices[0].message.content == "scripted"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert proc.returncode == 0

"""The adapters read raw SSE over real HTTP with the SDK as the transport only.

Against the fake server: the body and headers the adapters send are those the
SDK's own ``create`` sends for the same call; a kept-alive connection is
reused after a finished stream; a server that holds the connection open after
OpenAI's ``[DONE]`` does not delay the reply; a stream that stalls mid-body
times out; SDK status errors are still translated (401 with the key in the
body, redacted).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import anthropic
import openai
import pytest

from recursa.config import Config, ProviderConfig
from recursa.models.anthropic import AnthropicProvider
from recursa.models.anthropic import translate_messages as anthropic_messages
from recursa.models.anthropic import translate_tools as anthropic_tools
from recursa.models.openai import OFFICIAL_DIALECT, OpenAIProvider
from recursa.models.openai import translate_messages as openai_messages
from recursa.models.openai import translate_tools as openai_tools
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    Provider,
    Request,
    StreamEvent,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from recursa.testing import fake_wire
from recursa.testing.fake_server import FakeModelServer, Fault, Reply

Vendor = Literal["openai", "anthropic"]
VENDORS = pytest.mark.parametrize("vendor", ["openai", "anthropic"])
KEY = "sk-raw-stream-key-0123456789"
TOOL = ToolSpec("python", "Run a cell.", {"type": "object", "properties": {"code": {}}})
HISTORY = (
    UserMessage("compute x"),
    AssistantMessage("Running.", (ToolCall("call_a", "python", '{"code": "x = 1"}'),)),
    ToolResult("call_a", "ok"),
)


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


def provider(server: FakeModelServer, vendor: Vendor, home: Path, timeout: float = 5.0) -> Provider:
    url = server.openai_base_url if vendor == "openai" else server.anthropic_base_url
    table = ProviderConfig(name=vendor, kind=vendor, base_url=url, api_key=KEY, timeout=timeout)
    if vendor == "openai":
        return OpenAIProvider(table, Config(home=home), dialect=OFFICIAL_DIALECT)
    return AnthropicProvider(table, Config(home=home))


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


FULL_USAGE = Usage(10, 3)
FULL = Request(
    model="m-1",
    system="Be brief.",
    messages=HISTORY,
    tools=(TOOL,),
    max_output_tokens=300,
    temperature=0.25,
    stop=("STOP",),
    cache_key="conv-1",
)


async def test_openai_sends_what_the_sdk_create_sends(
    server: FakeModelServer, tmp_path: Path
) -> None:
    server.push(Reply(text="one"), Reply(text="two"))
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.openai_base_url, max_retries=0)
    try:
        reply = await client.chat.completions.create(
            model=FULL.model,
            messages=openai_messages(FULL),  # type: ignore[arg-type]
            tools=openai_tools(FULL.tools),
            max_completion_tokens=300,
            temperature=0.25,
            stop=["STOP"],
            prompt_cache_key="conv-1",
            stream=True,
            stream_options={"include_usage": True},
        )
        async for _ in reply:
            pass
    finally:
        await client.close()
    ours = provider(server, "openai", tmp_path, timeout=600)
    try:
        events = await collect(ours.stream(FULL))
    finally:
        await ours.aclose()
    assert isinstance(events[-1], Done)
    sdk, adapter = server.requests
    assert adapter.path == sdk.path == "/v1/chat/completions"
    assert list(adapter.body.items()) == list(sdk.body.items())  # same fields, same order
    assert adapter.headers["authorization"] == f"Bearer {KEY}"
    assert adapter.headers.keys() == sdk.headers.keys()


async def test_anthropic_sends_what_the_sdk_create_sends(
    server: FakeModelServer, tmp_path: Path
) -> None:
    server.push(Reply(text="one"), Reply(text="two"))
    client = anthropic.AsyncAnthropic(
        api_key=KEY, base_url=server.anthropic_base_url, max_retries=0
    )
    try:
        reply = await client.messages.create(
            model=FULL.model,
            max_tokens=300,
            messages=anthropic_messages(FULL.messages),
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            tools=anthropic_tools(FULL.tools),
            stop_sequences=["STOP"],
            stream=True,
        )
        async for _ in reply:
            pass
    finally:
        await client.close()
    ours = provider(server, "anthropic", tmp_path, timeout=600)
    try:
        events = await collect(ours.stream(FULL))
    finally:
        await ours.aclose()
    assert isinstance(events[-1], Done)
    sdk, adapter = server.requests
    assert adapter.path == sdk.path == "/v1/messages"
    assert list(adapter.body.items()) == list(sdk.body.items())
    assert KEY in adapter.headers.get("x-api-key", adapter.headers.get("authorization", ""))
    for name in ("authorization", "x-api-key"):
        assert adapter.headers.get(name) == sdk.headers.get(name)
    assert adapter.headers["anthropic-version"] == sdk.headers["anthropic-version"]
    assert adapter.headers.keys() == sdk.headers.keys()


@VENDORS
async def test_a_finished_stream_leaves_its_connection_for_the_next_call(
    server: FakeModelServer, tmp_path: Path, vendor: Vendor
) -> None:
    server.push(Reply(text="first answer"), Reply(text="second answer"))
    ours = provider(server, vendor, tmp_path)
    try:
        for text in ("first answer", "second answer"):
            done = (await collect(ours.stream(FULL)))[-1]
            assert isinstance(done, Done)
            assert done.message.text == text
    finally:
        await ours.aclose()
    first, second = server.requests
    assert first.connection == second.connection


async def test_a_connection_held_open_after_done_does_not_hold_the_reply(
    server: FakeModelServer, tmp_path: Path
) -> None:
    reply = Reply(text="all of it")
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    every_event = len(fake_wire.openai_events(reply, body, FULL_USAGE))
    server.push(Reply(text="all of it", usage=FULL_USAGE, stall_after=every_event))
    # A read timeout far beyond the test's limit: only the drain's own bound ends the read.
    ours = provider(server, "openai", tmp_path, timeout=600)
    try:
        async with asyncio.timeout(30):
            done = (await collect(ours.stream(FULL)))[-1]
    finally:
        await ours.aclose()
    assert done == Done(AssistantMessage("all of it"), FULL_USAGE, "end")
    async with asyncio.timeout(5):
        await server.wait_for(lambda: server.requests[0].disconnected)


@VENDORS
async def test_a_stream_that_stalls_mid_body_times_out(
    server: FakeModelServer, tmp_path: Path, vendor: Vendor
) -> None:
    server.push(Reply(text="a reply that stops halfway", stall_after=4))
    ours = provider(server, vendor, tmp_path, timeout=0.3)
    try:
        events = await collect(ours.stream(FULL))
    finally:
        await ours.aclose()
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.kind == "timeout"
    assert sum(isinstance(e, Done | Failed) for e in events) == 1


@VENDORS
async def test_status_errors_are_still_the_sdks_translated(
    server: FakeModelServer, tmp_path: Path, vendor: Vendor
) -> None:
    server.push(Fault("auth", message=f"bad key {KEY}"), Fault("rate_limit", retry_after=2))
    ours = provider(server, vendor, tmp_path)
    try:
        auth = (await collect(ours.stream(FULL)))[-1]
        limited = (await collect(ours.stream(FULL)))[-1]
    finally:
        await ours.aclose()
    assert isinstance(auth, Failed)
    assert (auth.kind, auth.status) == ("auth", 401)
    assert KEY not in auth.message
    assert isinstance(limited, Failed)
    assert (limited.kind, limited.status, limited.retry_after) == ("rate_limit", 429, 2.0)

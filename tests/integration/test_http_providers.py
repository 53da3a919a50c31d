"""OpenAIProvider and AnthropicProvider over real HTTP, against the fake server.

Each behaviour is checked for both adapters (``vendor`` is parametrized): the
streamed pieces and the assembled Done, usage with cache counts, every fault's
failure kind, retries through with_retries, abandoning a stream, and what the
adapters put on the wire (read back from ``server.requests``).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal

import httpx2
import pytest

from recursa.config import Config, ProviderConfig
from recursa.errors import FailureKind, ModelUnavailable
from recursa.models import _errors, _sdk
from recursa.models._http import LeanTransport
from recursa.models.anthropic import AnthropicProvider
from recursa.models.openai import OFFICIAL_DIALECT, OpenAIProvider
from recursa.models.registry import Providers
from recursa.models.retry import with_retries
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    Provider,
    Request,
    Retrying,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from recursa.testing.fake_script import FaultKind
from recursa.testing.fake_server import FakeModelServer, Fault, Reply, ToolCallSpec

Vendor = Literal["openai", "anthropic"]
KEY = "sk-secret-test-key-0123456789"
MODELS: dict[Vendor, str] = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5"}
PYTHON_TOOL = ToolSpec(
    "python",
    "Run a cell in the kernel.",
    {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
)


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


Make = Callable[..., Provider]


@pytest.fixture(params=["lean", "httpx"])
async def make(
    server: FakeModelServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Make]:
    """Build a provider of either kind pointed at the fake server; closed
    afterwards. Each test runs on both transports under the SDK's client:
    recursa's lean one (a plain-HTTP local server's) and httpx's own (what
    any other URL gets)."""
    built: list[Provider] = []
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    if request.param == "httpx":
        monkeypatch.setattr(_sdk, "lean_transport_for", lambda base_url: None)
    transport = LeanTransport if request.param == "lean" else httpx2.AsyncHTTPTransport

    def build(
        vendor: Vendor, *, key: str | None = KEY, timeout: float = 5.0, **extra: object
    ) -> Provider:
        url = server.openai_base_url if vendor == "openai" else server.anthropic_base_url
        table = ProviderConfig(name=vendor, kind=vendor, base_url=url, api_key=key, timeout=timeout)
        config = Config(home=tmp_path)
        provider: Provider = (
            OpenAIProvider(table, config, **extra)  # type: ignore[arg-type]
            if vendor == "openai"
            else AnthropicProvider(table, config)
        )
        # The SDK client's httpx client, and the transport this case is about.
        assert type(provider._client._client._transport) is transport  # type: ignore[attr-defined]
        built.append(provider)
        return provider

    yield build
    for provider in built:
        await provider.aclose()


def request(
    vendor: Vendor, *messages: UserMessage | AssistantMessage | ToolResult, **extra: object
) -> Request:
    return Request(
        model=MODELS[vendor],
        system="You are a careful agent.",
        messages=messages or (UserMessage("hi"),),
        tools=(PYTHON_TOOL,),
        **extra,  # type: ignore[arg-type]
    )


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    events = [event async for event in stream]
    terminals = [e for e in events if isinstance(e, Done | Failed)]
    assert len(terminals) == 1
    assert events[-1] is terminals[0]
    return events


VENDORS = pytest.mark.parametrize("vendor", ["openai", "anthropic"])


@VENDORS
async def test_text_streams_in_pieces_and_ends_with_done(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Reply(text="Hello from the fake model.", usage=Usage(42, 7)))
    events = await collect(make(vendor).stream(request(vendor)))
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(pieces) > 3
    assert "".join(pieces) == "Hello from the fake model."
    assert events[-1] == Done(AssistantMessage("Hello from the fake model."), Usage(42, 7), "end")


@VENDORS
async def test_tool_calls_are_assembled_from_many_pieces(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    calls = [
        ToolCallSpec("python", {"code": "x = 1\nprint(x)"}, id="call_one"),
        ToolCallSpec("python", {"code": "import math"}, id="call_two"),
    ]
    server.push(Reply(text="Running.", tool_calls=calls, chunk=3))
    events = await collect(make(vendor).stream(request(vendor)))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    firsts = [d for d in deltas if d.id is not None]
    assert [(d.index, d.id, d.name) for d in firsts] == [
        (0, "call_one", "python"),
        (1, "call_two", "python"),
    ]
    assert len(deltas) > 8
    for index, spec in enumerate(calls):
        joined = "".join(d.arguments for d in deltas if d.index == index)
        assert json.loads(joined) == spec.arguments
    done = events[-1]
    assert isinstance(done, Done)
    assert done.stop_reason == "tool_calls"
    assert done.message.text == "Running."
    assert done.message.tool_calls == (
        ToolCall("call_one", "python", '{"code":"x = 1\\nprint(x)"}'),
        ToolCall("call_two", "python", '{"code":"import math"}'),
    )


@VENDORS
async def test_usage_counts_cache_reads_and_writes(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    usage = Usage(input_tokens=5000, output_tokens=120, cached_tokens=4096, cache_write_tokens=512)
    server.push(Reply(text="cached", usage=usage))
    done = (await collect(make(vendor).stream(request(vendor))))[-1]
    assert isinstance(done, Done)
    assert done.usage == usage


@pytest.mark.parametrize(
    ("vendor", "stop"),
    [
        ("openai", "max_tokens"),
        ("anthropic", "max_tokens"),
        ("anthropic", "stop_sequence"),
        ("openai", "other"),
    ],
)
async def test_stop_reasons_are_mapped(
    server: FakeModelServer, make: Make, vendor: Vendor, stop: str
) -> None:
    server.push(Reply(text="cut", stop_reason=stop))  # type: ignore[arg-type]
    done = (await collect(make(vendor).stream(request(vendor, stop=("END",)))))[-1]
    assert isinstance(done, Done)
    assert done.stop_reason == stop


FAULT_KINDS: list[tuple[FaultKind, FailureKind, dict[Vendor, int | None]]] = [
    ("rate_limit", "rate_limit", {"openai": 429, "anthropic": 429}),
    ("server_error", "server_error", {"openai": 500, "anthropic": 500}),
    ("overloaded", "overloaded", {"openai": 503, "anthropic": 529}),
    ("auth", "auth", {"openai": 401, "anthropic": 401}),
    ("bad_request", "invalid_request", {"openai": 400, "anthropic": 400}),
    ("context_overflow", "context_overflow", {"openai": 400, "anthropic": 400}),
    ("truncated", "malformed", {"openai": None, "anthropic": None}),
    ("incomplete", "malformed", {"openai": None, "anthropic": None}),
    ("garbled", "malformed", {"openai": None, "anthropic": None}),
]


@VENDORS
@pytest.mark.parametrize(("fault", "kind", "status"), FAULT_KINDS)
async def test_each_fault_becomes_its_failure_kind(
    server: FakeModelServer,
    make: Make,
    vendor: Vendor,
    fault: FaultKind,
    kind: FailureKind,
    status: dict[Vendor, int | None],
) -> None:
    server.push(Fault(fault, retry_after=2))
    events = await collect(make(vendor).stream(request(vendor)))
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert (failed.kind, failed.status) == (kind, status[vendor])
    assert failed.message.startswith(f"{vendor}: ")
    assert "\n" not in failed.message
    assert KEY not in failed.message
    if fault == "rate_limit":
        assert failed.retry_after == 2.0
        assert failed.message.startswith(f"{vendor}: rate limited (429): ")


@pytest.mark.parametrize(
    ("vendor", "kind"), [("openai", "server_error"), ("anthropic", "overloaded")]
)
async def test_an_error_inside_the_stream_is_classified_by_its_type(
    server: FakeModelServer, make: Make, vendor: Vendor, kind: FailureKind
) -> None:
    server.push(Fault("stream_error"))
    events = await collect(make(vendor).stream(request(vendor)))
    assert any(isinstance(e, TextDelta) for e in events)  # the error came mid-answer
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert (failed.kind, failed.status) == (kind, None)


@pytest.mark.parametrize(
    ("status", "error_type", "code", "message", "kind"),
    [
        (
            429,
            "insufficient_quota",
            "insufficient_quota",
            "You exceeded your current quota",
            "auth",
        ),
        (403, "permission_error", None, "not allowed", "auth"),
        (404, "not_found_error", None, "model: claude-nope", "invalid_request"),
        (413, "request_too_large", None, "Request exceeds the maximum size", "invalid_request"),
        (422, None, None, "too many tokens in the prompt", "context_overflow"),
        (502, None, None, "Bad gateway", "server_error"),
        (500, "overloaded_error", None, "Overloaded", "overloaded"),
        (408, None, None, "Request timeout", "timeout"),
    ],
)
def test_statuses_without_a_fault_of_their_own_map_to_kinds(
    status: int, error_type: str | None, code: str | None, message: str, kind: FailureKind
) -> None:
    failed = _errors.status_failure(
        "p",
        status,
        message=message,
        error_type=error_type,
        code=code,
        headers={"retry-after-ms": "1500"},
    )
    assert (failed.kind, failed.status, failed.retry_after) == (kind, status, 1.5)


@VENDORS
async def test_a_silent_server_times_out(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Fault("timeout"))
    failed = (await collect(make(vendor, timeout=0.2).stream(request(vendor))))[-1]
    assert isinstance(failed, Failed)
    assert failed.kind == "timeout"


async def last_event_at(port: int, vendor: Vendor, tmp_path: Path) -> StreamEvent:
    """The last event of one call to a server of the test's own on ``port``."""
    url = f"http://127.0.0.1:{port}" + ("/v1" if vendor == "openai" else "")
    table = ProviderConfig(name=vendor, kind=vendor, base_url=url, api_key=KEY, timeout=5)
    provider: Provider = (
        OpenAIProvider(table, Config(home=tmp_path))
        if vendor == "openai"
        else AnthropicProvider(table, Config(home=tmp_path))
    )
    try:
        return (await collect(provider.stream(request(vendor))))[-1]
    finally:
        await provider.aclose()


@VENDORS
async def test_an_unreachable_server_is_a_network_failure(tmp_path: Path, vendor: Vendor) -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    failed = await last_event_at(port, vendor, tmp_path)
    assert isinstance(failed, Failed)
    assert failed.kind == "network"
    assert failed.message.startswith(f"{vendor}: connection failed: ConnectError")
    assert "timeout" not in failed.message.lower()


@VENDORS
async def test_a_server_that_hangs_up_before_answering_is_a_network_failure(
    tmp_path: Path, vendor: Vendor
) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        await reader.readexactly(int(length[1]) if length else 0)  # the whole request
        writer.close()  # and nothing back (an unread body would make it a reset)

    listener = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        failed = await last_event_at(port, vendor, tmp_path)
    finally:
        listener.close()
        await listener.wait_closed()
    assert isinstance(failed, Failed)
    assert failed.kind == "network"
    assert "Server disconnected" in failed.message
    assert "timeout" not in failed.message.lower()


@VENDORS
async def test_a_stream_that_stalls_mid_body_times_out(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    first_text = {"openai": 2, "anthropic": 4}[vendor]  # the events up to the first text
    server.push(Reply(text="one two three four", chunk=4, stall_after=first_text))
    provider = make(vendor, timeout=1.0)
    events = await collect(provider.stream(request(vendor)))
    failed = events[-1]
    assert isinstance(failed, Failed)
    assert failed.kind == "timeout"
    assert failed.message.endswith(f"{provider.stall_detail} 1 s")  # type: ignore[attr-defined]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one "]


@VENDORS
async def test_the_api_key_never_appears_in_a_failure(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Fault("auth", message=f"bad key {KEY} for this org"))
    failed = (await collect(make(vendor).stream(request(vendor))))[-1]
    assert isinstance(failed, Failed)
    assert KEY not in failed.message
    assert "bad key [redacted] for this org" in failed.message


@VENDORS
async def test_retries_run_through_failures_to_a_reply(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(
        Fault("rate_limit", retry_after=3), Fault("truncated"), Reply(text="third time lucky")
    )
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    provider = make(vendor)
    stream = with_retries(
        lambda: provider.stream(request(vendor)), max_retries=3, sleep=sleep, rand=lambda: 0.0
    )
    events = await collect(stream)
    retries = [e for e in events if isinstance(e, Retrying)]
    assert [(r.kind, r.attempt) for r in retries] == [("rate_limit", 1), ("malformed", 2)]
    assert delays == [3.0, 1.0]  # the server's retry-after, then backoff 2 s at the jitter floor
    done = events[-1]
    assert isinstance(done, Done)
    assert done.message.text == "third time lucky"
    assert len(server.requests) == 3


@VENDORS
async def test_a_non_retryable_failure_is_not_retried(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Fault("context_overflow"), Reply(text="never sent"))

    async def sleep(delay: float) -> None:
        raise AssertionError("no retry expected")

    provider = make(vendor)
    events = await collect(
        with_retries(lambda: provider.stream(request(vendor)), max_retries=3, sleep=sleep)
    )
    assert [type(e) for e in events] == [Failed]
    assert isinstance(events[0], Failed)
    assert events[0].kind == "context_overflow"
    assert server.remaining == 1


STALL: dict[Vendor, int] = {"openai": 2, "anthropic": 4}  # events up to the first text piece


@VENDORS
async def test_closing_a_stream_early_closes_the_response(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Reply(text="a long answer that is never finished", stall_after=STALL[vendor]))
    stream = make(vendor).stream(request(vendor))
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        await server.wait_for(lambda: server.requests[0].disconnected)


@VENDORS
async def test_cancelling_a_stream_propagates_and_closes_the_response(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Reply(text="a long answer that is never finished", stall_after=STALL[vendor]))
    provider = make(vendor)
    first_piece = asyncio.Event()
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async for event in provider.stream(request(vendor)):
            seen.append(event)
            first_piece.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first_piece.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(isinstance(e, Failed) for e in seen)
    async with asyncio.timeout(5):
        await server.wait_for(lambda: server.requests[0].disconnected)


HISTORY = (
    UserMessage("compute x"),
    AssistantMessage(
        "I will run two cells.",
        (
            ToolCall("call_a", "python", '{"code": "x = 1"}'),
            ToolCall("call_b", "python", '{"code": "y"}'),
        ),
    ),
    ToolResult("call_a", "ok"),
    ToolResult("call_b", "NameError: y"),
    UserMessage("and now?"),
)


async def test_openai_requests_carry_the_translated_conversation(
    server: FakeModelServer, make: Make
) -> None:
    server.push(Reply(text="ok"))
    await collect(
        make("openai").stream(request("openai", *HISTORY, max_output_tokens=300, cache_key="s1"))
    )
    sent = server.requests[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body["model"] == "gpt-4o-mini"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "compute x"},
        {
            "role": "assistant",
            "content": "I will run two cells.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "python", "arguments": '{"code": "x = 1"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "python", "arguments": '{"code": "y"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_b", "content": "NameError: y"},
        {"role": "user", "content": "and now?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "python",
                "description": PYTHON_TOOL.description,
                "parameters": PYTHON_TOOL.parameters,
            },
        }
    ]
    # A custom base URL is a compatible server: max_tokens, and no cache key.
    assert body["max_tokens"] == 300
    assert "max_completion_tokens" not in body
    assert "prompt_cache_key" not in body


async def test_the_official_dialect_sends_max_completion_tokens_and_the_cache_key(
    server: FakeModelServer, make: Make
) -> None:
    server.push(Reply(text="ok"))
    provider = make("openai", dialect=OFFICIAL_DIALECT)
    await collect(provider.stream(request("openai", max_output_tokens=300, cache_key="session-1")))
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body
    assert body["prompt_cache_key"] == "session-1"


async def test_anthropic_requests_merge_turns_and_mark_cache_breakpoints(
    server: FakeModelServer, make: Make
) -> None:
    server.push(Reply(text="ok"))
    await collect(make("anthropic").stream(request("anthropic", *HISTORY)))
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    # Older SDKs send x-api-key; anthropic 2.x sends the key as a bearer token.
    assert KEY in (
        sent.headers.get("x-api-key"),
        sent.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert "anthropic-version" in sent.headers
    body = sent.body
    assert body["max_tokens"] == 8192
    assert body["system"] == [
        {"type": "text", "text": "You are a careful agent.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "compute x"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I will run two cells."},
                {"type": "tool_use", "id": "call_a", "name": "python", "input": {"code": "x = 1"}},
                {"type": "tool_use", "id": "call_b", "name": "python", "input": {"code": "y"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "ok"},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "NameError: y"},
                {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "python",
            "description": PYTHON_TOOL.description,
            "input_schema": PYTHON_TOOL.parameters,
        }
    ]


@VENDORS
def test_the_official_endpoint_without_a_key_is_unavailable(tmp_path: Path, vendor: Vendor) -> None:
    variable = "OPENAI_API_KEY" if vendor == "openai" else "ANTHROPIC_API_KEY"
    table = ProviderConfig(name=vendor, kind=vendor, api_key_env=variable)
    factory = OpenAIProvider if vendor == "openai" else AnthropicProvider
    with pytest.raises(ModelUnavailable, match=variable):
        factory(table, Config(home=tmp_path))


@VENDORS
async def test_a_local_server_needs_no_key(
    server: FakeModelServer, make: Make, vendor: Vendor
) -> None:
    server.push(Reply(text="no key needed"))
    done = (await collect(make(vendor, key=None).stream(request(vendor))))[-1]
    assert isinstance(done, Done)
    assert done.message.text == "no key needed"
    headers = server.requests[0].headers
    sent = headers.get("authorization", "") + headers.get("x-api-key", "")
    assert "no-key-required" in sent


async def test_the_registry_builds_providers_with_catalog_facts(
    server: FakeModelServer, tmp_path: Path
) -> None:
    tables = {
        "openai": ProviderConfig("openai", "openai", base_url=server.openai_base_url, api_key=KEY),
        "anthropic": ProviderConfig(
            "anthropic", "anthropic", base_url=server.anthropic_base_url, api_key=KEY
        ),
    }
    providers = Providers(
        Config(home=tmp_path, providers=tables, context_windows={"openai/mine": 4096})
    )
    try:
        provider, model = providers.get("openai/gpt-4o-mini")
        assert isinstance(provider, OpenAIProvider)
        assert model == "gpt-4o-mini"
        assert providers.info("openai/gpt-4o-mini").context_window == 128_000
        assert providers.info("openai/mine").context_window == 4096
        assert providers.info("openai/unknown-model").context_window is None
        assert providers.info("anthropic/claude-haiku-4-5").native_tools is True
    finally:
        await providers.aclose()

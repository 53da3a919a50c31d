"""Per-reply cost of the model adapters: the SDK object model against raw SSE reading.

For each provider (OpenAI Chat Completions, Anthropic Messages) and a typical
tool-call reply (a line of text and one ``python`` call, about 20 stream
events as the fake server sends them), it times, per reply:

- parse: the reply's bytes, one event per chunk, through an ``httpx2.Response``
  to recursa's events. Old: the SDK's ``AsyncStream`` of pydantic events read
  by the translation the adapters used before. New: the adapter's own reader
  (:class:`~recursa.models.openai.ChunkReader`, :class:`~recursa.models.anthropic.EventReader`).
- request: building the request for a conversation of ``--history`` tool steps
  and sending it through the SDK client to an in-process transport
  (``httpx2.MockTransport``) that answers at once; the response is not read.
  Old: ``create(...)`` with the conversation in ``extra_body``, as the adapters
  called it before. New: ``build_body`` and the client's ``post(...)``.
- total: the whole call through the provider as the harness makes it
  (request, response, parse, ``Done``), old path reproduced in the same way.

Each figure is the median (and p90) of ``--repeats`` timed replies after a
warm-up, in microseconds, old and new calls alternating, with the machine's load average beside it: on a
shared machine the figures are noisy, compare the two columns of one run.

Usage: python benchmarks/stream_parse.py [--repeats 2000] [--history 10] [--chunk 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx2
import openai
from anthropic.types import (
    RawMessageStreamEvent,
)
from openai.types.chat import ChatCompletionChunk

from recursa.config import Config, ProviderConfig
from recursa.models import anthropic as anthropic_adapter
from recursa.models import openai as openai_adapter
from recursa.models._sdk import SDKProvider, StreamReader
from recursa.models.types import (
    AssistantMessage,
    Done,
    Request,
    StreamEvent,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from recursa.testing import fake_wire, sdk_reference
from recursa.testing.fake_script import Reply, ToolCallSpec

Vendor = Literal["openai", "anthropic"]
BASE = {"openai": "http://bench.invalid/v1", "anthropic": "http://bench.invalid"}
TOOL = ToolSpec(
    "python",
    "Run a cell in the kernel.",
    {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
)


def conversation(steps: int) -> Request:
    messages: list[UserMessage | AssistantMessage | ToolResult] = [
        UserMessage("Compute the first primes and summarise them.")
    ]
    for step in range(steps):
        call = ToolCall(f"call_{step:04d}", "python", json.dumps({"code": f"x{step} = {step}**2"}))
        messages.append(AssistantMessage(f"Step {step}: computing.", (call,)))
        messages.append(ToolResult(call.id, f"Out[{step}]: {step * step}"))
    return Request(
        model="bench-model",
        system="You are a careful agent. " * 20,
        messages=tuple(messages),
        tools=(TOOL,),
        max_output_tokens=4096,
        cache_key="bench",
    )


def reply_events(vendor: Vendor, chunk: int) -> list[bytes]:
    reply = Reply(
        text="Let me compute that in the kernel.",
        tool_calls=(ToolCallSpec("python", {"code": "import math\nprint(math.pi)"}, id="call_b"),),
        usage=Usage(2400, 38, cached_tokens=2048),
        chunk=chunk,
    )
    body = {"model": "bench-model", "stream_options": {"include_usage": True}}
    return fake_wire.stream_events(vendor, reply, body, reply.usage or Usage())


async def _chunks(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


def response(vendor: Vendor, events: list[bytes]) -> httpx2.Response:
    path = "/chat/completions" if vendor == "openai" else "/v1/messages"
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=_chunks(events),
        request=httpx2.Request("POST", BASE[vendor] + path),
    )


# --- the old path: the SDK's objects, read as the adapters read them before ----------


async def old_openai_parse(stream: openai.AsyncStream[ChatCompletionChunk]) -> Done:
    last = (await sdk_reference.openai_events(stream))[-1]
    assert isinstance(last, Done), last
    return last


async def old_anthropic_parse(stream: anthropic.AsyncStream[RawMessageStreamEvent]) -> Done:
    last = (await sdk_reference.anthropic_events(stream))[-1]
    assert isinstance(last, Done), last
    return last


async def old_call(vendor: Vendor, client: Any, request: Request) -> Any:
    """The call the adapters made before: ``create`` with the conversation in ``extra_body``."""
    if vendor == "openai":
        return await client.chat.completions.create(
            model=request.model,
            messages=[],
            extra_body={"messages": openai_adapter.translate_messages(request)},
            tools=openai_adapter.translate_tools(request.tools),
            max_completion_tokens=request.max_output_tokens,
            prompt_cache_key=request.cache_key,
            stream=True,
            stream_options={"include_usage": True},
        )
    return await client.messages.create(
        model=request.model,
        max_tokens=request.max_output_tokens or 8192,
        messages=[],
        extra_body={"messages": anthropic_adapter.translate_messages(request.messages)},
        system=[{"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}],
        tools=anthropic_adapter.translate_tools(request.tools),
        stream=True,
    )


# --- the new path ----------------------------------------------------------------------


def new_reader(vendor: Vendor) -> StreamReader:
    if vendor == "openai":
        return openai_adapter.ChunkReader("openai", ())
    return anthropic_adapter.EventReader("anthropic", ())


async def new_parse(vendor: Vendor, raw: httpx2.Response) -> StreamEvent:
    reader = new_reader(vendor)
    async for chunk in raw.aiter_bytes():
        reader.feed(chunk)
        if reader.ended:
            break
    events = reader.close()
    assert isinstance(events[-1], Done)
    return events[-1]


# --- timing ------------------------------------------------------------------------------


async def timed(
    repeats: int, old: Callable[[], Awaitable[object]], new: Callable[[], Awaitable[object]]
) -> tuple[list[float], list[float]]:
    """Sorted per-call times of ``old`` and ``new``, in microseconds, after a
    warm-up; the two alternate, so a change in the machine's load hits both."""
    for _ in range(max(20, repeats // 10)):
        await old()
        await new()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for once, into in ((old, samples[0]), (new, samples[1])):
            start = time.perf_counter_ns()
            await once()
            into.append((time.perf_counter_ns() - start) / 1000)
    return sorted(samples[0]), sorted(samples[1])


def summary(samples: list[float]) -> tuple[float, float]:
    """Median and p90 of sorted samples."""
    return statistics.median(samples), samples[int(len(samples) * 0.9)]


def sdk_client(vendor: Vendor, events: list[bytes]) -> Any:
    """An SDK client whose transport answers every request at once with ``events``."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=_chunks(events)
        )

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    if vendor == "openai":
        return openai.AsyncOpenAI(
            api_key="sk-bench", base_url=BASE[vendor], max_retries=0, http_client=http
        )
    return anthropic.AsyncAnthropic(
        api_key="sk-bench", base_url=BASE[vendor], max_retries=0, http_client=http
    )


def provider(vendor: Vendor, client: Any, home: Path) -> SDKProvider[Any]:
    table = ProviderConfig(name=vendor, kind=vendor, base_url=BASE[vendor], api_key="sk-bench")
    built: SDKProvider[Any] = (
        openai_adapter.OpenAIProvider(table, Config(home=home))
        if vendor == "openai"
        else anthropic_adapter.AnthropicProvider(table, Config(home=home))
    )
    built._client = client  # the same in-process transport as the old path
    return built


async def bench(vendor: Vendor, args: argparse.Namespace, home: Path) -> list[tuple[str, ...]]:
    events = reply_events(vendor, args.chunk)
    request = conversation(args.history)
    client = sdk_client(vendor, events)
    stream_cls: Any = (
        openai.AsyncStream[ChatCompletionChunk]
        if vendor == "openai"
        else anthropic.AsyncStream[RawMessageStreamEvent]
    )
    chunk_type: Any = ChatCompletionChunk if vendor == "openai" else RawMessageStreamEvent
    old_parse = old_openai_parse if vendor == "openai" else old_anthropic_parse
    ours = provider(vendor, client, home)

    async def parse_old() -> object:
        sdk_stream = stream_cls(
            cast_to=chunk_type, response=response(vendor, events), client=client
        )
        return await old_parse(sdk_stream)

    async def parse_new() -> object:
        return await new_parse(vendor, response(vendor, events))

    async def request_old() -> object:
        sdk_stream = await old_call(vendor, client, request)
        await sdk_stream.close()
        return sdk_stream

    async def request_new() -> object:
        body = (
            ours.encode(request)  # type: ignore[attr-defined]
            if vendor == "openai"
            else anthropic_adapter.build_body(request)
        )
        raw = await ours._open(body)
        await raw.aclose()
        return raw

    async def total_old() -> object:
        return await old_parse(await old_call(vendor, client, request))

    async def total_new() -> object:
        last: object = None
        async for event in ours.stream(request):
            last = event
        assert isinstance(last, Done), last
        return last

    rows = []
    for label, old, new in (
        ("parse", parse_old, parse_new),
        ("request", request_old, request_new),
        ("total", total_old, total_new),
    ):
        old_samples, new_samples = await timed(args.repeats, old, new)
        (old_median, old_p90), (new_median, new_p90) = summary(old_samples), summary(new_samples)
        rows.append(
            (
                vendor,
                label,
                f"{old_median:8.1f} ({old_p90:7.1f})",
                f"{new_median:8.1f} ({new_p90:7.1f})",
                f"{old_median / new_median:5.1f}x",
            )
        )
    await ours.aclose()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--history", type=int, default=10, help="tool steps in the conversation")
    parser.add_argument("--chunk", type=int, default=6, help="characters per streamed piece")
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    counts = {v: len(reply_events(v, args.chunk)) for v in ("openai", "anthropic")}
    print(
        f"stream_parse: {args.repeats} replies each, conversation of {args.history} tool steps, "
        f"reply events: openai {counts['openai']}, anthropic {counts['anthropic']}; "
        f"load {load} ({os.cpu_count()} cores)"
    )
    print(
        f"{'provider':<10} {'step':<8} {'old µs median (p90)':>22} {'new µs median (p90)':>22}  old/new"
    )
    with tempfile.TemporaryDirectory() as home:
        for vendor in ("openai", "anthropic"):
            for row in await bench(vendor, args, Path(home)):  # type: ignore[arg-type]
                print(f"{row[0]:<10} {row[1]:<8} {row[2]:>22} {row[3]:>22}  {row[4]}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load after: {load}")


if __name__ == "__main__":
    asyncio.run(main())

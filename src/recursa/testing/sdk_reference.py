"""The model adapters' reading of a stream before they read raw events: the
SDKs' own objects (``AsyncStream`` of chunks or events), read with the rules
recursa used then. It is the reference the raw readers are checked against
(``tests/unit/test_stream_readers.py``) and timed against
(``benchmarks/stream_parse.py``)."""

from __future__ import annotations

import json

import anthropic
import openai
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    TextBlock,
    ToolUseBlock,
)
from anthropic.types import TextDelta as AnthropicTextDelta
from openai.types.chat import ChatCompletionChunk

from recursa.models import _errors
from recursa.models._assembly import MessageAssembly
from recursa.models.types import Done, Failed, StreamEvent, Usage

_STOPS_OPENAI = {"stop": "end", "length": "max_tokens", "tool_calls": "tool_calls"}
_STOPS_ANTHROPIC = {
    "end_turn": "end",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
}


async def openai_events(
    stream: openai.AsyncStream[ChatCompletionChunk], secrets: tuple[str, ...] = ()
) -> list[StreamEvent]:
    """The events the OpenAI adapter made of the SDK's ``stream`` (closed at the end)."""
    out: list[StreamEvent] = []
    assembly = MessageAssembly()
    finish: str | None = None
    usage: Usage | None = None
    try:
        async for chunk in stream:
            if chunk.usage is not None:
                details = chunk.usage.prompt_tokens_details
                usage = Usage(
                    input_tokens=chunk.usage.prompt_tokens,
                    output_tokens=chunk.usage.completion_tokens,
                    cached_tokens=(details.cached_tokens or 0) if details else 0,
                    cache_write_tokens=(details.cache_write_tokens or 0) if details else 0,
                )
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                for piece in (delta.content, delta.refusal):
                    text = assembly.text(piece)
                    if text is not None:
                        out.append(text)
                for call in delta.tool_calls or ():
                    function = call.function
                    call_event = assembly.tool_call(
                        call.index,
                        arguments=function.arguments if function else None,
                        id=call.id,
                        name=function.name if function else None,
                    )
                    if call_event is not None:
                        out.append(call_event)
                finish = choice.finish_reason or finish
    except openai.APIError as exc:  # an error object sent inside the stream
        body = exc.body
        said = exc.message
        if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
            said = body["message"]
        elif isinstance(body, str) and body.strip():
            said = body
        failed = _errors.stream_error_failure(
            "openai", message=said, error_type=exc.type, code=exc.code, secrets=secrets
        )
        return [*out, failed]
    except ValueError as exc:
        return [*out, _undecodable("openai", exc, secrets)]
    finally:
        await stream.close()
    if finish is None:
        return [*out, _errors.failure("openai", "malformed", "ended before a finish_reason")]
    message = assembly.message()
    stop = _STOPS_OPENAI.get(finish, "other")
    if stop == "end" and message.tool_calls:
        stop = "tool_calls"
    return [*out, Done(message, usage or Usage(), stop)]  # type: ignore[arg-type]


async def anthropic_events(
    stream: anthropic.AsyncStream[RawMessageStreamEvent], secrets: tuple[str, ...] = ()
) -> list[StreamEvent]:
    """The events the Anthropic adapter made of the SDK's ``stream`` (closed at the end)."""
    out: list[StreamEvent] = []
    assembly = MessageAssembly()
    counts = {"input": 0, "read": 0, "write": 0, "output": 0}
    stop_reason: str | None = None
    finished = False

    def update(usage: anthropic.types.Usage | anthropic.types.MessageDeltaUsage) -> None:
        if usage.input_tokens is not None:
            counts["input"] = usage.input_tokens
        if usage.cache_read_input_tokens is not None:
            counts["read"] = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            counts["write"] = usage.cache_creation_input_tokens
        counts["output"] = usage.output_tokens

    try:
        async for event in stream:
            piece: StreamEvent | None = None
            if isinstance(event, RawContentBlockDeltaEvent):
                if isinstance(event.delta, AnthropicTextDelta):
                    piece = assembly.text(event.delta.text)
                elif isinstance(event.delta, InputJSONDelta):
                    piece = assembly.tool_call(event.index, arguments=event.delta.partial_json)
            elif isinstance(event, RawContentBlockStartEvent):
                block = event.content_block
                if isinstance(block, ToolUseBlock):
                    given = json.dumps(block.input) if block.input else None
                    piece = assembly.tool_call(
                        event.index, arguments=given, id=block.id, name=block.name
                    )
                elif isinstance(block, TextBlock):
                    piece = assembly.text(block.text)
            elif isinstance(event, RawMessageStartEvent):
                update(event.message.usage)
            elif isinstance(event, RawMessageDeltaEvent):
                stop_reason = event.delta.stop_reason or stop_reason
                update(event.usage)
            elif isinstance(event, RawMessageStopEvent):
                finished = True
            if piece is not None:
                out.append(piece)
    except anthropic.APIStatusError as exc:  # an ``error`` event inside the open stream
        failed = _errors.stream_error_failure(
            "anthropic",
            message=exc.api_message or exc.message,
            error_type=exc.type,
            code=exc.error_code,
            secrets=secrets,
        )
        return [*out, failed]
    except ValueError as exc:
        return [*out, _undecodable("anthropic", exc, secrets)]
    finally:
        await stream.close()
    if not finished:
        return [*out, _errors.failure("anthropic", "malformed", "ended before message_stop")]
    usage = Usage(
        input_tokens=counts["input"] + counts["read"] + counts["write"],
        output_tokens=counts["output"],
        cached_tokens=counts["read"],
        cache_write_tokens=counts["write"],
    )
    stop = _STOPS_ANTHROPIC.get(stop_reason or "", "other")
    return [*out, Done(assembly.message(), usage, stop)]  # type: ignore[arg-type]


def _undecodable(vendor: str, exc: ValueError, secrets: tuple[str, ...]) -> Failed:
    return _errors.failure(vendor, "malformed", f"undecodable stream data: {exc}", secrets)


__all__ = ["anthropic_events", "openai_events"]

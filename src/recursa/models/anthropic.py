"""The Anthropic provider: the Messages API, streamed, through the official SDK.

It reads the raw server-sent events of ``messages.create(stream=True)``
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``,
``message_stop``, ``error``) and assembles text and ``tool_use`` blocks, whose
input arrives as ``input_json_delta`` pieces.

Translation rules the API imposes:

- Roles alternate, so consecutive messages of the same role are merged. Tool
  results are ``tool_result`` blocks of a user message; a user message that
  follows tool results joins that message as a text block after them (the
  API wants tool results first).
- Empty text blocks are refused by the API, so they are left out, and a
  message left with no blocks is dropped.
- Prompt caching is explicit: a ``cache_control`` breakpoint goes on the
  system block (caching tools and system) and on the last block of the last
  user message (caching the conversation so far).
- ``max_tokens`` is required: the request's limit or :data:`DEFAULT_MAX_TOKENS`.
- The Messages API has no sampling temperature (the SDK offers none), so
  ``Request.temperature`` is not sent; ``Request.cache_key`` is not needed,
  since Anthropic caches by prefix at the breakpoints.

Usage is normalised to the neutral meaning: ``input_tokens`` counts every
prompt token (uncached + cache reads + cache writes), ``cached_tokens`` the
reads and ``cache_write_tokens`` the writes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from typing import Literal

import anthropic
import httpx2
from anthropic import omit
from anthropic.types import (
    CacheControlEphemeralParam,
    InputJSONDelta,
    MessageParam,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    TextBlock,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
)
from anthropic.types import TextDelta as AnthropicTextDelta

from recursa.config import Config, ProviderConfig
from recursa.models import _errors
from recursa.models._assembly import MessageAssembly
from recursa.models._sdk import SDKErrors, SDKProvider
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    Request,
    StopReason,
    StreamEvent,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)

DEFAULT_MAX_TOKENS = 8192
"""Output tokens asked for when the request sets no limit (the API requires one)."""

PLACEHOLDER_API_KEY = "sk-ant-no-key-required"
"""Sent to custom base URLs when no key is configured."""

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "stop_sequence": "stop_sequence",
}


_SDK_ERRORS = SDKErrors(
    timeout=anthropic.APITimeoutError,
    connection=anthropic.APIConnectionError,
    validation=anthropic.APIResponseValidationError,
)

Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam


class AnthropicProvider(SDKProvider[anthropic.AsyncAnthropic]):
    """A :class:`~recursa.models.types.Provider` over ``anthropic.AsyncAnthropic``.

    ``stream()`` never raises for a failed call: SDK, HTTP and decoding errors
    become the final ``Failed``, with a one-line message that never contains
    the API key. ``CancelledError`` propagates unchanged, and the HTTP
    response is closed whenever the stream ends, is closed early or is cancelled.

    A consumer that stops early should close the iterator (``aclose()``, or
    ``contextlib.aclosing``); one merely dropped is closed later, by the event
    loop's async-generator finalizer.
    """

    def __init__(self, table: ProviderConfig, config: Config) -> None:
        super().__init__(
            table,
            config,
            client=anthropic.AsyncAnthropic,
            errors=_SDK_ERRORS,
            placeholder_key=PLACEHOLDER_API_KEY,
            key_required=table.base_url is None,
        )

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Run one Messages call; see :class:`~recursa.models.types.Provider`."""
        system: list[TextBlockParam] | None = None
        if request.system:
            system = [{"type": "text", "text": request.system, "cache_control": _ephemeral()}]
        # The conversation goes in ``extra_body``, merged into the JSON as given,
        # so the SDK does not walk every message against its TypedDicts (a cost
        # that grows with the conversation; see models/openai.py).
        body: dict[str, object] = {"messages": translate_messages(request.messages)}
        try:
            response = await self._client.messages.create(
                model=request.model,
                max_tokens=request.max_output_tokens or DEFAULT_MAX_TOKENS,
                messages=[],
                extra_body=body,
                system=system if system is not None else omit,
                tools=translate_tools(request.tools) if request.tools else omit,
                stop_sequences=list(request.stop) if request.stop else omit,
                stream=True,
            )
        except anthropic.AnthropicError as exc:
            yield self._failure(exc, started=False)
            return
        assembly = MessageAssembly()
        counts = _Counts()
        stop_reason: str | None = None
        finished = False
        try:
            async for event in response:
                if isinstance(event, RawContentBlockDeltaEvent):
                    delta = event.delta
                    out: StreamEvent | None = None
                    if isinstance(delta, AnthropicTextDelta):
                        out = assembly.text(delta.text)
                    elif isinstance(delta, InputJSONDelta):
                        out = assembly.tool_call(event.index, arguments=delta.partial_json)
                    if out is not None:
                        yield out
                elif isinstance(event, RawContentBlockStartEvent):
                    block = event.content_block
                    start: StreamEvent | None = None
                    if isinstance(block, ToolUseBlock):
                        # The input normally streams as input_json_delta; a
                        # non-empty input here is a complete one.
                        given = json.dumps(block.input) if block.input else None
                        start = assembly.tool_call(
                            event.index, arguments=given, id=block.id, name=block.name
                        )
                    elif isinstance(block, TextBlock):
                        start = assembly.text(block.text)
                    if start is not None:
                        yield start
                elif isinstance(event, RawMessageStartEvent):
                    counts.update(event.message.usage)
                elif isinstance(event, RawMessageDeltaEvent):
                    stop_reason = event.delta.stop_reason or stop_reason
                    counts.update(event.usage)
                elif isinstance(event, RawMessageStopEvent):
                    finished = True
        except anthropic.AnthropicError as exc:
            yield self._failure(exc, started=True)
            return
        except httpx2.TimeoutException:
            yield _errors.failure(self.name, "timeout", f"no data within {self._timeout:g} s")
            return
        except httpx2.TransportError as exc:  # the SDK lets these through mid-stream
            yield _errors.failure(
                self.name,
                "malformed",
                f"cut short: {type(exc).__name__}: {exc}",
                self._secrets,
            )
            return
        except ValueError as exc:  # undecodable JSON or text in an event
            yield self._undecodable(exc)
            return
        finally:
            await response.close()
        if not finished:
            yield _errors.failure(self.name, "malformed", "ended before message_stop")
            return
        yield Done(
            assembly.message(), counts.usage(), _STOP_REASONS.get(stop_reason or "", "other")
        )

    def _failure(self, exc: anthropic.AnthropicError, *, started: bool) -> Failed:
        """Translate an SDK exception; ``started`` means the response had begun."""
        shared = self._shared_failure(exc, started=started)
        if shared is not None:
            return shared
        name, secrets = self.name, self._secrets
        if isinstance(exc, anthropic.APIStatusError):
            message = exc.api_message or exc.message
            if exc.status_code < 400:  # an ``error`` event inside an open stream
                return _errors.stream_error_failure(
                    name, message=message, error_type=exc.type, code=exc.error_code, secrets=secrets
                )
            return _errors.status_failure(
                name,
                exc.status_code,
                message=message,
                error_type=exc.type,
                code=exc.error_code,
                headers=exc.response.headers,
                secrets=secrets,
            )
        return self._unknown_failure(exc)


class _Counts:
    """Token counts as the stream reports them: ``message_start`` gives the
    input side, ``message_delta`` the (cumulative) output and any corrections."""

    def __init__(self) -> None:
        self.input = 0
        self.cache_read = 0
        self.cache_creation = 0
        self.output = 0

    def update(self, usage: anthropic.types.Usage | anthropic.types.MessageDeltaUsage) -> None:
        if usage.input_tokens is not None:
            self.input = usage.input_tokens
        if usage.cache_read_input_tokens is not None:
            self.cache_read = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            self.cache_creation = usage.cache_creation_input_tokens
        self.output = usage.output_tokens

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input + self.cache_read + self.cache_creation,
            output_tokens=self.output,
            cached_tokens=self.cache_read,
            cache_write_tokens=self.cache_creation,
        )


def translate_messages(
    messages: Iterable[UserMessage | AssistantMessage | ToolResult],
) -> list[MessageParam]:
    """Neutral messages as alternating Messages API turns, with a cache breakpoint
    on the last block of the last user turn."""
    turns: list[tuple[Literal["user", "assistant"], list[Block]]] = []

    def add(role: Literal["user", "assistant"], blocks: list[Block]) -> None:
        if not blocks:
            return
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))

    for message in messages:
        if isinstance(message, UserMessage):
            add("user", [{"type": "text", "text": message.text}] if message.text else [])
        elif isinstance(message, ToolResult):
            add(
                "user",
                [{"type": "tool_result", "tool_use_id": message.call_id, "content": message.text}],
            )
        else:
            blocks: list[Block] = [{"type": "text", "text": message.text}] if message.text else []
            for call in message.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": _tool_input(call.arguments),
                    }
                )
            add("assistant", blocks)

    out: list[MessageParam] = []
    last_user: list[Block] = []
    for role, blocks in turns:
        if role == "user":
            # Tool results must open a user turn; every other order stays as given.
            blocks = sorted(blocks, key=lambda b: b["type"] != "tool_result")
            last_user = blocks
            out.append({"role": "user", "content": blocks})
        else:
            out.append({"role": "assistant", "content": blocks})
    if last_user:
        last_user[-1]["cache_control"] = _ephemeral()
    return out


def translate_tools(tools: Iterable[ToolSpec]) -> list[ToolParam]:
    """Neutral tool specs as client tools."""
    return [
        {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}
        for tool in tools
    ]


def _ephemeral() -> CacheControlEphemeralParam:
    """A fresh prompt-cache breakpoint (five minutes, the default)."""
    return {"type": "ephemeral"}


def _tool_input(arguments: str) -> dict[str, object]:
    """A tool call's JSON arguments as the object the API wants back.

    Arguments the model garbled cannot be sent as an object, so they are kept
    as text under ``_invalid_json`` and the model sees what it wrote.
    """
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {"_invalid_json": arguments}
    return parsed if isinstance(parsed, dict) else {"_invalid_json": arguments}


__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicProvider", "translate_messages", "translate_tools"]

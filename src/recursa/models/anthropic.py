"""The Anthropic provider: the Messages API, streamed, with the official SDK as transport.

The request body is built here (:func:`build_body`) and posted through the
SDK client (auth, headers, timeouts and status errors are the SDK's); the
response's raw server-sent events (``message_start``,
``content_block_start/delta/stop``, ``message_delta``, ``message_stop``,
``error``) are read by :class:`EventReader` straight from their JSON, which
assembles text and ``tool_use`` blocks, whose input arrives as
``input_json_delta`` pieces. See :mod:`recursa.models._sdk`.

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
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Literal

import anthropic
import httpx2
from anthropic.types import (
    CacheControlEphemeralParam,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)

from recursa.config import Config, ProviderConfig
from recursa.models import _errors
from recursa.models._assembly import MessageAssembly
from recursa.models._sdk import (
    SDKErrors,
    SDKProvider,
    StreamFailure,
    StreamReader,
    token_count,
)
from recursa.models._sse import ServerSentEvent
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
    base=anthropic.AnthropicError,
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
            http_client=anthropic.DefaultAsyncHttpxClient,
            errors=_SDK_ERRORS,
            placeholder_key=PLACEHOLDER_API_KEY,
            key_required=table.base_url is None,
        )

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Run one Messages call; see :class:`~recursa.models.types.Provider`."""
        return self._run(build_body(request), EventReader(self.name, self._secrets))

    async def _open(self, body: dict[str, object] | bytes) -> httpx2.Response:
        # Sent as built, and the reply read raw by EventReader: see models/openai.py.
        return await self._client.post(
            "/v1/messages",
            body=body,
            cast_to=httpx2.Response,
            stream=True,
            stream_cls=None,
        )

    def _failure(self, exc: Exception) -> Failed:
        """Translate an SDK exception raised before the response's body was read."""
        shared = self._shared_failure(exc)
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


class EventReader(StreamReader):
    """Reads Messages stream events into text and tool-call deltas.

    The rules are those of the SDK's stream the adapter read before: events
    without a name and ``ping`` are skipped, an ``error`` event ends the
    stream as a failure, an event with empty data is skipped, and the rest
    are read by the ``type`` in their data (an unknown type is ignored).
    ``text_delta`` and ``input_json_delta`` pieces stream; a ``tool_use``
    block that starts with a non-empty ``input`` has it whole. The reply is
    complete only once ``message_stop`` has arrived.
    """

    __slots__ = ("_assembly", "_counts", "_stop_reason", "_stopped")

    def __init__(self, vendor: str, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(vendor, secrets)
        self._assembly = MessageAssembly()
        self._counts = _Counts()
        self._stop_reason: str | None = None
        self._stopped = False

    def read(self, sse: ServerSentEvent) -> Sequence[StreamEvent]:
        name = sse.event
        if name is None or name == "ping":
            return ()
        if name == "error":
            raise StreamFailure(self._stream_error(sse.data))
        if not sse.data:
            return ()
        event = json.loads(sse.data)
        kind = event.get("type")
        out: StreamEvent | None = None
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            delta_kind = delta.get("type")
            if delta_kind == "text_delta":
                out = self._assembly.text(delta.get("text"))
            elif delta_kind == "input_json_delta":
                out = self._assembly.tool_call(
                    event.get("index"), arguments=delta.get("partial_json")
                )
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            block_kind = block.get("type")
            if block_kind == "tool_use":
                # The input normally streams as input_json_delta; a
                # non-empty input here is a complete one.
                given = block.get("input")
                out = self._assembly.tool_call(
                    event.get("index"),
                    arguments=json.dumps(given) if given else None,
                    id=block.get("id"),
                    name=block.get("name"),
                )
            elif block_kind == "text":
                out = self._assembly.text(block.get("text"))
        elif kind == "message_start":
            self._counts.update((event.get("message") or {}).get("usage") or {})
        elif kind == "message_delta":
            self._stop_reason = (event.get("delta") or {}).get("stop_reason") or self._stop_reason
            self._counts.update(event.get("usage") or {})
        elif kind == "message_stop":
            self._stopped = True
        return () if out is None else (out,)

    def result(self) -> Done | Failed:
        if not self._stopped:
            return _errors.failure(self.vendor, "malformed", "ended before message_stop")
        return Done(
            self._assembly.message(),
            self._counts.usage(),
            _STOP_REASONS.get(self._stop_reason or "", "other"),
        )

    def _stream_error(self, data: str) -> Failed:
        """What the SDK made of an ``error`` event (an ``APIStatusError`` with
        the stream's status), translated."""
        try:
            body: object = json.loads(data)
            fallback = f"{body}"
        except ValueError:
            body, fallback = data, data or "Error code: 200"
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            error = {}
        message, error_type = error.get("message"), error.get("type")
        details = error.get("details")
        code = details.get("error_code") if isinstance(details, dict) else None
        return _errors.stream_error_failure(
            self.vendor,
            message=message if isinstance(message, str) and message else fallback,
            error_type=error_type if isinstance(error_type, str) else None,
            code=code if isinstance(code, str) else None,
            secrets=self.secrets,
        )


class _Counts:
    """Token counts as the stream reports them: ``message_start`` gives the
    input side, ``message_delta`` the (cumulative) output and any corrections."""

    def __init__(self) -> None:
        self.input = 0
        self.cache_read = 0
        self.cache_creation = 0
        self.output = 0

    def update(self, usage: dict[str, Any]) -> None:
        """Take the counts a ``usage`` object of either event gives (null or absent: unchanged)."""
        value = usage.get("input_tokens")
        if value is not None:
            self.input = token_count(value)
        value = usage.get("cache_read_input_tokens")
        if value is not None:
            self.cache_read = token_count(value)
        value = usage.get("cache_creation_input_tokens")
        if value is not None:
            self.cache_creation = token_count(value)
        value = usage.get("output_tokens")
        if value is not None:
            self.output = token_count(value)

    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input + self.cache_read + self.cache_creation,
            output_tokens=self.output,
            cached_tokens=self.cache_read,
            cache_write_tokens=self.cache_creation,
        )


def build_body(request: Request) -> dict[str, Any]:
    """The JSON body of a streamed Messages call for ``request``, in the
    order the SDK's ``create`` sends its fields."""
    body: dict[str, Any] = {
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": translate_messages(request.messages),
        "model": request.model,
    }
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    body["stream"] = True
    if request.system:
        body["system"] = [{"type": "text", "text": request.system, "cache_control": _ephemeral()}]
    if request.tools:
        body["tools"] = translate_tools(request.tools)
    return body


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


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicProvider",
    "EventReader",
    "build_body",
    "translate_messages",
    "translate_tools",
]

"""The OpenAI-compatible provider: Chat Completions, streamed, with the official SDK as transport.

The request body is built here (:func:`build_body`) and posted through the
SDK client (auth, headers, timeouts and status errors are the SDK's); the
response's raw server-sent events are read by :class:`ChunkReader` straight
from their JSON, without the SDK's pydantic chunk objects. See
:mod:`recursa.models._sdk`.

One class serves the official endpoint and every server that speaks the same
protocol (vLLM, llama.cpp, Ollama, LM Studio, proxies). Where they differ the
difference is data, an :class:`OpenAIDialect`, chosen from the base URL:

- the official endpoint takes ``max_completion_tokens`` (reasoning models
  reject ``max_tokens``) and ``prompt_cache_key``;
- compatible servers mostly know only ``max_tokens`` and may reject unknown
  fields, so they get ``max_tokens`` and no cache key.

Credentials: the key comes from the provider table (the configuration fills it
from ``OPENAI_API_KEY`` or the table's ``api_key_env``). The official endpoint
without a key raises :class:`~recursa.errors.ModelUnavailable` when the
provider is built; a custom base URL without a key uses a placeholder, since
local servers need none.

A refusal (``delta.refusal``) streams as text: it is the model's answer.

The SDK's own retries are off (``max_retries=0``): retries belong to
:func:`recursa.models.retry.with_retries`, which branches on failure kinds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx2
import openai
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

from recursa.config import Config, ProviderConfig
from recursa.models import _errors
from recursa.models._assembly import MessageAssembly
from recursa.models._encode import MessageJSON, dumps, encode_body
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
    Message,
    Request,
    StopReason,
    StreamEvent,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)

OFFICIAL_HOST = "api.openai.com"

_SDK_ERRORS = SDKErrors(
    base=openai.OpenAIError,
    timeout=openai.APITimeoutError,
    connection=openai.APIConnectionError,
    validation=openai.APIResponseValidationError,
)

_REQUEST_OPTIONS: openai.RequestOptions = {"security": {"bearer_auth": True}}
"""What ``chat.completions.create`` asks of the client: bearer auth."""

PLACEHOLDER_API_KEY = "sk-no-key-required"
"""Sent to custom base URLs when no key is configured (the SDK insists on one)."""

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "other",
}


@dataclass(frozen=True, slots=True)
class OpenAIDialect:
    """How an endpoint departs from the others: which output-limit field it
    takes, and whether it accepts ``prompt_cache_key``."""

    max_tokens_field: Literal["max_completion_tokens", "max_tokens"]
    prompt_cache_key: bool


OFFICIAL_DIALECT = OpenAIDialect(max_tokens_field="max_completion_tokens", prompt_cache_key=True)
COMPATIBLE_DIALECT = OpenAIDialect(max_tokens_field="max_tokens", prompt_cache_key=False)


def is_official(base_url: str | None) -> bool:
    """True for no base URL (the SDK default) or one on ``api.openai.com``."""
    return base_url is None or urlsplit(base_url).hostname == OFFICIAL_HOST


class OpenAIProvider(SDKProvider[openai.AsyncOpenAI]):
    """A :class:`~recursa.models.types.Provider` over ``openai.AsyncOpenAI``.

    ``stream()`` never raises for a failed call: every SDK, HTTP and decoding
    error becomes the final ``Failed`` event, with a one-line message that
    never contains the API key. ``CancelledError`` propagates unchanged, and
    the HTTP response is closed whenever the stream ends, is closed early
    (``aclose()``) or is cancelled.

    A consumer that stops early should close the iterator (``aclose()``, or
    ``contextlib.aclosing``); one merely dropped is closed later, by the event
    loop's async-generator finalizer.
    """

    def __init__(
        self, table: ProviderConfig, config: Config, *, dialect: OpenAIDialect | None = None
    ) -> None:
        official = is_official(table.base_url)
        super().__init__(
            table,
            config,
            client=openai.AsyncOpenAI,
            http_client=openai.DefaultAsyncHttpxClient,
            errors=_SDK_ERRORS,
            placeholder_key=PLACEHOLDER_API_KEY,
            key_required=official,
            key_hint=" (or a base_url for a local server)",
        )
        self.dialect = dialect or (OFFICIAL_DIALECT if official else COMPATIBLE_DIALECT)
        self._messages = MessageJSON(translate_message)

    stall_detail = "no response within"

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Run one Chat Completions call; see :class:`~recursa.models.types.Provider`."""
        return self._run(
            self.encode(request),
            ChunkReader(self.name, self._secrets, lambda: translate_messages(request)),
        )

    def encode(self, request: Request) -> bytes:
        """The request's body, as ``openapi_dumps(build_body(request))`` gives it,
        with each message's JSON kept from the conversation's last call."""
        pieces = self._messages.pieces(request.cache_key, request.messages)
        if request.system:
            pieces.insert(0, dumps({"role": "system", "content": request.system}))
        return encode_body(build_body(request, self.dialect, messages=False), "messages", pieces)

    async def _open(self, body: dict[str, object] | bytes) -> httpx2.Response:
        # Sent as built: the SDK neither walks it against its TypedDicts
        # (milliseconds a call, growing with the conversation) nor parses the
        # reply into pydantic chunks; ChunkReader reads the raw events. Bytes
        # (from encode) are the body as the SDK would have encoded it.
        content, json_body = (body, None) if isinstance(body, bytes) else (None, body)
        return await self._client.post(
            "/chat/completions",
            body=json_body,
            content=content,
            cast_to=httpx2.Response,
            options=_REQUEST_OPTIONS,
            stream=True,
            stream_cls=None,
        )

    def _failure(self, exc: Exception) -> Failed:
        """Translate an SDK exception raised before the response's body was read."""
        shared = self._shared_failure(exc)
        if shared is not None:
            return shared
        name, secrets = self.name, self._secrets
        if isinstance(exc, openai.APIStatusError):
            return _errors.status_failure(
                name,
                exc.status_code,
                message=_server_message(exc.body, exc.message),
                error_type=exc.type,
                code=exc.code,
                headers=exc.response.headers,
                secrets=secrets,
            )
        return self._unknown_failure(exc)


class ChunkReader(StreamReader):
    """Reads ``chat.completion.chunk`` events into text and tool-call deltas.

    The fields read, and the rules, are those of the SDK objects the adapter
    read before (``ChatCompletionChunk``): choice 0 only; ``delta.content``
    then ``delta.refusal`` as text; ``delta.tool_calls`` by ``index``;
    the last ``finish_reason`` and the last ``usage`` win. An event whose
    JSON has a truthy ``error`` is an error sent inside the stream, as the
    SDK treats it; ``[DONE]`` ends the stream.
    """

    __slots__ = ("_assembly", "_finish", "_messages", "_usage")

    def __init__(self, vendor: str, secrets: tuple[str, ...], messages: object = ()) -> None:
        super().__init__(vendor, secrets)
        self._assembly = MessageAssembly()
        self._finish: str | None = None
        self._usage: Usage | None = None
        # For a usage estimate when the server reports none (or what makes them).
        self._messages = messages

    def read(self, sse: ServerSentEvent) -> Sequence[StreamEvent]:
        data = sse.data
        if data.startswith("[DONE]"):
            self.ended = True
            return ()
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"an event that is not a JSON object: {data[:80]!r}")
        error = chunk.get("error")
        if error:
            raise StreamFailure(self._stream_error(error))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        out: list[StreamEvent] = []
        assembly = self._assembly
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # n > 1 is never requested
            delta = choice.get("delta")
            if delta:
                for piece in (delta.get("content"), delta.get("refusal")):
                    text_event = assembly.text(piece)
                    if text_event is not None:
                        out.append(text_event)
                for call in delta.get("tool_calls") or ():
                    function = call.get("function") or {}
                    call_event = assembly.tool_call(
                        call.get("index"),
                        arguments=function.get("arguments"),
                        id=call.get("id"),
                        name=function.get("name"),
                    )
                    if call_event is not None:
                        out.append(call_event)
            finish = choice.get("finish_reason")
            if finish:
                self._finish = finish
        return out

    def result(self) -> Done | Failed:
        if self._finish is None:
            return _errors.failure(self.vendor, "malformed", "ended before a finish_reason")
        message = self._assembly.message()
        stop = _STOP_REASONS.get(self._finish, "other")
        if stop == "end" and message.tool_calls:
            stop = "tool_calls"  # some compatible servers report "stop" for tool calls
        usage = self._usage
        if usage is None:  # only then: the messages are the whole conversation, made again
            messages = self._messages() if callable(self._messages) else self._messages
            usage = _estimate({"messages": messages}, message)
        return Done(message, usage, stop)

    def _stream_error(self, error: object) -> Failed:
        """What the SDK made of ``{"error": ...}`` (an ``APIError``), translated."""
        message = error.get("message") if isinstance(error, dict) else None
        if not message or not isinstance(message, str):
            message = "An error occurred during streaming"
        error_type = code = None
        if isinstance(error, dict):
            raw_type, raw_code = error.get("type"), error.get("code")
            error_type = raw_type if isinstance(raw_type, str) else None
            code = str(raw_code) if raw_code is not None else None
        return _errors.stream_error_failure(
            self.vendor,
            message=_server_message(error, message),
            error_type=error_type,
            code=code,
            secrets=self.secrets,
        )


def build_body(
    request: Request, dialect: OpenAIDialect = OFFICIAL_DIALECT, *, messages: bool = True
) -> dict[str, Any]:
    """The JSON body of a streamed Chat Completions call for ``request``
    (without ``messages``: an empty list in their place, for :func:`encode_body`).

    Only what the request sets is sent: the output limit under the dialect's
    field, ``prompt_cache_key`` only where the dialect takes it, and
    ``stream_options.include_usage`` so the last event carries the usage."""
    # In the order the SDK's ``create`` sends them, so the bytes match too.
    body: dict[str, Any] = {
        "model": request.model,
        "stream": True,
        "messages": translate_messages(request) if messages else [],
    }
    if request.max_output_tokens is not None:
        body[dialect.max_tokens_field] = request.max_output_tokens
    if request.cache_key and dialect.prompt_cache_key:
        body["prompt_cache_key"] = request.cache_key
    if request.stop:
        body["stop"] = list(request.stop)
    body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = translate_tools(request.tools)
    return body


def translate_messages(request: Request) -> list[ChatCompletionMessageParam]:
    """Neutral messages as Chat Completions messages, the system prompt first."""
    out: list[ChatCompletionMessageParam] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        out.extend(translate_message(message))
    return out


def translate_message(message: Message) -> list[ChatCompletionMessageParam]:
    """One neutral message as Chat Completions messages (one)."""
    if isinstance(message, UserMessage):
        return [{"role": "user", "content": message.text}]
    if isinstance(message, ToolResult):
        return [{"role": "tool", "tool_call_id": message.call_id, "content": message.text}]
    if not message.tool_calls:
        return [{"role": "assistant", "content": message.text}]
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in message.tool_calls
    ]
    return [{"role": "assistant", "content": message.text or None, "tool_calls": calls}]


def translate_tools(tools: Iterable[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    """Neutral tool specs as function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        for tool in tools
    ]


def _estimate(body: Mapping[str, object], message: AssistantMessage) -> Usage:
    """Usage a server did not report, estimated at four characters a token:
    enough for token limits to work; the cost stays unknown."""
    sent = len(json.dumps(body, ensure_ascii=False))
    received = len(message.text) + sum(len(c.arguments) + len(c.name) for c in message.tool_calls)
    return Usage(input_tokens=sent // 4 + 1, output_tokens=received // 4 + 1, estimated=True)


def _usage(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=token_count(raw.get("prompt_tokens") or 0),
        output_tokens=token_count(raw.get("completion_tokens") or 0),
        cached_tokens=token_count(details.get("cached_tokens") or 0),
        cache_write_tokens=token_count(details.get("cache_write_tokens") or 0),
    )


def _server_message(body: object, fallback: str) -> str:
    """The ``message`` of an error body (the SDK unwraps ``{"error": {...}}``)."""
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    elif isinstance(body, str) and body.strip():
        return body
    return fallback


__all__ = [
    "COMPATIBLE_DIALECT",
    "OFFICIAL_DIALECT",
    "ChunkReader",
    "OpenAIDialect",
    "OpenAIProvider",
    "build_body",
    "is_official",
    "translate_message",
    "translate_messages",
    "translate_tools",
]

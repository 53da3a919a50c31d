"""The OpenAI-compatible provider: Chat Completions, streamed, through the official SDK.

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
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import openai
from openai import omit
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)

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

OFFICIAL_HOST = "api.openai.com"

_SDK_ERRORS = SDKErrors(
    timeout=openai.APITimeoutError,
    connection=openai.APIConnectionError,
    validation=openai.APIResponseValidationError,
)

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
            errors=_SDK_ERRORS,
            placeholder_key=PLACEHOLDER_API_KEY,
            key_required=official,
            key_hint=" (or a base_url for a local server)",
        )
        self.dialect = dialect or (OFFICIAL_DIALECT if official else COMPATIBLE_DIALECT)

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Run one Chat Completions call; see :class:`~recursa.models.types.Provider`."""
        dialect = self.dialect
        limit = omit if request.max_output_tokens is None else request.max_output_tokens
        official_limit = dialect.max_tokens_field == "max_completion_tokens"
        # The conversation goes in ``extra_body``, which the SDK merges into the
        # JSON as given: passed as ``messages`` it is first walked field by field
        # against the SDK's TypedDicts, which costs milliseconds per call and
        # grows with the conversation (10+ ms at 150 messages, measured).
        # ``messages=[]`` satisfies the signature; ``extra_body`` overrides it.
        body: dict[str, object] = {"messages": translate_messages(request)}
        try:
            response = await self._client.chat.completions.create(
                model=request.model,
                messages=[],
                extra_body=body,
                tools=translate_tools(request.tools) if request.tools else omit,
                max_completion_tokens=limit if official_limit else omit,
                max_tokens=omit if official_limit else limit,
                temperature=omit if request.temperature is None else request.temperature,
                stop=list(request.stop) if request.stop else omit,
                prompt_cache_key=request.cache_key
                if request.cache_key and dialect.prompt_cache_key
                else omit,
                stream=True,
                stream_options={"include_usage": True},
            )
        except openai.OpenAIError as exc:
            yield self._failure(exc, started=False)
            return
        assembly = MessageAssembly()
        finish: str | None = None
        usage: Usage | None = None
        try:
            async for chunk in response:
                usage = _usage(chunk) or usage
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue  # n > 1 is never requested
                    delta = choice.delta
                    for piece in (delta.content, delta.refusal):
                        text_event = assembly.text(piece)
                        if text_event is not None:
                            yield text_event
                    for call in delta.tool_calls or ():
                        function = call.function
                        call_event = assembly.tool_call(
                            call.index,
                            arguments=function.arguments if function else None,
                            id=call.id,
                            name=function.name if function else None,
                        )
                        if call_event is not None:
                            yield call_event
                    finish = choice.finish_reason or finish
        except openai.OpenAIError as exc:
            yield self._failure(exc, started=True)
            return
        except ValueError as exc:  # undecodable JSON or text in an event
            yield self._undecodable(exc)
            return
        finally:
            await response.close()
        if finish is None:
            yield _errors.failure(self.name, "malformed", "ended before a finish_reason")
            return
        message = assembly.message()
        stop = _STOP_REASONS.get(finish, "other")
        if stop == "end" and message.tool_calls:
            stop = "tool_calls"  # some compatible servers report "stop" for tool calls
        yield Done(message, usage or _estimate(body, message), stop)

    def _failure(self, exc: openai.OpenAIError, *, started: bool) -> Failed:
        """Translate an SDK exception; ``started`` means the response had begun."""
        shared = self._shared_failure(exc, started=started)
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
        if isinstance(exc, openai.APIError):  # an error object sent inside the stream
            return _errors.stream_error_failure(
                name,
                message=_server_message(exc.body, exc.message),
                error_type=exc.type,
                code=exc.code,
                secrets=secrets,
            )
        return self._unknown_failure(exc)


def translate_messages(request: Request) -> list[ChatCompletionMessageParam]:
    """Neutral messages as Chat Completions messages, the system prompt first."""
    out: list[ChatCompletionMessageParam] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, ToolResult):
            out.append({"role": "tool", "tool_call_id": message.call_id, "content": message.text})
        elif isinstance(message, AssistantMessage):
            if not message.tool_calls:
                out.append({"role": "assistant", "content": message.text})
                continue
            calls: list[ChatCompletionMessageFunctionToolCallParam] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
            out.append({"role": "assistant", "content": message.text or None, "tool_calls": calls})
    return out


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


def _usage(chunk: ChatCompletionChunk) -> Usage | None:
    raw = chunk.usage
    if raw is None:
        return None
    details = raw.prompt_tokens_details
    return Usage(
        input_tokens=raw.prompt_tokens,
        output_tokens=raw.completion_tokens,
        cached_tokens=(details.cached_tokens or 0) if details else 0,
        cache_write_tokens=(details.cache_write_tokens or 0) if details else 0,
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
    "OpenAIDialect",
    "OpenAIProvider",
    "is_official",
    "translate_messages",
    "translate_tools",
]

"""The bytes the fake model server sends: OpenAI and Anthropic wire formats.

Everything here is a pure function from a scripted :class:`Reply` or
:class:`Fault` (and the request body) to what the real API would send:

- OpenAI Chat Completions: ``data: {chunk}\\n\\n`` events of
  ``chat.completion.chunk`` objects (a role chunk, content chunks, tool-call
  chunks keyed by ``index`` with ``id``/``name`` in the first, a chunk with the
  ``finish_reason``, a usage chunk with empty ``choices`` when
  ``stream_options.include_usage`` is set), then ``data: [DONE]\\n\\n``; or
  one ``chat.completion`` object. Errors are ``{"error": {message, type,
  param, code}}``.
- Anthropic Messages: ``event: NAME\\ndata: {json}\\n\\n`` events
  (``message_start``, ``content_block_start``, a ``ping``,
  ``content_block_delta`` with ``text_delta`` or ``input_json_delta``,
  ``content_block_stop``, ``message_delta``, ``message_stop``); or one
  ``message`` object. Errors are ``{"type": "error", "error": {type,
  message}, "request_id": ...}``.

JSON is compact, as both APIs send it. Each event is returned as its own
``bytes`` so the server can send it as one HTTP chunk.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from typing import Any, Literal

from recursa.models.types import StopReason, Usage
from recursa.testing.fake_script import Fault, Reply, split

Vendor = Literal["openai", "anthropic"]

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"

_OPENAI_FINISH: dict[StopReason, str] = {
    "end": "stop",
    "tool_calls": "tool_calls",
    "max_tokens": "length",
    "stop_sequence": "stop",
    "other": "content_filter",
}
_ANTHROPIC_STOP: dict[StopReason, str] = {
    "end": "end_turn",
    "tool_calls": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "other": "refusal",
}


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _token(prefix: str, length: int = 24) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def request_id(vendor: Vendor) -> tuple[str, str]:
    """The response header naming the request, as each vendor sends it."""
    if vendor == "openai":
        return "x-request-id", _token("req_", 32)
    return "request-id", _token("req_011C", 20)


def _tool_ids(reply: Reply, prefix: str) -> list[str]:
    return [call.id or _token(prefix) for call in reply.tool_calls]


# --- OpenAI -------------------------------------------------------------------


def _openai_usage(usage: Usage) -> dict[str, Any]:
    prompt_details: dict[str, int] = {"cached_tokens": usage.cached_tokens, "audio_tokens": 0}
    if usage.cache_write_tokens:
        prompt_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def openai_events(reply: Reply, body: Mapping[str, Any], usage: Usage) -> list[bytes]:
    """The streamed answer to a Chat Completions request, ``[DONE]`` included."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    head: dict[str, Any] = {
        "id": _token("chatcmpl-", 29),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "service_tier": "default",
        "system_fingerprint": "fp_fake0000",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = dict(head)
        data["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if include_usage:
            data["usage"] = None
        return f"data: {_dumps(data)}\n\n".encode()

    events: list[bytes] = []
    ids = _tool_ids(reply, "call_")
    role: dict[str, Any] = {
        "role": "assistant",
        "content": "" if reply.text else None,
        "refusal": None,
    }
    for piece in split(reply.text, reply.chunk):
        if role:
            events.append(chunk(role))
            role = {}
        events.append(chunk({"content": piece}))
    for index, (call, call_id) in enumerate(zip(reply.tool_calls, ids, strict=True)):
        start = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        events.append(chunk({**role, "tool_calls": [start]}))
        role = {}
        for piece in split(call.arguments_json(), reply.chunk):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    if role:
        events.append(chunk(role))
    events.append(chunk({}, _OPENAI_FINISH[reply.effective_stop]))
    if include_usage:
        final = dict(head, choices=[], usage=_openai_usage(usage))
        events.append(f"data: {_dumps(final)}\n\n".encode())
    events.append(b"data: [DONE]\n\n")
    return events


def openai_completion(reply: Reply, body: Mapping[str, Any], usage: Usage) -> dict[str, Any]:
    """The non-streamed answer: one ``chat.completion`` object."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text or None,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call, call_id in zip(reply.tool_calls, _tool_ids(reply, "call_"), strict=True)
        ]
    return {
        "id": _token("chatcmpl-", 29),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "")),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _OPENAI_FINISH[reply.effective_stop],
            }
        ],
        "usage": _openai_usage(usage),
        "service_tier": "default",
        "system_fingerprint": "fp_fake0000",
    }


# --- Anthropic ----------------------------------------------------------------


def _anthropic_usage(usage: Usage, *, output: int) -> dict[str, Any]:
    return {
        "input_tokens": max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens),
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": output,
        "service_tier": "standard",
    }


def _stop_sequence(reply: Reply, body: Mapping[str, Any]) -> str | None:
    stops = body.get("stop_sequences")
    if reply.effective_stop == "stop_sequence" and isinstance(stops, list) and stops:
        return str(stops[0])
    return None


def anthropic_events(reply: Reply, body: Mapping[str, Any], usage: Usage) -> list[bytes]:
    """The streamed answer to a Messages request, ending with ``message_stop``."""

    def event(data: dict[str, Any]) -> bytes:
        return f"event: {data['type']}\ndata: {_dumps(data)}\n\n".encode()

    def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> list[bytes]:
        head = {"type": "content_block_start", "index": index, "content_block": start}
        pieces = [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        tail = {"type": "content_block_stop", "index": index}
        return [event(head), *map(event, pieces), event(tail)]

    message: dict[str, Any] = {
        "id": _token("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model", "")),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(usage, output=1),
    }
    blocks: list[list[bytes]] = []
    if reply.text:
        texts = [{"type": "text_delta", "text": p} for p in split(reply.text, reply.chunk)]
        blocks.append(block(0, {"type": "text", "text": ""}, texts))
    for call, call_id in zip(reply.tool_calls, _tool_ids(reply, "toolu_01"), strict=True):
        # The input starts as {} and streams as JSON text, led by an empty piece.
        pieces = ["", *split(call.arguments_json(), reply.chunk)]
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        start = {"type": "tool_use", "id": call_id, "name": call.name, "input": {}}
        blocks.append(block(len(blocks), start, deltas))
    events = [event({"type": "message_start", "message": message})]
    for number, block_events in enumerate(blocks):
        events.append(block_events[0])
        if number == 0:  # the API pings once the first block has started
            events.append(b'event: ping\ndata: {"type": "ping"}\n\n')
        events.extend(block_events[1:])
    stop = {
        "stop_reason": _ANTHROPIC_STOP[reply.effective_stop],
        "stop_sequence": _stop_sequence(reply, body),
    }
    usage_delta = {"output_tokens": usage.output_tokens}
    events.append(event({"type": "message_delta", "delta": stop, "usage": usage_delta}))
    events.append(event({"type": "message_stop"}))
    return events


def _tool_input(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return {"_invalid_json": text}


def anthropic_message(reply: Reply, body: Mapping[str, Any], usage: Usage) -> dict[str, Any]:
    """The non-streamed answer: one ``message`` object."""
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call, call_id in zip(reply.tool_calls, _tool_ids(reply, "toolu_01"), strict=True):
        content.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": call.name,
                "input": _tool_input(call.arguments_json()),
            }
        )
    return {
        "id": _token("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model", "")),
        "content": content,
        "stop_reason": _ANTHROPIC_STOP[reply.effective_stop],
        "stop_sequence": _stop_sequence(reply, body),
        "usage": _anthropic_usage(usage, output=usage.output_tokens),
    }


# --- Either vendor ------------------------------------------------------------


def stream_events(
    vendor: Vendor, reply: Reply, body: Mapping[str, Any], usage: Usage
) -> list[bytes]:
    """The streamed answer in ``vendor``'s format."""
    build = openai_events if vendor == "openai" else anthropic_events
    return build(reply, body, usage)


def whole_answer(vendor: Vendor, reply: Reply, body: Mapping[str, Any], usage: Usage) -> bytes:
    """The non-streamed answer in ``vendor``'s format, as JSON bytes."""
    build = openai_completion if vendor == "openai" else anthropic_message
    return _dumps(build(reply, body, usage)).encode()


def garbled_event(vendor: Vendor) -> bytes:
    """An event cut off inside its JSON, as a garbling proxy might deliver it."""
    if vendor == "openai":
        return b'data: {"id":"chatcmpl-garbled","choices":[{"delta":\n\n'
    return b'event: content_block_start\ndata: {"type":"content_block_start","index":\n\n'


# --- Errors -------------------------------------------------------------------

# status, OpenAI (type, code, message), Anthropic (type, message)
_ERRORS: dict[str, tuple[int, int, tuple[str, str | None, str], tuple[str, str]]] = {
    "rate_limit": (
        429,
        429,
        (
            "requests",
            "rate_limit_exceeded",
            "Rate limit reached for requests. Please try again later.",
        ),
        (
            "rate_limit_error",
            "This request would exceed your organization's rate limit. Please try again later.",
        ),
    ),
    "server_error": (
        500,
        500,
        (
            "server_error",
            None,
            "The server had an error while processing your request. Sorry about that!",
        ),
        ("api_error", "Internal server error"),
    ),
    "overloaded": (
        503,
        529,
        (
            "server_error",
            None,
            "That model is currently overloaded with other requests. Please try again later.",
        ),
        ("overloaded_error", "Overloaded"),
    ),
    "auth": (
        401,
        401,
        ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: {key}."),
        ("authentication_error", "invalid x-api-key"),
    ),
    "bad_request": (
        400,
        400,
        ("invalid_request_error", None, "Invalid value for 'messages': the request is malformed."),
        ("invalid_request_error", "messages: Input should be a valid list"),
    ),
    "context_overflow": (
        400,
        400,
        (
            "invalid_request_error",
            "context_length_exceeded",
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "131072 tokens. Please reduce the length of the messages.",
        ),
        ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
    ),
}


def error_answer(
    vendor: Vendor, fault: Fault, headers: Mapping[str, str]
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, extra headers and JSON body of an HTTP error fault.

    The OpenAI ``auth`` message echoes the key it was sent, as the real API does
    (the real one masks the middle; echoing all of it lets tests prove that
    adapters keep keys out of their messages).
    """
    openai_status, anthropic_status, openai_error, anthropic_error = _ERRORS[fault.kind]
    extra: list[tuple[str, str]] = []
    if fault.kind == "rate_limit":
        seconds = fault.retry_after
        extra.append(("retry-after", f"{seconds:g}"))
        if vendor == "openai":
            extra.append(("retry-after-ms", f"{int(seconds * 1000)}"))
    if vendor == "openai":
        kind, code, message = openai_error
        key = headers.get("authorization", "").removeprefix("Bearer ").strip()
        text = fault.message or message.replace("{key}", key)
        body: dict[str, Any] = {
            "error": {"message": text, "type": kind, "param": None, "code": code}
        }
        return openai_status, extra, _dumps(body).encode()
    kind, message = anthropic_error
    body = {
        "type": "error",
        "error": {"type": kind, "message": fault.message or message},
        "request_id": _token("req_011C", 20),
    }
    return anthropic_status, extra, _dumps(body).encode()


def stream_error_event(vendor: Vendor, message: str | None = None) -> bytes:
    """An error sent inside an open stream (the response status is already 200)."""
    if vendor == "openai":
        error = {
            "message": message or "The server had an error processing your request.",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        return f"data: {_dumps({'error': error})}\n\n".encode()
    body = {
        "type": "error",
        "error": {"type": "overloaded_error", "message": message or "Overloaded"},
    }
    return f"event: error\ndata: {_dumps(body)}\n\n".encode()


def not_found(vendor: Vendor | None, method: str, path: str) -> tuple[int, bytes]:
    """A 404 for a path neither API serves, in the OpenAI shape unless Anthropic's."""
    text = f"Unknown request URL: {method} {path}."
    if vendor == "anthropic":
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": "not_found_error", "message": text},
        }
    else:
        body = {
            "error": {
                "message": text,
                "type": "invalid_request_error",
                "param": None,
                "code": "unknown_url",
            }
        }
    return 404, _dumps(body).encode()


def invalid_json(vendor: Vendor) -> bytes:
    """The 400 body for a request whose body is not a JSON object."""
    text = "We could not parse the JSON body of your request."
    if vendor == "anthropic":
        return _dumps(
            {"type": "error", "error": {"type": "invalid_request_error", "message": text}}
        ).encode()
    return _dumps(
        {"error": {"message": text, "type": "invalid_request_error", "param": None, "code": None}}
    ).encode()


__all__ = [
    "JSON_CONTENT_TYPE",
    "SSE_CONTENT_TYPE",
    "Vendor",
    "anthropic_events",
    "anthropic_message",
    "error_answer",
    "garbled_event",
    "invalid_json",
    "not_found",
    "openai_completion",
    "openai_events",
    "request_id",
    "stream_error_event",
    "stream_events",
    "whole_answer",
]

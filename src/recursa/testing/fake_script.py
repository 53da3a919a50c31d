"""What the fake model server answers: scripted replies and faults.

A script is a sequence of :class:`Reply` and :class:`Fault` items, consumed one
per model request, whichever API (OpenAI or Anthropic) the request uses. The
same values can be written as JSON for ``python -m recursa.testing.fake_server
--script FILE.json``::

    [
      {"text": "Let me compute that.",
       "tool_calls": [{"name": "python", "arguments": {"code": "x = 1"}}]},
      {"fault": "rate_limit", "retry_after": 0},
      {"text": "Done.", "usage": {"input_tokens": 1200, "output_tokens": 5,
                                  "cached_tokens": 1024}}
    ]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from recursa.models.types import StopReason, Usage

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "overloaded",
    "auth",
    "bad_request",
    "context_overflow",
    "timeout",
    "truncated",
    "incomplete",
    "garbled",
    "stream_error",
]
"""How a request fails.

- ``rate_limit``: 429 with a ``retry-after`` header (:attr:`Fault.retry_after`).
- ``server_error``: 500. ``overloaded``: 529 (Anthropic) or 503 (OpenAI).
- ``auth``: 401. ``bad_request``: 400. ``context_overflow``: 400 with each
  vendor's real context-length error body.
- ``timeout``: the request is read and never answered, until the client
  disconnects or the server stops.
- ``truncated``: the first part of a valid stream, then the connection closes
  mid-body (a cut the HTTP client notices).
- ``incomplete``: the first part of a valid stream, then a clean end of body,
  so only the missing terminal event (``[DONE]`` / ``message_stop``) tells.
- ``garbled``: a stream whose second event carries undecodable JSON.
- ``stream_error``: the first part of a stream, then an error sent inside it
  (status 200), as both APIs do when a model overloads mid-answer: an
  Anthropic ``error`` event with ``overloaded_error``, an OpenAI chunk
  ``{"error": {..., "type": "server_error"}}``.
"""

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

DEFAULT_CHUNK = 4
"""Characters per text delta; tool-call argument JSON is split the same way."""


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    """One tool call to emit. ``arguments`` is a JSON object, or raw JSON text
    (which may be invalid on purpose). ``id`` defaults to a generated one."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful answer.

    ``usage`` defaults to counts estimated from the request and reply sizes
    (about four characters a token, nothing cached). ``stop_reason`` defaults
    to ``tool_calls`` when there are tool calls, else ``end``. ``chunk`` sets
    the size of each streamed piece of text and argument JSON.
    ``stall_after``, when set, sends that many stream events and then holds
    the response open until the client goes away (for abandonment tests).
    ``delay`` seconds pass before the answer starts, like a model thinking.
    """

    text: str = ""
    tool_calls: Sequence[ToolCallSpec] = ()
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    chunk: int = DEFAULT_CHUNK
    stall_after: int | None = None
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.chunk < 1:
            raise ValueError("chunk must be at least 1")
        if self.delay < 0:
            raise ValueError("delay cannot be negative")

    @property
    def effective_stop(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_calls" if self.tool_calls else "end"


@dataclass(frozen=True, slots=True)
class Fault:
    """A failed answer of ``kind`` (see :data:`FaultKind`). ``retry_after`` is
    the seconds sent in the ``retry-after`` header of a ``rate_limit``;
    ``message`` replaces the vendor's usual error message."""

    kind: FaultKind
    retry_after: float = 1.0
    message: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r} (known: {', '.join(FAULT_KINDS)})")


ScriptItem = Reply | Fault

Responder = Callable[[str, dict[str, Any]], ScriptItem]
"""Decides an answer from the request path and its parsed JSON body."""

EXHAUSTED_TEXT = "fake server: the script is exhausted"
"""What the server answers when no scripted item or responder is left."""


def split(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters (none for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def estimate_usage(body: Mapping[str, Any], reply: Reply) -> Usage:
    """Plausible token counts for a reply without scripted usage."""
    prompt = json.dumps(
        {k: body.get(k) for k in ("system", "messages", "tools") if k in body},
        separators=(",", ":"),
    )
    produced = len(reply.text) + sum(
        len(c.arguments_json()) + len(c.name) for c in reply.tool_calls
    )
    return Usage(input_tokens=len(prompt) // 4 + 1, output_tokens=produced // 4 + 1)


def item_from_json(raw: object) -> ScriptItem:
    """One script item from its JSON form (see the module docstring)."""
    if not isinstance(raw, dict):
        raise ValueError(f"a script item must be an object, got {raw!r}")
    if "fault" in raw:
        unknown = set(raw) - {"fault", "retry_after", "message"}
        if unknown:
            raise ValueError(f"unknown fault fields: {', '.join(sorted(unknown))}")
        return Fault(raw["fault"], float(raw.get("retry_after", 1.0)), raw.get("message"))
    unknown = set(raw) - {
        "text",
        "tool_calls",
        "usage",
        "stop_reason",
        "chunk",
        "stall_after",
        "delay",
    }
    if unknown:
        raise ValueError(f"unknown reply fields: {', '.join(sorted(unknown))}")
    calls = tuple(
        ToolCallSpec(c["name"], c.get("arguments", {}), c.get("id"))
        for c in raw.get("tool_calls", ())
    )
    usage = raw.get("usage")
    return Reply(
        text=str(raw.get("text", "")),
        tool_calls=calls,
        usage=Usage(**usage) if usage is not None else None,
        stop_reason=raw.get("stop_reason"),
        chunk=int(raw.get("chunk", DEFAULT_CHUNK)),
        stall_after=raw.get("stall_after"),
        delay=float(raw.get("delay", 0.0)),
    )


def load_script(raw: object) -> list[ScriptItem]:
    """A whole script from its JSON form: a list of items."""
    if not isinstance(raw, list):
        raise ValueError("a script must be a JSON list of replies and faults")
    return [item_from_json(item) for item in raw]


__all__ = [
    "DEFAULT_CHUNK",
    "EXHAUSTED_TEXT",
    "FAULT_KINDS",
    "Fault",
    "FaultKind",
    "Reply",
    "Responder",
    "ScriptItem",
    "ToolCallSpec",
    "estimate_usage",
    "item_from_json",
    "load_script",
    "split",
]

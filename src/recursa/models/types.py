"""The provider contract: a request in, an async stream of typed events out.

A :class:`Provider` turns a :class:`Request` into an async iterator of
:data:`StreamEvent`. The stream ends with exactly one :class:`Done` or
:class:`Failed`, and nothing follows it. A provider never raises for a failed
call: SDK and network exceptions become ``Failed(kind, ...)``, and the caller
branches on the closed :data:`~recursa.errors.FailureKind`. (Only programming
errors such as a request the provider can never encode may raise.)

Between the start and the end a provider may yield any number of
:class:`TextDelta` and :class:`ToolCallDelta` pieces; :class:`Done` carries the
complete, assembled message, so consumers that do not stream can ignore the
pieces. :class:`Retrying` is yielded only by :func:`recursa.models.retry.with_retries`
and tells a consumer to discard the partial reply it has seen so far.

Messages are provider-neutral; each adapter translates them to its wire format.
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, Protocol, runtime_checkable

from recursa.errors import FailureKind
from recursa.values import frozen

StopReason = Literal["end", "tool_calls", "max_tokens", "stop_sequence", "other"]


@frozen
class ToolSpec:
    """A tool offered to the model. ``parameters`` is a JSON Schema object."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@frozen
class ToolCall:
    """One tool call as the model made it. ``arguments`` is the raw JSON text,
    unparsed: malformed arguments are the model's mistake, handled by the caller."""

    id: str
    name: str
    arguments: str


@frozen
class UserMessage:
    text: str
    role: Literal["user"] = "user"


@frozen
class AssistantMessage:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"


@frozen
class ToolResult:
    """The result of one tool call, answered in the next request."""

    call_id: str
    text: str
    name: str = "python"
    role: Literal["tool"] = "tool"


Message = UserMessage | AssistantMessage | ToolResult


@frozen
class Request:
    """One model call. ``model`` is the provider's own model name (no prefix).

    ``cache_key`` names the conversation so providers that cache prompt
    prefixes (the local model, Anthropic, OpenAI) can reuse them.
    """

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    cache_key: str | None = None


@frozen
class Usage:
    """Tokens of one call. ``input_tokens`` counts every prompt token, cached or not;
    ``cached_tokens`` is the part read from a prompt cache; ``cache_write_tokens``
    the part written to one (Anthropic bills it separately). ``estimated``: the
    server reported no usage, so the counts are estimated from the text (about
    four characters a token) and the cost is unknown."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@frozen
class TextDelta:
    text: str
    type: Literal["text_delta"] = "text_delta"


@frozen
class ToolCallDelta:
    """A piece of tool call ``index``: ``id`` and ``name`` arrive with the first piece."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None
    type: Literal["tool_call_delta"] = "tool_call_delta"


@frozen
class Retrying:
    """The call failed with a retryable kind and is being made again after ``delay`` seconds.
    Anything streamed since the last ``Retrying`` (or the start) is void."""

    kind: FailureKind
    message: str
    attempt: int
    delay: float
    type: Literal["retrying"] = "retrying"


@frozen
class Done:
    message: AssistantMessage
    usage: Usage
    stop_reason: StopReason = "end"
    type: Literal["done"] = "done"


@frozen
class Failed:
    kind: FailureKind
    message: str
    status: int | None = None
    retry_after: float | None = None
    type: Literal["failed"] = "failed"


StreamEvent = TextDelta | ToolCallDelta | Retrying | Done | Failed


@frozen
class ModelInfo:
    """What the harness needs to know about a model.

    ``native_tools``: False means the model gets the fenced-code protocol.
    ``context_window``: tokens, or None when unknown.
    """

    ref: str
    native_tools: bool = True
    context_window: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class Provider(Protocol):
    """A model provider. Implementations live in ``recursa.models`` and register
    themselves in :mod:`recursa.models.registry`."""

    name: str

    def info(self, model: str) -> ModelInfo:
        """Facts about ``model`` (the name without the provider prefix)."""
        ...

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Run one call. Ends with exactly one :class:`Done` or :class:`Failed`."""
        ...

    async def aclose(self) -> None:
        """Release connections and loaded models."""
        ...


def extends(before: Sequence[object], after: Sequence[object]) -> bool:
    """``after`` is ``before`` (the same objects, in order) and perhaps more: how
    a conversation grows from one call to the next (checked in one pass in C)."""
    return len(after) >= len(before) and all(map(operator.is_, before, after))


__all__ = [
    "AssistantMessage",
    "Done",
    "Failed",
    "Message",
    "ModelInfo",
    "Provider",
    "Request",
    "Retrying",
    "StopReason",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
    "extends",
]

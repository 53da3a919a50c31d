"""Assembling a streamed reply: text pieces and tool-call pieces into one message.

Both HTTP adapters feed vendor deltas in as they arrive and get back the
neutral :class:`TextDelta` / :class:`ToolCallDelta` to yield, then ask for the
finished :class:`AssistantMessage` for :class:`Done`.

Invariants:

- Tool calls are numbered 0, 1, 2... in order of first appearance, whatever
  key the vendor uses (an OpenAI ``index``, an Anthropic content-block index).
  ``ToolCallDelta.index`` is that number, so it is also the call's position in
  ``AssistantMessage.tool_calls``.
- The first delta of a call carries its ``id`` and ``name``; later ones carry
  only argument text. Empty later pieces are not reported.
- A call whose vendor sent no id gets a unique generated one, and a call with
  no argument text gets ``"{}"`` (an empty JSON object), so the message can be
  sent back to any vendor.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field

from recursa.models.types import AssistantMessage, TextDelta, ToolCall, ToolCallDelta


@dataclass(slots=True)
class _Call:
    ordinal: int
    id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)


class MessageAssembly:
    """Accumulates one streamed assistant reply."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[Hashable, _Call] = {}

    def text(self, piece: str | None) -> TextDelta | None:
        """Record a text piece; the delta to yield, or None for an empty piece."""
        if not piece:
            return None
        self._text.append(piece)
        return TextDelta(piece)

    def tool_call(
        self,
        key: Hashable,
        *,
        arguments: str | None,
        id: str | None = None,
        name: str | None = None,
    ) -> ToolCallDelta | None:
        """Record a piece of the tool call the vendor calls ``key``; the delta to yield, or None."""
        call = self._calls.get(key)
        first = call is None
        if call is None:
            call = _Call(ordinal=len(self._calls))
            self._calls[key] = call
        if id and not call.id:
            call.id = id
        if name and not call.name:
            call.name = name
        if arguments:
            call.pieces.append(arguments)
        if first:
            return ToolCallDelta(
                call.ordinal, arguments or "", id=call.id or None, name=call.name or None
            )
        return ToolCallDelta(call.ordinal, arguments) if arguments else None

    @property
    def tool_call_count(self) -> int:
        return len(self._calls)

    def message(self) -> AssistantMessage:
        """The assembled message, tool calls in order of first appearance."""
        calls = tuple(
            ToolCall(
                id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                name=call.name,
                arguments="".join(call.pieces) or "{}",
            )
            for call in sorted(self._calls.values(), key=lambda c: c.ordinal)
        )
        return AssistantMessage(text="".join(self._text), tool_calls=calls)


__all__ = ["MessageAssembly"]

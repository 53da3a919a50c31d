"""Prompt rendering for the embedded models: a request becomes the text the model was trained on.

The catalog models (Qwen2.5-Coder, SmolLM2) use ChatML, as the templates in
their GGUF metadata show::

    <|im_start|>system
    {system}<|im_end|>
    <|im_start|>user
    {text}<|im_end|>
    <|im_start|>assistant
    {text}<|im_end|>
    <|im_start|>assistant
                                        <- the model continues here

:func:`render_chatml` returns the prompt as :data:`Piece` values: plain text,
and :class:`Special` markers that the tokenizer maps to their single control
token. Text is tokenized with special-token parsing *off*, so a cell output
that happens to contain ``<|im_end|>`` stays text and cannot end a turn or
forge one (prompt injection through tool output).

Rendering rules, shared by every family:

- An empty ``system`` falls back to the model's own default system text (the
  one its template inserts), or is left out when the model has none.
- A :class:`ToolResult` is a user turn holding its text; consecutive results
  share one user turn, separated by a blank line (the models get the
  fenced-code protocol, never native tool calls).
- An :class:`AssistantMessage` with tool calls (a conversation that started on
  a model with native tools) shows each call as a fenced block: a ``python``
  call's ``code`` argument as a ```` ```python ```` fence, anything else as JSON.

Models outside the catalog with a non-ChatML template are rendered by their
own Jinja template (:func:`render_template`); that path parses special tokens
in the rendered string, a weaker guarantee recorded in the provider's notes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from recursa.models.types import AssistantMessage, Message, ToolCall, ToolResult, UserMessage

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

CHATML_STOPS: tuple[str, ...] = (IM_END, IM_START, "<|endoftext|>")
"""ChatML control tokens that end an assistant turn when the model emits them."""


@dataclass(frozen=True, slots=True)
class Special:
    """A control token, written by its text (``<|im_start|>``); never user content."""

    text: str


Piece = str | Special
"""One part of a rendered prompt: text to tokenize literally, or a control token."""


def render_chatml(
    system: str, messages: Sequence[Message], *, default_system: str | None = None
) -> list[Piece]:
    """The ChatML prompt for ``system`` and ``messages``, ending with an open assistant turn.

    Adjacent text pieces are merged so each run between control tokens is
    tokenized in one piece, as the model's own tokenizer would.
    """
    pieces: list[Piece] = []
    system_text = system or default_system
    if system_text:
        _turn(pieces, "system", system_text)
    for role, text in conversation_turns(messages):
        _turn(pieces, role, text)
    pieces.append(Special(IM_START))
    pieces.append("assistant\n")
    return _merged(pieces)


def conversation_turns(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """``(role, text)`` per turn, roles ``user`` and ``assistant``, tool results folded into user turns."""
    turns: list[tuple[str, str]] = []
    previous_was_result = False
    for message in messages:
        match message:
            case UserMessage(text=text):
                turns.append(("user", text))
                previous_was_result = False
            case AssistantMessage():
                turns.append(("assistant", assistant_text(message)))
                previous_was_result = False
            case ToolResult(text=text):
                if previous_was_result:
                    role, earlier = turns[-1]
                    turns[-1] = (role, f"{earlier}\n\n{text}")
                else:
                    turns.append(("user", text))
                previous_was_result = True
    return turns


def assistant_text(message: AssistantMessage) -> str:
    """The assistant's text with any native tool calls rewritten as fenced blocks."""
    parts = [message.text] if message.text else []
    parts.extend(_call_as_fence(call) for call in message.tool_calls)
    return "\n\n".join(parts)


def _call_as_fence(call: ToolCall) -> str:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    if (
        call.name == "python"
        and isinstance(arguments, dict)
        and isinstance(arguments.get("code"), str)
    ):
        return f"```python\n{arguments['code'].rstrip()}\n```"
    return f"```json\n{json.dumps({'name': call.name, 'arguments': arguments if arguments is not None else call.arguments})}\n```"


def render_template(
    template: str,
    system: str,
    messages: Sequence[Message],
    *,
    bos_token: str,
    eos_token: str,
) -> str:
    """Render a model's own Jinja chat template (for GGUF files outside the catalog).

    The result is one string in which control tokens appear as text; the
    caller tokenizes it with special-token parsing on.
    """
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # a dependency of llama-cpp-python

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    environment.globals["raise_exception"] = raise_exception
    chat: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    chat.extend({"role": role, "content": text} for role, text in conversation_turns(messages))
    return environment.from_string(template).render(
        messages=chat,
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=True,
    )


def _turn(pieces: list[Piece], role: str, text: str) -> None:
    pieces.append(Special(IM_START))
    pieces.append(f"{role}\n{text}")
    pieces.append(Special(IM_END))
    pieces.append("\n")


def _merged(pieces: Sequence[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] = out[-1] + piece
        elif piece != "":
            out.append(piece)
    return out


__all__ = [
    "CHATML_STOPS",
    "IM_END",
    "IM_START",
    "Piece",
    "Special",
    "assistant_text",
    "conversation_turns",
    "render_chatml",
    "render_template",
]

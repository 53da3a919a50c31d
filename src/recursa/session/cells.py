"""From a model reply to the cells it asks for, and from a cell to what the model sees.

Two protocols reach the same loop:

- native tools: each ``python`` tool call carries ``{"code": "..."}``; the
  arguments are checked here and a malformed call becomes a *rejected* cell
  whose output tells the model how to call the tool correctly;
- fenced code (models without native tool calls): the first ```python block
  of a reply is its one cell (```bash blocks run as ``%%bash`` cells), and the
  final answer is the text after ``FINAL ANSWER:``, or a reply with no code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from recursa.models.types import ToolCall, ToolSpec

TOOL_NAME = "python"

PYTHON_TOOL = ToolSpec(
    name=TOOL_NAME,
    description=(
        "Run a cell in your persistent IPython kernel and return its output. "
        "Variables persist between calls; start a cell with %%bash for shell commands; "
        "top-level await works."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The cell's source."}},
        "required": ["code"],
        "additionalProperties": False,
    },
)

_FENCE = re.compile(
    r"```[ \t]*(python3?|py|ipython|bash|sh|shell)?[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)",
    re.DOTALL | re.IGNORECASE,
)
_FINAL = re.compile(r"FINAL[ _]ANSWER\s*[:：]\s*", re.IGNORECASE)
_FINAL_CALL = re.compile(r"^\s*final_answer\((.*)\)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class CellRequest:
    """A cell to run, or a rejection to report (``code`` is None, ``error`` says why)."""

    call_id: str
    code: str | None
    error: str | None = None


def check_tool_call(call: ToolCall) -> CellRequest:
    """Validate a native tool call. The model's mistakes become rejections, never exceptions."""
    if call.name != TOOL_NAME:
        return CellRequest(
            call.id,
            None,
            f'error: there is no tool named {call.name!r}; the only tool is python({{"code": "..."}}).',
        )
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return CellRequest(
            call.id,
            None,
            f"error: the tool arguments were not valid JSON ({exc.msg} at position {exc.pos}); "
            'call python with {"code": "<your cell>"}.',
        )
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return CellRequest(
            call.id,
            None,
            'error: the tool arguments must be an object with a string "code"; nothing was run.',
        )
    code: str = args["code"]
    if not code.strip():
        return CellRequest(call.id, None, "error: the cell was empty; nothing was run.")
    return CellRequest(call.id, code)


@dataclass(frozen=True, slots=True)
class FencedReply:
    """A fenced-protocol reply: the one cell it runs, how many blocks were ignored,
    the final answer when it gave one (only when ``code`` is None), and ``kept``:
    the reply cut after its first block, which is what the model's history keeps
    (small models otherwise copy the guesses they wrote after the code)."""

    code: str | None
    ignored_blocks: int
    answer: str | None
    kept: str
    complete: bool = True
    """False when the code block was never closed (the reply was cut off)."""


def parse_fenced(text: str) -> FencedReply:
    """Find the reply's cell and its final answer.

    A reply with code runs its first block; an answer in the same reply is
    ignored (the model has not seen the output yet). A reply without code is
    an answer: the text after ``FINAL ANSWER:`` when the marker is present,
    else the whole reply.
    """
    matches = [m for m in _FENCE.finditer(text) if m.group(2).strip()]
    if matches:
        first = matches[0]
        body = first.group(2).rstrip()
        if (first.group(1) or "").lower() in ("bash", "sh", "shell") and not body.startswith("%%"):
            body = "%%bash\n" + body
        kept = text[: first.end()].rstrip()
        complete = kept.endswith("```")
        if not complete:
            kept += "\n```"
        return FencedReply(
            code=body, ignored_blocks=len(matches) - 1, answer=None, kept=kept, complete=complete
        )
    return FencedReply(code=None, ignored_blocks=0, answer=final_answer(text), kept=text)


def final_answer(text: str) -> str:
    """The answer in a reply: the text after the last ``FINAL ANSWER:``, else the
    argument of a bare ``final_answer(...)`` line, else the whole reply."""
    marks = list(_FINAL.finditer(text))
    if marks:
        return text[marks[-1].end() :].strip()
    call = _FINAL_CALL.search(text)
    if call:
        return _unquote(call.group(1).strip())
    return text.strip()


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


__all__ = [
    "PYTHON_TOOL",
    "TOOL_NAME",
    "CellRequest",
    "FencedReply",
    "check_tool_call",
    "final_answer",
    "parse_fenced",
]

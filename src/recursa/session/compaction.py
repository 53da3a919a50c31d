"""Compaction as pure decisions: when, where to cut, what to ask, what to keep.

The model's context (L1) is a projection of the event log. When it nears the
model's window, a prefix of it is replaced by a summary written by a model
call; the events themselves stay in the store, where the kernel's ``history``
reads them. This module decides; :mod:`recursa.session.compactor` acts.

- **When**: before every model call, when the context's size passes the
  window minus a reserve (:func:`threshold`). The size is the last call's
  real ``input_tokens + output_tokens`` plus an estimate of what was added
  since (:func:`estimate`), or an estimate of everything when no call has
  been measured since the last compaction.
- **Where**: the context is cut into units (:func:`units`): a turn's inputs,
  or one step (an assistant message, the results of all its tool calls, and
  any message that arrived between its cells). A cut falls between units, so
  a tool call is never separated from its result. It prefers a turn boundary
  that keeps the most recent turns within :func:`keep_budget`; when the
  current turn alone is too long (a long autonomous turn), it cuts between
  steps of that turn and keeps its most recent steps (at least the last).
  The turn's own request then reaches the model verbatim in the summary
  message (:func:`summary_message`), so a compaction never loses the task.
- **What**: a model call with no tools over the dropped prefix rendered as a
  transcript (:func:`summary_prompt`); an earlier summary is part of that
  prefix, so each summary carries the previous ones forward. The reply must
  use the sections of :data:`SUMMARY_SYSTEM` (:func:`parse_summary`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from recursa.control.budget import CHARS_PER_TOKEN_ESTIMATE
from recursa.errors import UsageError
from recursa.models.types import AssistantMessage, Message, UserMessage

EntryKind = Literal["input", "steer", "reply", "result", "summary"]
"""What a context message is: a turn's input, a message that arrived during a
turn (or a nudge), a model reply, a cell's result, or a compaction summary."""

CHARS_PER_TOKEN = CHARS_PER_TOKEN_ESTIMATE
"""Estimates count high (three characters a token), so a window is not overrun."""

MESSAGE_OVERHEAD_TOKENS = 4
"""What a provider adds per message (role, separators), roughly."""

REQUEST_OVERHEAD_TOKENS = 150
"""The tool's schema and the request's framing, roughly."""

MAX_RESERVE_TOKENS = 16_384
"""Room kept free below the window for the reply (and the summary call's)."""

MAX_KEEP_TOKENS = 32_000
"""The most recent context kept verbatim after an automatic compaction."""

MIN_SUMMARY_TOKENS = 256
MAX_SUMMARY_TOKENS = 4_096
UNKNOWN_WINDOW_SUMMARY_TOKENS = 2_048
UNKNOWN_WINDOW_TRANSCRIPT_CHARS = 120_000
"""The transcript a summary call is given when the model's window is unknown."""
MIN_TRANSCRIPT_CHARS = 4_000
SUMMARY_PROMPT_OVERHEAD_TOKENS = 600
"""The summary call's system prompt and framing, roughly."""
MIN_ITEM_CHARS = 300
"""No transcript item is cut shorter than this; older items are dropped instead."""
MAX_PINNED_CHARS = 8_000
"""The most of a turn's request repeated in a summary message."""

MIN_CONTEXT_WINDOW = 2_048
"""The smallest window compaction can work in (``--context-window``)."""


def check_context_window(window: object) -> None:
    """A UsageError unless ``window`` is None or a whole number of tokens
    compaction can work in (at least :data:`MIN_CONTEXT_WINDOW`)."""
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int):
        raise UsageError(f"the context window must be a whole number of tokens, not {window!r}")
    if window < MIN_CONTEXT_WINDOW:
        raise UsageError(
            f"a context window of {window:,} tokens is too small: compaction needs at least "
            f"{MIN_CONTEXT_WINDOW:,}"
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """One message of the context, with the seq of the event it came from (a
    closing result of an interrupted call has the seq of the reply that made it)."""

    seq: int
    kind: EntryKind
    message: Message


@dataclass(frozen=True, slots=True)
class Measure:
    """A provider's count: the first ``count`` entries of the context (the
    request, and the reply to it) were ``tokens`` tokens."""

    count: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Unit:
    """Entries ``start:end`` of the context, cut as one: a turn's inputs
    (``turn_start``) or one step."""

    start: int
    end: int
    turn_start: bool
    chars: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class Cut:
    """Replace entries ``[:index]`` (the summary of an earlier compaction, and
    every entry from an event up to seq ``through``) with a summary."""

    index: int
    through: int


# ---------------------------------------------------------------- sizes


def reserve(window: int) -> int:
    """Tokens kept free below the window: a quarter of it, at most :data:`MAX_RESERVE_TOKENS`."""
    return min(MAX_RESERVE_TOKENS, window // 4)


def threshold(window: int) -> int:
    """Compaction starts when the context passes this many tokens."""
    return window - reserve(window)


def keep_budget(window: int) -> int:
    """Tokens of recent context an automatic compaction keeps verbatim."""
    return min(MAX_KEEP_TOKENS, window // 4)


def summary_tokens(window: int | None) -> int:
    """The summary call's output cap: an eighth of the window, within bounds."""
    if window is None:
        return UNKNOWN_WINDOW_SUMMARY_TOKENS
    return max(MIN_SUMMARY_TOKENS, min(MAX_SUMMARY_TOKENS, window // 8))


def transcript_budget(window: int | None) -> int:
    """Characters of transcript a summary call may be given, so that it fits the window."""
    if window is None:
        return UNKNOWN_WINDOW_TRANSCRIPT_CHARS
    room = window - summary_tokens(window) - SUMMARY_PROMPT_OVERHEAD_TOKENS
    return max(MIN_TRANSCRIPT_CHARS, room * CHARS_PER_TOKEN)


def message_chars(message: Message) -> int:
    if isinstance(message, AssistantMessage):
        return len(message.text) + sum(
            len(call.arguments) + len(call.name) for call in message.tool_calls
        )
    return len(message.text)


def estimate_tokens(system: str, messages: Sequence[Message]) -> int:
    """Tokens of a request estimated from its text alone (high: three characters a token)."""
    chars = len(system) + sum(message_chars(m) for m in messages)
    return (
        chars // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS * len(messages) + REQUEST_OVERHEAD_TOKENS
    )


def estimate(system: str, messages: Sequence[Message], measured: Measure | None) -> int:
    """The context's size in tokens: the provider's count of the last call plus
    an estimate of the messages since, or (nothing measured) an estimate of all."""
    if measured is None or measured.count > len(messages):
        return estimate_tokens(system, messages)
    added = messages[measured.count :]
    return (
        measured.tokens
        + sum(message_chars(m) for m in added) // CHARS_PER_TOKEN
        + MESSAGE_OVERHEAD_TOKENS * len(added)
    )


# ------------------------------------------------------------------ the cut


def units(entries: Sequence[Entry]) -> list[Unit]:
    """The context as units (see the module docstring). A leading summary is no
    unit: it always goes with the prefix a compaction replaces."""
    found: list[Unit] = []
    begin: int | None = None
    turn_start = False

    def close(end: int) -> None:
        assert begin is not None
        chunk = entries[begin:end]
        found.append(
            Unit(
                start=begin,
                end=end,
                turn_start=turn_start,
                chars=sum(message_chars(e.message) for e in chunk),
                last_seq=max(e.seq for e in chunk),
            )
        )

    first = 1 if entries and entries[0].kind == "summary" else 0
    for index in range(first, len(entries)):
        kind = entries[index].kind
        if begin is None or kind == "reply":
            opens = True
        elif kind == "input":  # several queued inputs are one unit
            opens = not (turn_start and entries[index - 1].kind == "input")
        else:  # results and messages between cells belong to their step
            opens = False
        if opens:
            if begin is not None:
                close(index)
            begin, turn_start = index, kind == "input"
    if begin is not None:
        close(len(entries))
    return found


def plan_cut(entries: Sequence[Entry], keep_tokens: int) -> Cut | None:
    """Where to cut the context (see the module docstring), keeping about
    ``keep_tokens`` of the most recent context and at least its last unit.
    None when there is nothing before the last unit to compact."""
    parts = units(entries)
    if len(parts) < 2:
        return None
    suffix = [0] * (len(parts) + 1)
    for k in range(len(parts) - 1, -1, -1):
        suffix[k] = suffix[k + 1] + parts[k].chars // CHARS_PER_TOKEN
    chosen: int | None = None
    # A turn boundary that keeps whole recent turns within the budget.
    for k in range(1, len(parts)):
        if parts[k].turn_start and suffix[k] <= keep_tokens:
            chosen = k
            break
    if chosen is None:
        # The current turn alone is too long: cut between its steps.
        last_turn = max((k for k, p in enumerate(parts) if p.turn_start), default=0)
        chosen = len(parts) - 1
        for k in range(max(1, last_turn), len(parts) - 1):
            if suffix[k] <= keep_tokens:
                chosen = k
                break
    return Cut(index=parts[chosen].start, through=parts[chosen - 1].last_seq)


# --------------------------------------------------------------- the summary

SUMMARY_SYSTEM = """\
You write the working memory of an AI agent whose conversation has grown too long \
for its context window. The agent works in a persistent Python kernel. It will go on \
from your summary and the most recent messages, which it still sees; everything else \
it knows only from you. Write the summary in exactly these sections:

## Task
What was asked, in full: every requirement, constraint and preference still in force. \
Quote the exact wording where it matters.
## Progress
What has been done and found, in order, with the exact values, names, paths and numbers \
that matter.
## State
What exists now: variables and functions defined in the kernel, files created or changed, \
sub-agents started.
## Errors and lessons
What failed and why; what not to try again.
## Next steps
What remains, most urgent first.

Be specific and dense. Leave out what no longer matters, and invent nothing. If the \
transcript begins with an earlier summary, merge it in: keep what still holds. The \
agent can still search the full transcript (`await history.search(text)`), so name \
where detail was left out instead of copying long outputs."""

SECTIONS = ("Task", "Progress", "State", "Errors and lessons", "Next steps")

_LABELS: dict[EntryKind, str] = {
    "input": "user",
    "steer": "message during the work",
    "reply": "assistant",
    "result": "output",
    "summary": "summary of the earlier work",
}


def clip(text: str, cap: int) -> str:
    """``text`` within ``cap`` characters: its head and tail, the middle marked as cut."""
    if len(text) <= cap:
        return text
    half = max(1, (cap - 60) // 2)
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut:,} characters left out ...]\n{text[-half:]}"


def _items(entries: Sequence[Entry]) -> list[str]:
    items: list[str] = []
    for entry in entries:
        message = entry.message
        text = message.text.strip()
        if entry.kind == "summary":  # the summary itself, without the note to the agent
            text = text.split("\n\n", 1)[-1]
        if text or not isinstance(message, AssistantMessage):
            items.append(f"[{_LABELS[entry.kind]}]\n{text}")
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                items.append(f"[assistant runs a cell]\n{_code(call.arguments)}")
    return items


def _code(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
        return str(parsed["code"])
    return arguments


def render_transcript(entries: Sequence[Entry], budget: int) -> str:
    """The entries as a transcript of at most about ``budget`` characters: long
    items are cut in the middle, and if that is not enough the oldest items
    after a leading summary are left out."""
    items = _items(entries)
    cap = max(budget, MIN_ITEM_CHARS)
    shown = items
    while True:
        shown = [clip(item, cap) for item in items]
        if sum(len(s) + 2 for s in shown) <= budget or cap <= MIN_ITEM_CHARS:
            break
        cap = max(MIN_ITEM_CHARS, cap // 2)
    head = shown[:1] if entries and entries[0].kind == "summary" else []
    rest = shown[len(head) :]
    total = sum(len(s) + 2 for s in head + rest)
    left_out = 0
    while left_out < len(rest) and total > budget:  # a running total: linear, not quadratic
        total -= len(rest[left_out]) + 2
        left_out += 1
    rest = rest[left_out:]
    if left_out:
        rest = [f"[... {left_out} earlier items left out ...]", *rest]
    return "\n\n".join(head + rest)


def summary_prompt(entries: Sequence[Entry], budget: int, instructions: str | None) -> str:
    """The user message of the summary call."""
    earlier = " It begins with the summary of earlier work." if entries[0].kind == "summary" else ""
    asked = f"\nThe agent asks you to: {instructions.strip()}\n" if instructions else ""
    return (
        f"Summarize this transcript of the agent's work so far.{earlier}\n{asked}\n"
        f"<transcript>\n{render_transcript(entries, budget)}\n</transcript>\n\n"
        f"Write the summary now, in the sections {', '.join(SECTIONS)}."
    )


def parse_summary(text: str, max_chars: int) -> str | None:
    """The summary from the model's reply: from its first ``##`` section on (what
    comes before is preamble), cut to ``max_chars``; a reply without sections
    is kept whole under ``## Summary``. None when the reply is empty."""
    text = text.strip()
    if "</think>" in text:  # a reasoning model's thoughts are not the summary
        text = text.rsplit("</think>", 1)[1].strip()
    if not text:
        return None
    at = text.find("## ")
    if at > 0 and text[at - 1] == "\n":
        text = text[at:]
    elif at != 0:
        text = f"## Summary\n{text}"
    return clip(text, max_chars)


def summary_message(summary: str, pinned: Sequence[str]) -> str:
    """What the model reads in place of the compacted prefix. ``pinned``: the
    request of the turn in progress, when the cut fell inside that turn."""
    parts = [
        "[context compacted] The conversation up to here was replaced by this summary. "
        "Nothing is lost: `await history.search(text)` finds any earlier message or cell "
        "output (in full), and `await history.turn(n)` reads turn n.",
        summary.strip(),
    ]
    if pinned:
        request = clip("\n\n".join(pinned), MAX_PINNED_CHARS)
        parts.append(f"[the request this turn is working on, as it was given]\n{request}")
    return "\n\n".join(parts)


def summary_entry(seq: int, summary: str, pinned: Sequence[str]) -> Entry:
    return Entry(seq, "summary", UserMessage(summary_message(summary, pinned)))


def compacted(entries: Sequence[Entry], cut_through: int, summary: Entry) -> list[Entry]:
    """The context after a compaction through seq ``cut_through``."""
    return [summary, *(e for e in entries if e.kind != "summary" and e.seq > cut_through)]


__all__ = [
    "CHARS_PER_TOKEN",
    "MAX_KEEP_TOKENS",
    "MAX_RESERVE_TOKENS",
    "MIN_CONTEXT_WINDOW",
    "SECTIONS",
    "SUMMARY_SYSTEM",
    "Cut",
    "Entry",
    "EntryKind",
    "Measure",
    "Unit",
    "check_context_window",
    "clip",
    "compacted",
    "estimate",
    "estimate_tokens",
    "keep_budget",
    "message_chars",
    "parse_summary",
    "plan_cut",
    "render_transcript",
    "reserve",
    "summary_entry",
    "summary_message",
    "summary_prompt",
    "summary_tokens",
    "threshold",
    "transcript_budget",
    "units",
]

"""Trajectories as chat messages with tool calls, for training (``--format chat-jsonl``).

One record per session, one JSON object per line. A session's messages are
built the way the session built its model's context: its stored events go
through the same :class:`~recursa.session.context.Conversation` and the same
OpenAI translation (:func:`recursa.models.openai.translate_messages`) a call
to an OpenAI-compatible model uses, so a cell's output reads exactly as the
model read it (bounded, ``(no output)`` when empty), an input placed in the
kernel as a variable (``context`` in repl mode) is the description the model
was given, a message from a sub-agent carries its ``[message from a
sub-agent ...]`` prefix, and a tool call cut off by an interruption is
answered as not run. Every ``tool_calls[i].id`` has exactly one ``tool``
message answering it, right after the call's assistant message.

What is not exactly as the model saw it, and why:

- **The system prompt** is not stored with the session. The record's first
  message is the base prompt of the session's protocol (tools or fenced
  code) as this version of recursa writes it; the project's instruction
  files (``AGENTS.md``) and the harness's supplemental prompt, which were
  appended to it, are not in the log and are left out.
- **Compactions** (``view="full"``, the default): the messages are the whole
  trajectory, every reply and every result, as if nothing had been
  compacted; each compaction is listed in the record's ``compactions`` with
  its summary and ``at``, the number of messages (system prompt included)
  before the point where it happened. ``view="seen"`` gives instead the
  context as the model last saw it: the compacted prefix replaced by the
  summary message.
- A session in the fenced-code protocol (models without native tool calls,
  such as the embedded ones) saw its code as ```python blocks in its replies
  and each cell's output as a user message; that is what it is exported as
  by default (``protocol: "fenced"``, no ``tools``). With ``as_tools`` it is
  rewritten into the tools protocol, for training a model on tool calls:
  the tools system prompt, each reply's text before its block with the
  block as a ``python`` call (the session's own ``fenced_TURN_STEP`` call
  id), each output as that call's ``tool`` result (without the fenced
  protocol's ``Output:`` framing and answer hint).

Records: ``session``, ``parent``, ``root``, ``name``, ``model``,
``protocol`` (the session's: ``tools`` | ``fenced``), ``messages``,
``tools`` (the ``python`` tool as an OpenAI function, when the messages use it),
``compactions``; for a trial of an evaluation also ``trial``, ``score``,
``status`` and ``item`` (on every session of the trial's tree).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO, cast

from recursa.config import load_config
from recursa.daemon.client import DaemonClient, connect
from recursa.errors import NotFound, UsageError
from recursa.evals.trials import TrialResult, read_results
from recursa.models.openai import translate_messages, translate_tools
from recursa.models.types import Request
from recursa.protocol.events import (
    AssistantReply,
    Compacted,
    EventRecord,
    SessionCreated,
    json_text,
)
from recursa.protocol.person_ops import SUBAGENTS_OF, SessionRef
from recursa.protocol.wire import SessionInfo
from recursa.session.cells import PYTHON_TOOL, parse_fenced
from recursa.session.context import BASE_PROMPT, FENCED_PROMPT, Conversation

View = Literal["full", "seen"]
VIEWS: tuple[View, ...] = ("full", "seen")
Protocol = Literal["tools", "fenced"]

HomeFor = Callable[[Path, TrialResult], Path]
"""Where a trial's session lives: the ``RECURSA_HOME`` of an evaluation directory's trial."""


def protocol_of(records: Iterable[EventRecord]) -> Protocol:
    """``fenced`` when the session's replies were read as fenced code, else ``tools``
    (also for a session that never replied: the protocol cannot be seen then)."""
    for record in records:
        if isinstance(record.event, AssistantReply):
            return "fenced" if record.event.fenced else "tools"
    return "tools"


def as_tool_calls(event: AssistantReply) -> AssistantReply:
    """A fenced reply as the same step in the tools protocol: the text before
    its code block, and the call the session made of the block (its
    ``fenced_TURN_STEP`` id and ``{"code": ...}`` arguments). A reply without
    code (an answer) keeps its text."""
    if not event.fenced:
        return event
    text = parse_fenced(event.text).kept
    if event.tool_calls:
        text = text.split("```", 1)[0].rstrip()
    return dataclasses.replace(event, text=text, fenced=False)


def _conversation(
    records: Sequence[EventRecord], view: View, as_tools: bool = False
) -> tuple[Conversation, list[dict[str, Any]]]:
    """The session's conversation, and its compactions as notes (``view="full"``)."""
    fenced = protocol_of(records) == "fenced" and not as_tools
    conversation = Conversation(fenced=fenced)
    notes: list[dict[str, Any]] = []
    for record in records:
        event = record.event
        if record.seq <= 0:
            continue  # a transient piece: its whole is in a stored event
        if isinstance(event, Compacted) and view == "full":
            notes.append(
                {
                    "at": len(conversation.entries) + 1,  # + 1: the system prompt
                    "seq": record.seq,
                    "through": event.through,
                    "reason": event.reason,
                    "summary": event.summary,
                    "tokens_before": event.tokens_before,
                    "tokens_after": event.tokens_after,
                }
            )
            continue
        if as_tools and isinstance(event, AssistantReply):
            event = as_tool_calls(event)
        conversation.apply(event, record.seq)
    # A session that stopped between a reply and its cells left calls with no
    # result; a chat transcript needs one for each (the session would add it too).
    conversation.close_unanswered()
    return conversation, notes


def session_messages(
    records: Sequence[EventRecord], *, view: View = "full", as_tools: bool = False
) -> list[dict[str, Any]]:
    """One session's stored events as OpenAI chat messages: the system prompt,
    then the conversation (see the module docstring for what ``view`` and
    ``as_tools`` change and what the system prompt holds). Pure: the records
    are all of one session, in seq order."""
    conversation, _notes = _conversation(records, view, as_tools)
    return _messages(conversation)


def _messages(conversation: Conversation) -> list[dict[str, Any]]:
    base = FENCED_PROMPT if conversation.fenced else BASE_PROMPT
    request = Request(model="", system=base, messages=conversation.snapshot())
    return [cast(dict[str, Any], dict(message)) for message in translate_messages(request)]


def session_record(
    info: SessionInfo,
    records: Sequence[EventRecord],
    *,
    root: str,
    view: View = "full",
    as_tools: bool = False,
) -> dict[str, Any]:
    """The chat-jsonl record of one session (see the module docstring)."""
    conversation, notes = _conversation(records, view, as_tools)
    model = info.model
    for stored in records:
        if isinstance(stored.event, SessionCreated):
            model = stored.event.model
            break
    record: dict[str, Any] = {
        "session": info.id,
        "parent": info.parent_id,
        "root": root,
        "name": info.name,
        "model": model,
        "protocol": protocol_of(records),
        "messages": _messages(conversation),
    }
    if not conversation.fenced:
        record["tools"] = [dict(tool) for tool in translate_tools((PYTHON_TOOL,))]
    record["compactions"] = notes
    return record


async def session_tree(client: DaemonClient, ref: str) -> list[SessionInfo]:
    """The session ``ref`` and every sub-agent under it, depth first, each
    session's children oldest first."""
    root = await client.session(ref)
    tree: list[SessionInfo] = []
    pending = [root]
    while pending:
        info = pending.pop()
        tree.append(info)
        children = await client.call(SUBAGENTS_OF, SessionRef(info.id))
        pending.extend(reversed(children))
    return tree


async def export(
    client: DaemonClient, ref: str, *, view: View = "full", as_tools: bool = False
) -> list[dict[str, Any]]:
    """The records of session ``ref`` and of its sub-agents (:func:`session_tree`
    order), read from the daemon's stored events (not followed: a session still
    running is exported as it stands)."""
    if view not in VIEWS:
        raise UsageError(f"unknown view {view!r} (known: {', '.join(VIEWS)})")
    tree = await session_tree(client, ref)
    exported = []
    for info in tree:
        records = [record async for record in client.events(info.id)]
        record = session_record(info, records, root=tree[0].id, view=view, as_tools=as_tools)
        exported.append(record)
    return exported


def write_records(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    """Write one JSON object per line; how many were written. The text is
    UTF-8 safe (:func:`~recursa.protocol.events.json_text`)."""
    count = 0
    for record in records:
        out.write(json_text(record) + "\n")
        count += 1
    return count


async def write_chat_jsonl(
    client: DaemonClient,
    refs: Sequence[str],
    out: TextIO,
    *,
    view: View = "full",
    as_tools: bool = False,
) -> int:
    """``recursa export SESSION... --format chat-jsonl``: every session tree of
    ``refs`` written to ``out``; the number of records (sessions) written."""
    count = 0
    for ref in refs:
        count += write_records(await export(client, ref, view=view, as_tools=as_tools), out)
    return count


def _trial_fields(result: TrialResult) -> dict[str, Any]:
    return {
        "trial": result.trial,
        "item": result.item,
        "score": result.score,
        "status": result.status,
    }


async def export_eval_dir(
    directory: Path, *, home_for: HomeFor, view: View = "full", as_tools: bool = False
) -> list[dict[str, Any]]:
    """The records of every trial in ``directory/results.jsonl``: each trial's
    session tree, read from the home ``home_for(directory, result)`` through
    an in-process daemon (which opens the home without resuming any of its
    sessions), with the trial's fields added to each record. A trial without
    a session (it failed before one was made) has no record."""
    results = [r for r in read_results(directory) if r.session]
    by_home: dict[Path, list[TrialResult]] = {}
    for result in results:
        by_home.setdefault(home_for(directory, result), []).append(result)
    exported: list[dict[str, Any]] = []
    for home, trials in by_home.items():
        if not home.is_dir():
            raise UsageError(f"{home}: no such evaluation home (for {trials[0].trial})")
        config = load_config(overrides={"RECURSA_HOME": str(home)})
        async with connect(config, in_process=True) as client:
            for result in trials:
                try:
                    records = await export(client, result.session, view=view, as_tools=as_tools)
                except NotFound:
                    raise UsageError(
                        f"{home}: no session {result.session} (for {result.trial})"
                    ) from None
                exported.extend({**record, **_trial_fields(result)} for record in records)
    return exported


async def write_eval_chat_jsonl(
    directory: Path,
    out: TextIO,
    *,
    home_for: HomeFor,
    view: View = "full",
    as_tools: bool = False,
) -> int:
    """``recursa export EVAL_DIR --format chat-jsonl``: :func:`export_eval_dir`
    written to ``out``; the number of records written."""
    exported = await export_eval_dir(directory, home_for=home_for, view=view, as_tools=as_tools)
    return write_records(exported, out)


__all__ = [
    "VIEWS",
    "HomeFor",
    "Protocol",
    "View",
    "as_tool_calls",
    "export",
    "export_eval_dir",
    "protocol_of",
    "session_messages",
    "session_record",
    "session_tree",
    "write_chat_jsonl",
    "write_eval_chat_jsonl",
    "write_records",
]

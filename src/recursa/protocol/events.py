"""The session event grammar: a closed, versioned set of frozen values.

Every event is a frozen dataclass with a ``type`` literal. The store keeps the
persistent ones in order (each gets a ``seq`` there); the model's context is a
projection of them (:mod:`recursa.session.context`); the CLI and the daemon
wire carry them as JSON with :data:`PROTOCOL_VERSION`.

The grammar of one turn::

    input_placed* user_input+       what the turn answers (user, parent, schedule, ...);
                                    long inputs placed in the kernel come first
    turn_started
    ( assistant_reply model_usage   one model call (model_retry* before it)
      ( cell_started cell_finished )*   the reply's code, in order
      user_input*                   steering messages that arrived between cells
    )+
    turn_ended                      why it ended, and the answer if there is one

``notice``, ``kernel_status`` and ``status_changed`` may appear anywhere. In
autonomous mode a turn's end is followed by ``gate_checked*`` and, when the
run is over, ``autonomous_ended``. ``compacted`` (after the ``model_usage``
of its summary call) may come before any model call of a turn, or while a
cell runs (``compact.run()``); the model's context is rebuilt from the log
alone, compactions included.
``text_delta`` and ``cell_output`` are transient: streamed to watchers, never
stored; the complete text is in ``assistant_reply`` and ``cell_finished``.

Adding a field with a default is compatible. Removing or renaming one, or
changing a meaning, bumps :data:`PROTOCOL_VERSION`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import field
from typing import Any, Literal, get_args

from recursa.errors import FailureKind
from recursa.models.types import ToolCall
from recursa.protocol.common import PROTOCOL_VERSION, SessionStatus, json_text
from recursa.protocol.plain import field_names
from recursa.values import frozen

InputSource = Literal["user", "system", "parent", "child", "sibling", "schedule", "goal", "gate"]
CellStatus = Literal["ok", "error", "timeout", "interrupted", "kernel_died", "rejected"]
TurnEndReason = Literal[
    "answered",
    "max_steps",
    "max_tokens",
    "max_time",
    "provider_error",
    "empty_reply",
    "stuck",
    "budget",
    "interrupted",
    "internal_error",
]
KernelState = Literal[
    "starting", "ready", "restarted", "died", "stopped", "reattached", "snapshotted", "restored"
]
NoticeLevel = Literal["info", "warning", "error"]
GateStatus = Literal["passed", "failed", "timeout", "error", "skipped"]
"""A gate's check: ``skipped`` means not run again, the workspace unchanged since it failed."""
AutonomousOutcome = Literal["passed", "max_turns", "max_tokens", "max_cost", "max_time", "error"]
"""Why an autonomous run ended: every gate passed, a limit was reached, or a turn failed."""


@frozen(kw_only=True)
class SessionCreated:
    model: str
    cwd: str
    name: str | None = None
    parent_id: str | None = None
    type: Literal["session_created"] = "session_created"


@frozen(kw_only=True)
class UserInput:
    """Input for the model. ``mode`` says how it was delivered: ``turn`` started
    a turn; ``steer`` was placed between cells of a running turn."""

    text: str
    source: InputSource = "user"
    sender: str | None = None
    mode: Literal["turn", "steer"] = "turn"
    type: Literal["user_input"] = "user_input"


InputOrigin = Literal["oversize", "file"]
"""``oversize``: an input too long for the model's window; ``file``: a file
given on purpose (``recursa run --context-file``)."""


@frozen(kw_only=True)
class InputPlaced:
    """An input was put in the kernel as the variable ``name`` (a str) instead
    of in the model's context; the ``user_input`` after it describes it to the
    model. ``label`` names a file (empty for an oversize input); ``chars`` and
    ``lines`` are the text's size. The text itself is kept once: an oversize
    input in its inbox message, a file's in the session's directory."""

    name: str
    origin: InputOrigin
    chars: int
    lines: int
    label: str = ""
    type: Literal["input_placed"] = "input_placed"


@frozen(kw_only=True)
class TurnStarted:
    turn: int
    type: Literal["turn_started"] = "turn_started"


@frozen(kw_only=True)
class AssistantReply:
    """One complete model reply. In the fenced-code protocol ``tool_calls`` holds
    the code block found in ``text`` (with a generated id). ``cut_off``: the
    reply stopped at the output limit and was not used; the store keeps it, the
    model's context leaves it out (rows written before the field read False)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    step: int = 0
    fenced: bool = False
    cut_off: bool = False
    type: Literal["assistant_reply"] = "assistant_reply"


@frozen(kw_only=True)
class ModelUsage:
    """Usage of one model call. ``cost`` is USD, None when the price is unknown.
    ``estimated``: the provider reported no usage; the counts are estimates.
    ``step`` is the turn's step (1, 2, ...) for a call that sees the session's
    context; 0 for a call outside it (a compaction summary, a refinement).
    ``kind`` is ``llm`` for a call the session's kernel made with ``llm()``
    (step 0), ``call`` for every other."""

    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False
    cost: float | None = None
    latency: float = 0.0
    step: int = 0
    kind: Literal["call", "llm"] = "call"
    type: Literal["model_usage"] = "model_usage"


@frozen(kw_only=True)
class ModelRetry:
    kind: FailureKind
    message: str
    attempt: int
    delay: float
    type: Literal["model_retry"] = "model_retry"


@frozen(kw_only=True)
class CellStarted:
    cell: int
    call_id: str
    code: str
    type: Literal["cell_started"] = "cell_started"


@frozen(kw_only=True)
class CellFinished:
    """A cell's outcome. ``output`` is what the model was shown (bounded);
    ``chars`` is the full output's length; the full text is in the store and,
    when ``truncated``, in the kernel as ``_out[cell]``."""

    cell: int
    call_id: str
    status: CellStatus
    output: str
    chars: int
    truncated: bool = False
    duration: float = 0.0
    type: Literal["cell_finished"] = "cell_finished"


@frozen(kw_only=True)
class KernelStatus:
    state: KernelState
    detail: str = ""
    type: Literal["kernel_status"] = "kernel_status"


@frozen(kw_only=True)
class Notice:
    text: str
    level: NoticeLevel = "info"
    type: Literal["notice"] = "notice"


@frozen(kw_only=True)
class TurnEnded:
    turn: int
    reason: TurnEndReason
    answer: str | None = None
    detail: str = ""
    type: Literal["turn_ended"] = "turn_ended"


CompactReason = Literal["auto", "agent"]
"""``auto``: the context neared the model's window; ``agent``: ``compact.run()``."""


@frozen(kw_only=True)
class Compacted:
    """The model's context was compacted: the messages of every event up to
    ``through`` (a seq), and the summary of any earlier compaction, are replaced
    by ``summary``. The events stay in the log (the kernel's ``history`` reads
    them). ``tokens_before`` and ``tokens_after`` are the context's size around it."""

    summary: str
    through: int
    tokens_before: int
    tokens_after: int
    reason: CompactReason = "auto"
    instructions: str | None = None
    type: Literal["compacted"] = "compacted"


@frozen
class ReadMessage:
    """One message as ``agent_message.inbox()`` took it."""

    id: int
    sender: str | None
    source: InputSource
    text: str


@frozen(kw_only=True)
class InboxRead:
    """Messages a cell took with ``agent_message.inbox()``: they reach the model
    as that cell's output, so they are not also put in its context."""

    messages: tuple[ReadMessage, ...]
    type: Literal["inbox_read"] = "inbox_read"


@frozen(kw_only=True)
class StatusChanged:
    status: SessionStatus
    type: Literal["status_changed"] = "status_changed"


@frozen(kw_only=True)
class GateChecked:
    """An autonomous run's end-condition gate, checked after turn ``turn``.
    ``output`` is what the model is shown (head and tail, bounded); ``chars``
    the full output's size. ``skipped``: the workspace had not changed since
    the gate failed, so it was not run again."""

    gate: str
    status: GateStatus
    turn: int = 0
    exit_code: int | None = None
    output: str = ""
    chars: int = 0
    truncated: bool = False
    duration: float = 0.0
    type: Literal["gate_checked"] = "gate_checked"


@frozen(kw_only=True)
class AutonomousEnded:
    """An autonomous run is over: ``detail`` says exactly why, in one line
    (``autonomous: gates passed (2/2)``). Only ``passed`` is success."""

    outcome: AutonomousOutcome
    detail: str
    turns: int = 0
    type: Literal["autonomous_ended"] = "autonomous_ended"


@frozen(kw_only=True)
class CellOutput:
    """Transient: output of a running cell as it arrives. Never stored."""

    cell: int
    stream: Literal["stdout", "stderr", "result", "display", "error"]
    text: str
    type: Literal["cell_output"] = "cell_output"


@frozen(kw_only=True)
class TextDelta:
    """Transient: a piece of the reply being streamed. Never stored."""

    text: str
    step: int = 0
    type: Literal["text_delta"] = "text_delta"


Event = (
    SessionCreated
    | UserInput
    | InputPlaced
    | TurnStarted
    | AssistantReply
    | ModelUsage
    | ModelRetry
    | CellStarted
    | CellFinished
    | KernelStatus
    | Notice
    | TurnEnded
    | Compacted
    | InboxRead
    | StatusChanged
    | GateChecked
    | AutonomousEnded
    | TextDelta
    | CellOutput
)

EVENT_TYPES: dict[str, type[Any]] = {
    cls.__dataclass_fields__["type"].default: cls for cls in get_args(Event)
}
TRANSIENT_TYPES: frozenset[str] = frozenset({"text_delta", "cell_output"})


@frozen
class EventRecord:
    """A stored event: its global order ``seq``, its session and its time (unix seconds).
    Transient events travel in records too, with ``seq == 0``."""

    seq: int
    session_id: str
    ts: float
    event: Event = field(compare=False)


def is_transient(event: Event) -> bool:
    return event.type in TRANSIENT_TYPES


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready dict; ``type`` first. The same dict as ``dataclasses.asdict``
    gives (with ``type`` moved first), without its deep copy of every leaf:
    this runs for every event stored or streamed."""
    data: dict[str, Any] = {"type": event.type}
    for name in field_names(type(event)):
        if name != "type":
            data[name] = _plain(getattr(event, name))
    return data


def _plain(value: Any) -> Any:
    """``value`` as ``dataclasses.asdict`` leaves it: a dataclass as a dict of its
    fields, a tuple or list of them as one of dicts; strings, numbers and None
    as they are (immutable, so not copied)."""
    if value is None or isinstance(value, str | int | float):
        return value
    if type(value) is tuple or type(value) is list:
        return type(value)(_plain(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in field_names(type(value))}
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    return copy.deepcopy(value)


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event; unknown fields (from a newer writer) are ignored.

    Raises ``ValueError`` for an unknown type or missing required fields.
    """
    kind = data.get("type")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {kind!r}")
    names = field_names(cls)
    kwargs = {k: v for k, v in data.items() if k in names}
    if "tool_calls" in kwargs:
        kwargs["tool_calls"] = tuple(ToolCall(**call) for call in kwargs["tool_calls"])
    if kind == "inbox_read" and "messages" in kwargs:
        kwargs["messages"] = tuple(ReadMessage(**m) for m in kwargs["messages"])
    try:
        event: Event = cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad {kind} event: {exc}") from exc
    return event


def event_to_json(event: Event) -> str:
    return json_text(event_to_dict(event))


def event_from_json(text: str) -> Event:
    return event_from_dict(json.loads(text))


def record_to_dict(record: EventRecord) -> dict[str, Any]:
    """The wire and ``--json`` form: the event's fields plus ``seq``, ``session_id`` and ``ts``."""
    return {
        "seq": record.seq,
        "session_id": record.session_id,
        "ts": record.ts,
        **event_to_dict(record.event),
    }


def record_from_dict(data: dict[str, Any]) -> EventRecord:
    """The record of :func:`record_to_dict`'s form (``data`` is consumed).
    Raises ``ValueError``, ``KeyError`` or ``TypeError`` for a malformed one."""
    seq, session_id, ts = data.pop("seq"), data.pop("session_id"), data.pop("ts")
    if type(seq) is not int or not isinstance(session_id, str):
        raise ValueError("bad record header")
    return EventRecord(seq=seq, session_id=session_id, ts=float(ts), event=event_from_dict(data))


__all__ = [
    "EVENT_TYPES",
    "PROTOCOL_VERSION",
    "AssistantReply",
    "AutonomousEnded",
    "AutonomousOutcome",
    "CellFinished",
    "CellOutput",
    "CellStarted",
    "CellStatus",
    "CompactReason",
    "Compacted",
    "Event",
    "EventRecord",
    "GateChecked",
    "GateStatus",
    "InboxRead",
    "InputOrigin",
    "InputPlaced",
    "InputSource",
    "KernelState",
    "KernelStatus",
    "ModelRetry",
    "ModelUsage",
    "Notice",
    "NoticeLevel",
    "ReadMessage",
    "SessionCreated",
    "SessionStatus",
    "StatusChanged",
    "TextDelta",
    "TurnEndReason",
    "TurnEnded",
    "TurnStarted",
    "UserInput",
    "event_from_dict",
    "event_from_json",
    "event_to_dict",
    "event_to_json",
    "is_transient",
    "json_text",
    "record_from_dict",
    "record_to_dict",
]

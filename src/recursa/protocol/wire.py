"""The daemon's wire: requests, replies and errors as pure values.

Clients speak HTTP/1.1 over the daemon's unix socket. Every request carries
``Authorization: Bearer <token>``. Mutating requests also carry
``Recursa-Client`` (a client id, stable for one CLI process) and
``Recursa-Command`` (unique per command): a repeated command gets the stored
result; one whose outcome was lost in a crash is answered as ``uncertain``
and never run again.

Bodies are JSON objects; this module turns them into frozen dataclasses and
back. Event streams are newline-delimited JSON, one
:func:`~recursa.protocol.events.record_to_dict` per line, so a client can
resume from the last ``seq`` it saw. Errors are ``{"error": {"kind",
"message"}}`` with an HTTP status; ``kind`` maps to the error tree.

An event stream also carries control lines, told apart from events by a
``type`` no event has (:data:`StreamControl`): ``{"type": "heartbeat"}``
after :data:`HEARTBEAT_SECONDS` of silence, so a client can tell a quiet
session from a dead daemon; ``{"type": "error", "error": {...}}`` when the
stream fails after it began (the stream then ends); ``{"type": "shutdown"}``
when the daemon is stopping (the stream then ends, and reconnecting is
pointless).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from recursa.protocol.events import PROTOCOL_VERSION, SessionStatus
from recursa.protocol.harness import Action, Actor, EntryVersion, Kind, Scope, Status

SendMode = Literal["auto", "steer", "follow_up"]
ReceiptStatus = Literal["delivered", "queued"]
ErrorKind = Literal[
    "auth",  # no or wrong token
    "not_found",  # no such session
    "invalid",  # a malformed request
    "unavailable",  # a model cannot be used (missing key, weights, extra)
    "conflict",  # e.g. a session name already taken
    "uncertain",  # a command whose outcome was lost in a crash
    "internal",  # a bug
]

StreamControl = Literal["heartbeat", "error", "shutdown"]
EditOp = Literal["create", "update", "delete", "rollback"]
"""What a kernel may ask of the harness (:class:`~recursa.protocol.harness.Edit`)."""

HEADER_CLIENT = "Recursa-Client"
HEADER_COMMAND = "Recursa-Command"
API_PREFIX = "/v1"
HEARTBEAT_SECONDS = 15.0
"""Longest silence on a followed event stream before the daemon sends a heartbeat."""

ERROR_STATUS: dict[ErrorKind, int] = {
    "auth": 401,
    "not_found": 404,
    "invalid": 400,
    "unavailable": 422,
    "conflict": 409,
    "uncertain": 409,
    "internal": 500,
}


@dataclass(frozen=True, slots=True)
class Usage:
    """Token and cost totals; ``cost`` counts only priced calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    unknown_cost_calls: int = 0


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session as ``recursa agents`` shows it."""

    id: str
    name: str | None
    parent_id: str | None
    status: SessionStatus
    model: str
    cwd: str
    created_at: float
    last_activity: float
    usage: Usage = field(default_factory=Usage)
    last_answer: str | None = None


@dataclass(frozen=True, slots=True)
class Autonomous:
    """``recursa run --autonomous``: turns go on until every gate (a shell
    command, run in the session's directory after each turn) exits 0, or a
    limit is reached. The limits cover the whole run (None: no limit);
    ``gate_timeout`` is seconds per gate (None: the default)."""

    gates: tuple[str, ...]
    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_time: float | None = None
    gate_timeout: float | None = None


@dataclass(frozen=True, slots=True)
class CreateSession:
    """``recursa run``: a new root session, with its first task queued.
    ``autonomous``: the task runs in autonomous mode."""

    task: str | None
    model: str | None = None
    cwd: str | None = None
    name: str | None = None
    max_steps: int | None = None
    max_tokens: int | None = None
    max_time: float | None = None
    cell_timeout: float | None = None
    autonomous: Autonomous | None = None
    context_window: int | None = None
    """Tokens: overrides the model's window for compaction (``--context-window``)."""


@dataclass(frozen=True, slots=True)
class SendMessage:
    text: str
    mode: SendMode = "auto"


@dataclass(frozen=True, slots=True)
class Receipt:
    """A message is stored durably before its receipt is returned."""

    message_id: int
    session_id: str
    status: ReceiptStatus


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    pid: int
    version: str
    protocol: int
    started_at: float
    sessions: int
    loaded: int
    running: int
    recovering: bool
    recovery_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Shutdown:
    force: bool = False


# --- the kernel-side API (/v1/kernel/...): the caller is the token's session ----

MessageTarget = str
"""``parent``, ``child:NAME``, ``sibling:NAME`` or ``all``."""


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits for a session's whole subtree; None: no limit on that measure.
    ``time`` is wall-clock seconds from the session's creation."""

    tokens: int | None = None
    cost: float | None = None
    steps: int | None = None
    time: float | None = None


@dataclass(frozen=True, slots=True)
class Spawn:
    """``rlm(task, name=..., model=..., spec=..., budget=...)``."""

    task: str
    name: str | None = None
    model: str | None = None
    spec: str | None = None
    budget: Budget | None = None


@dataclass(frozen=True, slots=True)
class Handle:
    """A sub-agent as its parent sees it. ``done``: its work has ended (it is idle
    or inactive with nothing queued, or deleted); ``answer`` its last final
    answer; ``reason`` why its last turn ended."""

    id: str
    name: str | None
    parent_id: str | None
    workspace: str
    model: str
    status: SessionStatus
    depth: int
    done: bool = False
    answer: str | None = None
    reason: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class AgentMessage:
    """``agent_message.send(text, to=..., mode=...)``."""

    text: str
    to: MessageTarget = "parent"
    mode: SendMode = "auto"


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """A message taken by ``agent_message.inbox()``."""

    id: int
    sender: str | None
    sender_name: str | None
    source: str
    text: str
    mode: SendMode
    at: float


@dataclass(frozen=True, slots=True)
class UsageNode:
    """``recursa usage``: a session's own usage and its subtree's, with its children."""

    id: str
    name: str | None
    own: Usage
    total: Usage
    children: tuple[UsageNode, ...] = ()


@dataclass(frozen=True, slots=True)
class CommandKey:
    """Identifies a mutating command for idempotency: the client's id (stable for
    one CLI process) and the command's (unique per command)."""

    client_id: str
    command_id: str


# --- the Continual Harness: entries for clients and kernels ---------------------


@dataclass(frozen=True, slots=True)
class HarnessEntry:
    """One version of a harness entry (:class:`~recursa.protocol.harness.EntryVersion`)
    as clients and kernels see it; ``id`` is the entry's id."""

    id: str
    version: int
    kind: Kind
    title: str
    scope: Scope
    status: Status
    content: str
    code: str | None
    meta: dict[str, Any]
    reason: str
    effect: str
    review: dict[str, Any] | None
    created_at: float
    session_id: str | None
    action: Action
    actor: Actor
    source_events: tuple[int, ...] = ()
    refinement_id: int | None = None

    @classmethod
    def of(cls, version: EntryVersion) -> HarnessEntry:
        return cls(
            id=version.entry_id,
            version=version.version,
            kind=version.kind,
            title=version.title,
            scope=version.scope,
            status=version.status,
            content=version.content,
            code=version.code,
            meta=dict(version.meta),
            reason=version.reason,
            effect=version.effect,
            review=dict(version.review) if version.review is not None else None,
            created_at=version.created_at,
            session_id=version.session_id,
            action=version.action,
            actor=version.actor,
            source_events=tuple(version.source_events),
            refinement_id=version.refinement_id,
        )


@dataclass(frozen=True, slots=True)
class HarnessDetail:
    """``recursa harness show``: the newest version, every version oldest first,
    and the number of the version in force (None: none is, e.g. still proposed)."""

    entry: HarnessEntry
    history: tuple[HarnessEntry, ...]
    effective: int | None


@dataclass(frozen=True, slots=True)
class HarnessPrompt:
    """``recursa harness show --prompt``: exactly the supplement the session's
    next model call gets after the base system prompt, and its size."""

    session: str
    text: str
    tokens: int
    chars: int
    included: tuple[str, ...]
    left_out: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HarnessEdit:
    """``harness.create/update/delete/rollback(...)`` from a kernel: staged for the
    caller's next turn boundary. ``entry`` (an id, id prefix or title) names the
    entry for every op but ``create``. The actor is always the model."""

    op: EditOp
    entry: str | None = None
    kind: Kind | None = None
    title: str | None = None
    content: str | None = None
    code: str | None = None
    scope: Scope | None = None
    meta: dict[str, Any] | None = None
    to_version: int | None = None
    reason: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class HarnessReceipt:
    """A staged edit: the entry it is about (a create's new id), and when it applies."""

    entry_id: str
    op: EditOp
    staged: int
    applies: str


@dataclass(frozen=True, slots=True)
class HarnessDecision:
    """``recursa harness approve|reject ID --reason TEXT``."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class HarnessRevert:
    """``recursa harness revert ID --to V``: ``to`` 0 is before the entry existed."""

    to: int


@dataclass(frozen=True, slots=True)
class RefineRequest:
    """``recursa refine`` and ``refine.run()``: extra instructions for the refinement."""

    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class RefineReply:
    """A refinement's outcome: the entries it staged edits for, and what it skipped."""

    refinement_id: int
    staged: tuple[str, ...]
    problems: tuple[str, ...]


HARNESS_OPS: tuple[EditOp, ...] = get_args(EditOp)


@dataclass(frozen=True, slots=True)
class WireError:
    kind: ErrorKind
    message: str


T = TypeVar("T")


def to_json(value: object) -> dict[str, Any]:
    """A wire value as a JSON-ready dict."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"not a wire value: {value!r}")
    return dataclasses.asdict(value)


def from_json(cls: type[T], data: object) -> T:
    """Build ``cls`` from a JSON object; unknown keys are ignored (a newer peer),
    missing or mistyped ones raise ``ValueError`` with one line."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a JSON object")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    tuples = {f.name for f in fields if str(f.type).startswith("tuple[")}
    kwargs: dict[str, Any] = {}
    for name in names:
        if name not in data:
            continue
        value = data[name]
        nested = _NESTED.get(name)
        if nested is not None and isinstance(value, dict):
            value = from_json(nested, value)
        elif isinstance(value, list) and name in _NESTED_TUPLES:
            value = tuple(from_json(_NESTED_TUPLES[name], item) for item in value)
        elif isinstance(value, list) and name in tuples:
            value = tuple(value)
        kwargs[name] = value
    try:
        built = cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{cls.__name__}: {exc}") from exc
    _check_literals(built)
    return built


_NESTED: dict[str, type[Any]] = {
    "usage": Usage,
    "own": Usage,
    "total": Usage,
    "budget": Budget,
    "entry": HarnessEntry,
    "autonomous": Autonomous,
}
_NESTED_TUPLES: dict[str, type[Any]] = {"children": UsageNode, "history": HarnessEntry}
"""Fields holding a list of wire values (a JSON array becomes a tuple)."""


def _check_literals(value: object) -> None:
    if isinstance(value, HarnessEdit) and value.op not in HARNESS_OPS:
        raise ValueError(f"op must be one of {', '.join(HARNESS_OPS)}, not {value.op!r}")
    if isinstance(value, SendMessage | AgentMessage) and value.mode not in get_args(SendMode):
        raise ValueError(f"mode must be one of {', '.join(get_args(SendMode))}, not {value.mode!r}")
    if isinstance(value, SendMessage | CreateSession):
        text = value.text if isinstance(value, SendMessage) else value.task
        if text is not None and not isinstance(text, str):
            raise ValueError("the text must be a string")


def error_body(kind: ErrorKind, message: str) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message}}


__all__ = [
    "API_PREFIX",
    "ERROR_STATUS",
    "HARNESS_OPS",
    "HEADER_CLIENT",
    "HEADER_COMMAND",
    "HEARTBEAT_SECONDS",
    "PROTOCOL_VERSION",
    "AgentMessage",
    "Autonomous",
    "Budget",
    "CommandKey",
    "CreateSession",
    "DaemonStatus",
    "EditOp",
    "ErrorKind",
    "Handle",
    "HarnessDecision",
    "HarnessDetail",
    "HarnessEdit",
    "HarnessEntry",
    "HarnessPrompt",
    "HarnessReceipt",
    "HarnessRevert",
    "InboxMessage",
    "MessageTarget",
    "Receipt",
    "ReceiptStatus",
    "RefineReply",
    "RefineRequest",
    "SendMessage",
    "SendMode",
    "SessionInfo",
    "Shutdown",
    "Spawn",
    "StreamControl",
    "Usage",
    "UsageNode",
    "WireError",
    "error_body",
    "from_json",
    "to_json",
]

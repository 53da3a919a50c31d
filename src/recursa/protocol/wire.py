"""The daemon's wire: requests, replies and errors as pure values.

Clients speak HTTP/1.1 over the daemon's unix socket. Every request carries
``Authorization: Bearer <token>``. Mutating requests also carry
``Recursa-Client`` (a client id, stable for one CLI process) and
``Recursa-Command`` (unique per command): a repeated command gets the stored
result; one whose outcome was lost in a crash is answered as ``uncertain``
and never run again.

Bodies are JSON objects. A request is turned into its frozen dataclass and
validated by type (:func:`from_json`, with pydantic; the field types and
their bounds are in :mod:`recursa.protocol.fields`); a value goes to JSON
with :func:`to_json`, and a reply, the daemon's own, comes back with
:func:`~recursa.protocol.plain.from_plain`. Event streams are newline-delimited JSON, one
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
from dataclasses import field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, get_args

from recursa.protocol.common import API_PREFIX, PROTOCOL_VERSION, SessionStatus
from recursa.protocol.fields import (
    MAX_ITEMS,
    Cost,
    Count,
    FilledName,
    FilledText,
    Instructions,
    Name,
    PathText,
    Positive,
    PositiveCost,
    PositiveSeconds,
    Seconds,
    SessionName,
    Text,
    Version,
)
from recursa.protocol.harness import Action, Actor, EntryVersion, Kind, Scope, Status
from recursa.protocol.plain import to_plain
from recursa.validation import after, field_options, length, one_line
from recursa.values import frozen

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationInfo

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
KERNEL_COMM_ID = "recursa.api"
"""The comm id of the kernel API over a kernel's own Jupyter channels: a kernel's
requests are ``comm_msg`` on iopub with it, the daemon's replies ``comm_msg`` on
control with it (:mod:`recursa.api.channel`, :mod:`recursa.kernel.relay`). Fixed,
with no ``comm_open``: identity comes from the connection the message arrived
on, never from anything in it."""
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


@frozen
class Usage:
    """Token and cost totals; ``cost`` counts only priced calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    unknown_cost_calls: int = 0


@frozen
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
    depth: int = 0
    """0 for a root; a sub-agent's is its parent's plus one."""
    pending: int = 0
    """Messages in its inbox not yet read by the session."""
    cell_started_at: float | None = None
    """When the cell it runs now started (unix seconds); None when no cell runs."""


@frozen
class Autonomous:
    """``recursa run --autonomous``: turns go on until every gate (a shell
    command, run in the session's directory after each turn) exits 0, or a
    limit is reached. The limits cover the whole run (None: no limit);
    ``gate_timeout`` is seconds per gate (None: the default)."""

    gates: Annotated[tuple[Text, ...], length(most=MAX_ITEMS)]
    max_turns: Count | None = None
    max_tokens: Count | None = None
    max_cost: Cost | None = None
    max_time: Seconds | None = None
    gate_timeout: Seconds | None = None


KernelBackend = Literal["local", "gateway"]
"""Where a session's kernels run: processes of the daemon's host, or a Jupyter gateway's."""


@frozen
class ContextFile:
    """A text given with a task (``recursa run --context-file``): the session
    puts it in its kernel as a variable (``context``, or numbered) before the
    model's first call, and the model's message describes it. ``label``
    names it for the model (the file's name)."""

    label: Name
    text: Text


ContextFiles = Annotated[tuple[ContextFile, ...], length(most=MAX_ITEMS)]


@frozen
class CreateSession:
    """``recursa run``: a new root session, with its first task queued.
    ``autonomous``: the task runs in autonomous mode."""

    task: Text | None
    model: Name | None = None
    cwd: PathText | None = None
    name: SessionName | None = None
    max_steps: Count | None = None
    max_tokens: Count | None = None
    max_time: Seconds | None = None
    cell_timeout: Seconds | None = None
    autonomous: Autonomous | None = None
    context_window: Count | None = None
    """Tokens: overrides the model's window for compaction (``--context-window``)."""
    context_files: ContextFiles = ()
    """Put in the kernel with the task (which they need)."""
    kernel_backend: KernelBackend | None = None
    """Where the session's kernels run (``--kernel-backend``); None: ``[kernel] backend``."""


@frozen
class SendMessage:
    text: Text
    mode: SendMode = "auto"
    context_files: ContextFiles = ()


@frozen
class Receipt:
    """A message is stored durably before its receipt is returned."""

    message_id: int
    session_id: str
    status: ReceiptStatus


@frozen
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
    last_seq: int = 0
    """The newest stored event's seq: "now" for a watcher about to follow the feed."""


@frozen
class Shutdown:
    force: bool = False


# --- the kernel-side API (/v1/kernel/...): the caller is the token's session ----

MessageTarget = str
"""``parent``, ``child:NAME``, ``sibling:NAME`` or ``all``."""


@frozen
class Budget:
    """Limits for a session's whole subtree; None: no limit on that measure.
    ``time`` is wall-clock seconds from the session's creation."""

    tokens: Positive | None = None
    cost: PositiveCost | None = None
    steps: Positive | None = None
    time: PositiveSeconds | None = None


@frozen
class Spawn:
    """``rlm(task, name=..., model=..., spec=..., budget=...)``."""

    task: FilledText
    name: SessionName | None = None
    model: FilledName | None = None
    spec: FilledName | None = None
    budget: Budget | None = None
    backend: KernelBackend | None = None
    """Where the child's kernels run; None: where its parent's do."""


@frozen
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


@frozen
class AgentMessage:
    """``agent_message.send(text, to=..., mode=...)``."""

    text: FilledText
    to: FilledName = "parent"
    mode: SendMode = "auto"


@frozen
class InboxMessage:
    """A message taken by ``agent_message.inbox()``."""

    id: int
    sender: str | None
    sender_name: str | None
    source: str
    text: str
    mode: SendMode
    at: float


@frozen
class UsageNode:
    """``recursa usage``: a session's own usage and its subtree's, with its children."""

    id: str
    name: str | None
    own: Usage
    total: Usage
    children: tuple[UsageNode, ...] = ()


@frozen
class CommandKey:
    """Identifies a mutating command for idempotency: the client's id (stable for
    one CLI process) and the command's (unique per command)."""

    client_id: str
    command_id: str


# --- the Continual Harness: entries for clients and kernels ---------------------


@frozen
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


@frozen
class HarnessDetail:
    """``recursa harness show``: the newest version, every version oldest first,
    and the number of the version in force (None: none is, e.g. still proposed)."""

    entry: HarnessEntry
    history: tuple[HarnessEntry, ...]
    effective: int | None


@frozen
class HarnessPrompt:
    """``recursa harness show --prompt``: exactly the supplement the session's
    next model call gets after the base system prompt, and its size."""

    session: str
    text: str
    tokens: int
    chars: int
    included: tuple[str, ...]
    left_out: tuple[str, ...]


def _entry_for_op(entry: str | None, info: ValidationInfo) -> str | None:
    """A harness edit's entry: none for a create (it gets a new id), a non-blank
    reference for every other op."""
    op = info.data.get("op")
    if op == "create":
        if entry is not None:
            raise ValueError("a create names no entry (it gets a new id)")
    elif op is not None and (entry is None or not entry.strip()):
        raise ValueError(f"{op} needs the entry: an id, id prefix or title")
    return entry


@frozen
class HarnessEdit:
    """``harness.create/update/delete/rollback(...)`` from a kernel: staged for the
    caller's next turn boundary. ``entry`` (an id, id prefix or title) names the
    entry for every op but ``create``. The actor is always the model."""

    op: EditOp
    entry: Annotated[
        Name | None, field_options(validate_default=True), after(_entry_for_op, info=True)
    ] = None
    kind: Kind | None = None
    title: Text | None = None
    content: Text | None = None
    code: Text | None = None
    scope: Scope | None = None
    meta: dict[str, Any] | None = None
    to_version: Version | None = None
    reason: Text = ""
    effect: Text = ""


@frozen
class HarnessReceipt:
    """A staged edit: the entry it is about (a create's new id), and when it applies."""

    entry_id: str
    op: EditOp
    staged: int
    applies: str


@frozen
class HarnessDecision:
    """``recursa harness approve|reject ID --reason TEXT``."""

    reason: Text = ""


@frozen
class HarnessRevert:
    """``recursa harness revert ID --to V``: ``to`` 0 is before the entry existed."""

    to: Version


@frozen
class RefineRequest:
    """``recursa refine`` and ``refine.run()``: extra instructions for the refinement."""

    instructions: Instructions = None


@frozen
class RefineReply:
    """A refinement's outcome: the entries it staged edits for, and what it skipped."""

    refinement_id: int
    staged: tuple[str, ...]
    problems: tuple[str, ...]


HARNESS_OPS: tuple[EditOp, ...] = get_args(EditOp)


@frozen
class WireError:
    kind: ErrorKind
    message: str


T = TypeVar("T")


def to_json(value: object) -> dict[str, Any]:
    """A wire value as a JSON-ready dict (tuples become lists)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"not a wire value: {value!r}")
    dumped: dict[str, Any] = to_plain(value)
    return dumped


def from_json(cls: type[T], data: object) -> T:
    """Build ``cls`` (a wire dataclass) from a JSON object, validated by type.

    Scalars are strict (``"5"`` is not 5, ``true`` is not 1, a float is not a
    whole number), literals and the bounds of :mod:`recursa.protocol.fields`
    are checked, nested objects and arrays become their dataclasses and
    tuples. Unknown keys are ignored (a newer peer). Anything else raises
    ``ValueError`` with one line naming the field: ``model must be a string, not 7``.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a JSON object")
    from pydantic import ValidationError
    from pydantic_core import PydanticSerializationError
    from pydantic_core import to_json as to_json_bytes

    adapter = _adapter(cls)
    try:
        # Through JSON: in strict mode only JSON input may give a dataclass as an
        # object and a tuple as an array; the data came from JSON in the first place.
        value: T = adapter.validate_json(to_json_bytes(data), strict=True)
    except ValidationError as exc:
        raise ValueError(one_line(exc, root=cls)) from None
    except PydanticSerializationError as exc:
        raise ValueError(f"{cls.__name__}: not JSON data: {exc}") from None
    return value


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[T]) -> TypeAdapter[T]:
    """One validator per wire type, built on first use (a race builds one
    twice; either serves)."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def error_body(kind: ErrorKind, message: str) -> dict[str, Any]:
    return {"error": {"kind": kind, "message": message}}


__all__ = [
    "API_PREFIX",
    "ERROR_STATUS",
    "HARNESS_OPS",
    "HEADER_CLIENT",
    "HEADER_COMMAND",
    "HEARTBEAT_SECONDS",
    "KERNEL_COMM_ID",
    "PROTOCOL_VERSION",
    "AgentMessage",
    "Autonomous",
    "Budget",
    "CommandKey",
    "ContextFile",
    "ContextFiles",
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

"""The kernels' operations (what :mod:`recursa.api` asks): rows of the table
(:mod:`recursa.protocol.operations`) with the request and reply values they
need. All are under ``/v1/kernel`` and reached with a kernel token only; the
caller is the session the token was minted for, never anything in the request.

``ref`` is one of the caller's children, by id or name; ``entry`` a harness
entry the caller can see (global, or local to it). Harness edits are staged
for the caller's next turn boundary, always as the model's. Waits are
bounded by :data:`~recursa.protocol.fields.MAX_WAIT_SECONDS`.
"""

from __future__ import annotations

from recursa.protocol.control import (
    AddSchedule,
    CompleteGoal,
    GoalInfo,
    ScheduleInfo,
    ScheduleMode,
    UpdateSchedule,
)
from recursa.protocol.fields import FilledName, FilledText, Name, Positive, Text, Wait
from recursa.protocol.history import (
    CompactReply,
    CompactRequest,
    EventsRequest,
    HistoryEvent,
    HistoryHit,
    SearchRequest,
)
from recursa.protocol.operations import Audience, Operation
from recursa.protocol.person_ops import Diff, DiffQuery, EntryRef, HarnessQuery
from recursa.protocol.wire import (
    AgentMessage,
    Handle,
    HarnessEdit,
    HarnessEntry,
    HarnessReceipt,
    InboxMessage,
    Receipt,
    RefineReply,
    RefineRequest,
    Spawn,
)
from recursa.values import frozen

REFINE_TIMEOUT = 600.0
COMPACT_TIMEOUT = 600.0
LLM_TIMEOUT = 900.0
"""How long a kernel waits for one ``llm()`` reply (a slow local model included)."""


# -- requests and replies -------------------------------------------------------------------


@frozen
class ChildRef:
    ref: Name


@frozen
class ChildWait(ChildRef):
    """Wait up to ``timeout`` seconds (None: no limit) for the child's work to end."""

    timeout: Wait | None = None


@frozen
class InboxWait:
    """Wait up to ``wait`` seconds for a message when none is queued."""

    wait: Wait = 0.0


@frozen
class TurnRef:
    turn: int


@frozen
class CellRef:
    cell: int


@frozen
class CellOutput:
    cell: int
    text: str


@frozen
class JobLabel:
    """One of the caller's jobs, by id or label."""

    job: FilledName


@frozen
class JobUpdate:
    """A change to one of the caller's jobs; None leaves a field as it is."""

    job: Name
    prompt: Text | None = None
    spec: Name | None = None
    mode: ScheduleMode | None = None
    label: Name | None = None

    @property
    def update(self) -> UpdateSchedule:
        return UpdateSchedule(prompt=self.prompt, spec=self.spec, mode=self.mode, label=self.label)


@frozen
class LlmCall:
    """``llm(prompt, model=..., system=..., max_tokens=...)``: one model call with
    no tools, on behalf of the caller. ``model`` None: the caller's own model;
    ``system`` None: a short default; ``max_tokens`` None: the host's default
    reply cap (never above its maximum)."""

    prompt: FilledText
    model: FilledName | None = None
    system: Text | None = None
    max_tokens: Positive | None = None


@frozen
class LlmReply:
    """The reply to an :class:`LlmCall`: its text, the model that wrote it, its
    tokens and cost (USD; None when the price is unknown). ``cut_off``: the
    reply stopped at its token cap."""

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost: float | None = None
    cut_off: bool = False


# -- the rows -------------------------------------------------------------------------------

K: Audience = "kernel"

SPAWN = Operation[Spawn, Handle](
    "spawn", "POST", "/rlm", Spawn, Handle, K,
    "rlm(): admit a child of the caller and queue its task; returns at once.", status=201,
)  # fmt: skip
SUBAGENTS = Operation[None, list[Handle]](
    "subagents", "GET", "/subagents", None, list[Handle], K,
    "The caller's children (deleted ones included), oldest first.",
)  # fmt: skip
SUBAGENT = Operation[ChildRef, Handle](
    "subagent", "GET", "/subagents/{ref}", ChildRef, Handle, K, "One of the caller's children.",
)  # fmt: skip
WAIT = Operation[ChildWait, Handle](
    "wait", "POST", "/subagents/{ref}/wait", ChildWait, Handle, K,
    "Wait until the child's work ends, or the timeout passes.", long_poll=True,
)  # fmt: skip
DELETE_SUBAGENT = Operation[ChildRef, Handle](
    "delete_subagent", "DELETE", "/subagents/{ref}", ChildRef, Handle, K,
    "Cancel the child and its subtree and tombstone them; history stays.",
)  # fmt: skip
MESSAGE = Operation[AgentMessage, list[Receipt]](
    "message", "POST", "/messages", AgentMessage, list[Receipt], K,
    "Store a message to each recipient and deliver it by mode.",
)  # fmt: skip
INBOX = Operation[InboxWait, list[InboxMessage]](
    "inbox", "POST", "/inbox", InboxWait, list[InboxMessage], K,
    "Take the messages queued for the caller, waiting for one when none is.", long_poll=True,
)  # fmt: skip
STAGE_EDIT = Operation[HarnessEdit, HarnessReceipt](
    "stage_edit", "POST", "/harness/edits", HarnessEdit, HarnessReceipt, K,
    "harness.create/update/delete/rollback: stage an edit for the turn boundary.", status=201,
)  # fmt: skip
VISIBLE_ENTRIES = Operation[HarnessQuery, list[HarnessEntry]](
    "visible_entries", "GET", "/harness/entries", HarnessQuery, list[HarnessEntry], K,
    "harness.list: the newest versions the caller can see.",
)  # fmt: skip
# The entry may hold slashes (a title): the rows with an action come before the plain one.
VISIBLE_HISTORY = Operation[EntryRef, list[HarnessEntry]](
    "visible_history", "GET", "/harness/entries/{entry:path}/history", EntryRef,
    list[HarnessEntry], K, "harness.history: every version of an entry, oldest first.",
)  # fmt: skip
VISIBLE_DIFF = Operation[DiffQuery, Diff](
    "visible_diff", "GET", "/harness/entries/{entry:path}/diff", DiffQuery, Diff, K,
    "harness.diff: a unified diff between two versions of an entry.",
)  # fmt: skip
VISIBLE_ENTRY = Operation[EntryRef, HarnessEntry](
    "visible_entry", "GET", "/harness/entries/{entry:path}", EntryRef, HarnessEntry, K,
    "harness.get: the newest version of an entry the caller can see.",
)  # fmt: skip
REFINE_CALLER = Operation[RefineRequest, RefineReply](
    "refine_caller", "POST", "/refine", RefineRequest, RefineReply, K,
    "refine.run: a refinement over the caller's recent events (a model call).",
    timeout=REFINE_TIMEOUT,
)  # fmt: skip
HISTORY_SEARCH = Operation[SearchRequest, list[HistoryHit]](
    "history_search", "POST", "/history/search", SearchRequest, list[HistoryHit], K,
    "history.search: the caller's events containing the query, newest first.",
)  # fmt: skip
HISTORY_EVENTS = Operation[EventsRequest, list[HistoryEvent]](
    "history_events", "POST", "/history/events", EventsRequest, list[HistoryEvent], K,
    "history.events: the caller's events after a seq, oldest first.",
)  # fmt: skip
HISTORY_TURN = Operation[TurnRef, list[HistoryEvent]](
    "history_turn", "GET", "/history/turns/{turn}", TurnRef, list[HistoryEvent], K,
    "history.turn: the events of one of the caller's turns.",
)  # fmt: skip
HISTORY_OUTPUT = Operation[CellRef, CellOutput](
    "history_output", "GET", "/history/outputs/{cell}", CellRef, CellOutput, K,
    "history.output: the full output of one of the caller's cells.",
)  # fmt: skip
COMPACT = Operation[CompactRequest, CompactReply](
    "compact", "POST", "/compact", CompactRequest, CompactReply, K,
    "compact.run: compact the caller's context now (a model call).", timeout=COMPACT_TIMEOUT,
)  # fmt: skip
LLM = Operation[LlmCall, LlmReply](
    "llm", "POST", "/llm", LlmCall, LlmReply, K,
    "llm(): one model call with no tools, accounted to the caller; its reply.",
    timeout=LLM_TIMEOUT,
)  # fmt: skip
CALLER_GOAL = Operation[None, GoalInfo | None](
    "caller_goal", "GET", "/goal", None, GoalInfo | None, K, "goal.get: the caller's goal.",
)  # fmt: skip
COMPLETE_GOAL = Operation[CompleteGoal, GoalInfo](
    "complete_goal", "POST", "/goal/complete", CompleteGoal, GoalInfo, K,
    "goal.complete: the caller's goal is completed, effective at once.",
)  # fmt: skip
HEARTBEAT_CREATE = Operation[AddSchedule, ScheduleInfo](
    "heartbeat_create", "POST", "/heartbeats", AddSchedule, ScheduleInfo, K,
    "heartbeat.create: schedule a prompt for the caller, as the model's.", status=201,
)  # fmt: skip
HEARTBEAT_LIST = Operation[None, list[ScheduleInfo]](
    "heartbeat_list", "GET", "/heartbeats", None, list[ScheduleInfo], K,
    "heartbeat.list: the caller's active jobs.",
)  # fmt: skip
HEARTBEAT_UPDATE = Operation[JobUpdate, ScheduleInfo](
    "heartbeat_update", "PATCH", "/heartbeats/{job}", JobUpdate, ScheduleInfo, K,
    "heartbeat.update: change one of the caller's own jobs.",
)  # fmt: skip
HEARTBEAT_DELETE = Operation[JobLabel, ScheduleInfo](
    "heartbeat_delete", "DELETE", "/heartbeats/{job}", JobLabel, ScheduleInfo, K,
    "heartbeat.delete: cancel one of the caller's own jobs.",
)  # fmt: skip

__all__ = [
    "COMPACT_TIMEOUT",
    "LLM_TIMEOUT",
    "REFINE_TIMEOUT",
    "CellOutput",
    "CellRef",
    "ChildRef",
    "ChildWait",
    "InboxWait",
    "JobLabel",
    "JobUpdate",
    "LlmCall",
    "LlmReply",
    "TurnRef",
]

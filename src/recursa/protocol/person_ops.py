"""The people's operations (the CLI, the Agents View, outside tools): rows of
the table (:mod:`recursa.protocol.operations`) with the request and reply
values they need. All are under :data:`~recursa.protocol.wire.API_PREFIX`
and need the client token.

``session`` names a session by id, unique id prefix or name; ``entry`` a
harness entry by id, unique id prefix or title (it may hold slashes, so a
title ending in ``/diff`` is reached by its id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from recursa.protocol.checked import Checked, InvalidRequest, seconds
from recursa.protocol.control import (
    AddSchedule,
    GoalAction,
    GoalInfo,
    ScheduleInfo,
    ScheduleMode,
)
from recursa.protocol.harness import KINDS, SCOPES, STATUSES
from recursa.protocol.operations import Ack, Audience, Operation
from recursa.protocol.wire import (
    CreateSession,
    DaemonStatus,
    HarnessDetail,
    HarnessEntry,
    HarnessPrompt,
    Receipt,
    RefineReply,
    SendMode,
    SessionInfo,
    Shutdown,
    UsageNode,
)

DEFAULT_LOG_LIMIT = 50
REFINE_TIMEOUT = 600.0
"""Seconds a client waits for a refinement's reply: it is a model call."""


# -- requests and replies -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRef(Checked):
    session: str


@dataclass(frozen=True, slots=True)
class SendTo(Checked):
    """A message for a session, stored durably, then delivered by its mode."""

    session: str
    text: str
    mode: SendMode = "auto"


@dataclass(frozen=True, slots=True)
class EventsQuery(Checked):
    session: str
    after: int = 0
    follow: bool = False

    def __post_init__(self) -> None:
        Checked.__post_init__(self)
        if self.after < 0:
            raise InvalidRequest("after must not be negative")


@dataclass(frozen=True, slots=True)
class QuietWait(Checked):
    """Wait up to ``timeout`` seconds (None: the longest a long poll may) for quiet."""

    session: str
    timeout: float | None = None

    def __post_init__(self) -> None:
        Checked.__post_init__(self)
        seconds(self.timeout, "timeout")


@dataclass(frozen=True, slots=True)
class Quiet:
    quiet: bool


@dataclass(frozen=True, slots=True)
class RefineSession(Checked):
    session: str
    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class HarnessQuery(Checked):
    """Filters of a harness listing; None: any."""

    kind: str | None = None
    scope: str | None = None
    status: str | None = None

    def __post_init__(self) -> None:
        Checked.__post_init__(self)
        for name, allowed in (("kind", KINDS), ("scope", SCOPES), ("status", STATUSES)):
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise InvalidRequest(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


@dataclass(frozen=True, slots=True)
class LogQuery(Checked):
    limit: int = DEFAULT_LOG_LIMIT

    def __post_init__(self) -> None:
        Checked.__post_init__(self)
        if self.limit < 0:
            raise InvalidRequest("limit must not be negative")


@dataclass(frozen=True, slots=True)
class EntryRef(Checked):
    entry: str


@dataclass(frozen=True, slots=True)
class DiffQuery(Checked):
    """Two versions of an entry (default: the newest and the one before)."""

    entry: str
    from_version: int | None = None
    to_version: int | None = None

    def __post_init__(self) -> None:
        Checked.__post_init__(self)
        for name in ("from_version", "to_version"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidRequest(f"{name} must be a version number, not {value}")


@dataclass(frozen=True, slots=True)
class Diff:
    diff: str


@dataclass(frozen=True, slots=True)
class Revert(Checked):
    """``to`` 0 is before the entry existed."""

    entry: str
    to: int

    def __post_init__(self) -> None:
        Checked.__post_init__(self)
        if self.to < 0:
            raise InvalidRequest("to must be a version number (0: before the entry existed)")


@dataclass(frozen=True, slots=True)
class Decision(Checked):
    entry: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GoalFor(Checked):
    session: str
    objective: str
    budget: int | None = None


@dataclass(frozen=True, slots=True)
class GoalChange(Checked):
    session: str
    action: GoalAction


@dataclass(frozen=True, slots=True)
class ScheduleQuery(Checked):
    """Jobs of one session (None: all); ended ones too with ``finished``."""

    session: str | None = None
    finished: bool = False


@dataclass(frozen=True, slots=True)
class ScheduleFor(Checked):
    session: str
    spec: str
    prompt: str
    mode: str = "follow_up"
    label: str | None = None

    @property
    def schedule(self) -> AddSchedule:
        """The job to add; its spec, prompt, mode and label are the scheduler's to judge."""
        mode = cast(ScheduleMode, self.mode)
        return AddSchedule(spec=self.spec, prompt=self.prompt, mode=mode, label=self.label)


@dataclass(frozen=True, slots=True)
class JobRef(Checked):
    job: int


# -- the rows -------------------------------------------------------------------------------

P: Audience = "person"

STATUS = Operation[None, DaemonStatus](
    "status", "GET", "/status", None, DaemonStatus, P,
    "The daemon's pid, version, counts, and whether recovery still runs.",
)  # fmt: skip
CREATE_SESSION = Operation[CreateSession, SessionInfo](
    "create_session", "POST", "/sessions", CreateSession, SessionInfo, P,
    "Admit a root session and queue its task (when given).", command=True, status=201,
)  # fmt: skip
SESSIONS = Operation[None, list[SessionInfo]](
    "sessions", "GET", "/sessions", None, list[SessionInfo], P,
    "Every session, roots and sub-agents, oldest first.",
)  # fmt: skip
SESSION = Operation[SessionRef, SessionInfo](
    "session", "GET", "/sessions/{session}", SessionRef, SessionInfo, P, "One session.",
)  # fmt: skip
SUBAGENTS_OF = Operation[SessionRef, list[SessionInfo]](
    "subagents_of", "GET", "/sessions/{session}/subagents", SessionRef, list[SessionInfo], P,
    "The session's direct sub-agents (deleted ones included), oldest first.",
)  # fmt: skip
SEND = Operation[SendTo, Receipt](
    "send", "POST", "/sessions/{session}/messages", SendTo, Receipt, P,
    "Store a message durably, then deliver it by its mode.", command=True,
)  # fmt: skip
INTERRUPT = Operation[SessionRef, SessionInfo](
    "interrupt", "POST", "/sessions/{session}/interrupt", SessionRef, SessionInfo, P,
    "Stop the running turn; the session stays, idle.",
)  # fmt: skip
STOP = Operation[SessionRef, SessionInfo](
    "stop", "POST", "/sessions/{session}/stop", SessionRef, SessionInfo, P,
    "Interrupt the session and unload it (kernel snapshotted, stopped).", command=True,
)  # fmt: skip
EVENTS = Operation[EventsQuery, None](
    "events", "GET", "/sessions/{session}/events", EventsQuery, None, P,
    "The session's event records with seq > after, then (follow) every new one: NDJSON.",
    stream=True,
)  # fmt: skip
USAGE = Operation[SessionRef, UsageNode](
    "usage", "GET", "/sessions/{session}/usage", SessionRef, UsageNode, P,
    "The session's own and subtree usage, with its descendants'.",
)  # fmt: skip
WAIT_QUIET = Operation[QuietWait, Quiet](
    "wait_quiet", "POST", "/sessions/{session}/wait-quiet", QuietWait, Quiet, P,
    "Wait until the session's whole tree is quiet (false on timeout).", long_poll=True,
)  # fmt: skip
HARNESS_PROMPT = Operation[SessionRef, HarnessPrompt](
    "harness_prompt", "GET", "/sessions/{session}/prompt", SessionRef, HarnessPrompt, P,
    "Exactly the supplement the session's next model call gets.",
)  # fmt: skip
REFINE = Operation[RefineSession, RefineReply](
    "refine", "POST", "/sessions/{session}/refine", RefineSession, RefineReply, P,
    "Run a refinement over the session's recent events (a model call).",
    command=True, timeout=REFINE_TIMEOUT,
)  # fmt: skip
HARNESS_LIST = Operation[HarnessQuery, list[HarnessEntry]](
    "harness_list", "GET", "/harness/entries", HarnessQuery, list[HarnessEntry], P,
    "The newest version of every entry, oldest entry first.",
)  # fmt: skip
HARNESS_LOG = Operation[LogQuery, list[HarnessEntry]](
    "harness_log", "GET", "/harness/log", LogQuery, list[HarnessEntry], P,
    "The newest versions of all entries, newest first: the audit log.",
)  # fmt: skip
# The entry may hold slashes (a title): the rows with an action come before the plain one.
HARNESS_DIFF = Operation[DiffQuery, Diff](
    "harness_diff", "GET", "/harness/entries/{entry:path}/diff", DiffQuery, Diff, P,
    "A unified diff between two versions of an entry.",
)  # fmt: skip
HARNESS_REVERT = Operation[Revert, HarnessEntry](
    "harness_revert", "POST", "/harness/entries/{entry:path}/revert", Revert, HarnessEntry, P,
    "A new version equal to an older one, by a person.", command=True,
)  # fmt: skip
HARNESS_APPROVE = Operation[Decision, HarnessEntry](
    "harness_approve", "POST", "/harness/entries/{entry:path}/approve", Decision, HarnessEntry,
    P, "Activate a proposed entry, by a person.", command=True,
)  # fmt: skip
HARNESS_REJECT = Operation[Decision, HarnessEntry](
    "harness_reject", "POST", "/harness/entries/{entry:path}/reject", Decision, HarnessEntry,
    P, "Reject a proposed entry, by a person.", command=True,
)  # fmt: skip
HARNESS_SHOW = Operation[EntryRef, HarnessDetail](
    "harness_show", "GET", "/harness/entries/{entry:path}", EntryRef, HarnessDetail, P,
    "An entry's newest version, all its versions, and the one in force.",
)  # fmt: skip
GOAL = Operation[SessionRef, GoalInfo | None](
    "goal", "GET", "/sessions/{session}/goal", SessionRef, GoalInfo | None, P,
    "The session's current goal, or null.",
)  # fmt: skip
SET_GOAL = Operation[GoalFor, GoalInfo](
    "set_goal", "PUT", "/sessions/{session}/goal", GoalFor, GoalInfo, P,
    "Give the session a goal (replacing any) and queue its first prompt.", command=True,
)  # fmt: skip
CHANGE_GOAL = Operation[GoalChange, GoalInfo](
    "change_goal", "POST", "/sessions/{session}/goal/{action}", GoalChange, GoalInfo, P,
    "Pause, resume or clear the session's goal.", command=True,
)  # fmt: skip
SCHEDULES = Operation[ScheduleQuery, list[ScheduleInfo]](
    "schedules", "GET", "/schedules", ScheduleQuery, list[ScheduleInfo], P,
    "Scheduled jobs, oldest first.",
)  # fmt: skip
ADD_SCHEDULE = Operation[ScheduleFor, ScheduleInfo](
    "add_schedule", "POST", "/sessions/{session}/schedules", ScheduleFor, ScheduleInfo, P,
    "Schedule a prompt for the session.", command=True, status=201,
)  # fmt: skip
CANCEL_SCHEDULE = Operation[JobRef, ScheduleInfo](
    "cancel_schedule", "DELETE", "/schedules/{job}", JobRef, ScheduleInfo, P,
    "Cancel a job by id.", command=True,
)  # fmt: skip
SHUTDOWN = Operation[Shutdown, Ack](
    "shutdown", "POST", "/shutdown", Shutdown, Ack, P,
    "Stop the daemon (force: no snapshots); it exits soon after the reply.",
    status=202, stops=True, retry=False,
)  # fmt: skip

__all__ = [
    "DEFAULT_LOG_LIMIT",
    "REFINE_TIMEOUT",
    "Decision",
    "Diff",
    "DiffQuery",
    "EntryRef",
    "EventsQuery",
    "GoalChange",
    "GoalFor",
    "HarnessQuery",
    "JobRef",
    "LogQuery",
    "Quiet",
    "QuietWait",
    "RefineSession",
    "Revert",
    "ScheduleFor",
    "ScheduleQuery",
    "SendTo",
    "SessionRef",
]

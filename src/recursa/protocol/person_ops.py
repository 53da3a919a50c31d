"""The people's operations (the CLI, the Agents View, outside tools): rows of
the table (:mod:`recursa.protocol.operations`) with the request and reply
values they need. All are under :data:`~recursa.protocol.wire.API_PREFIX`
and need the client token.

``session`` names a session by id, unique id prefix or name; ``entry`` a
harness entry by id, unique id prefix or title (it may hold slashes, so a
title ending in ``/diff`` is reached by its id).
"""

from __future__ import annotations

from typing import Annotated, cast

from recursa.protocol.control import (
    AddSchedule,
    GoalAction,
    GoalInfo,
    ScheduleInfo,
    ScheduleMode,
)
from recursa.protocol.fields import Count, Instructions, Name, Text, Version, Wait, one_of
from recursa.protocol.harness import KINDS, SCOPES, STATUSES
from recursa.protocol.operations import Ack, Audience, Operation
from recursa.protocol.wire import (
    ContextFiles,
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
from recursa.validation import length
from recursa.values import frozen

DEFAULT_LOG_LIMIT = 50
MAX_IDS_CHARS = 64 * 1024
"""The longest ``ids`` list a sessions query takes (about 1,800 ids)."""
REFINE_TIMEOUT = 600.0
"""Seconds a client waits for a refinement's reply: it is a model call."""


# -- requests and replies -------------------------------------------------------------------


@frozen
class SessionRef:
    """A request about one session; the requests extending it are too."""

    session: Name


@frozen
class SendTo(SessionRef):
    """A message for a session, stored durably, then delivered by its mode."""

    text: Text
    mode: SendMode = "auto"
    context_files: ContextFiles = ()
    """Texts put in the kernel as variables before the model reads the message."""


@frozen
class SessionsQuery:
    """``ids``: only these sessions (ids, comma-separated); None: every one."""

    ids: Annotated[str, length(most=MAX_IDS_CHARS)] | None = None

    @property
    def wanted(self) -> frozenset[str] | None:
        if self.ids is None:
            return None
        return frozenset(part.strip() for part in self.ids.split(",") if part.strip())


@frozen
class EventsQuery(SessionRef):
    """``in_progress`` (with ``follow``): after the stored records, the streamed
    pieces (``seq == 0``) of the reply or cell in progress, so a late watcher sees
    it from its start. A reconnecting client leaves it off: it saw them.

    ``limit``: only the last ``limit`` stored records with ``after < seq < before``
    (``before`` None: no upper bound), so a viewer reads the tail of a long log
    and pages back with ``before`` = the oldest seq it holds. ``before`` cannot
    be combined with ``follow``."""

    after: Count = 0
    follow: bool = False
    in_progress: bool = False
    limit: Count | None = None
    before: Count | None = None


@frozen
class FeedQuery:
    """Every session's stored records with ``seq > after``, then (``follow``) new ones."""

    after: Count = 0
    follow: bool = False


@frozen
class QuietWait(SessionRef):
    """Wait up to ``timeout`` seconds (None: the longest a long poll may) for quiet."""

    timeout: Wait | None = None


@frozen
class Quiet:
    quiet: bool


@frozen
class RefineSession(SessionRef):
    instructions: Instructions = None


@frozen
class HarnessQuery:
    """Filters of a harness listing; None: any."""

    kind: Annotated[str, one_of(KINDS)] | None = None
    scope: Annotated[str, one_of(SCOPES)] | None = None
    status: Annotated[str, one_of(STATUSES)] | None = None


@frozen
class LogQuery:
    limit: Count = DEFAULT_LOG_LIMIT


@frozen
class EntryRef:
    """A request about one harness entry; the requests extending it are too."""

    entry: Name


@frozen
class DiffQuery(EntryRef):
    """Two versions of an entry (default: the newest and the one before)."""

    from_version: Version | None = None
    to_version: Version | None = None


@frozen
class Diff:
    diff: str


@frozen
class Revert(EntryRef):
    """``to`` 0 is before the entry existed."""

    to: Version


@frozen
class Decision(EntryRef):
    reason: Text = ""


@frozen
class GoalFor(SessionRef):
    objective: Text
    budget: int | None = None


@frozen
class GoalChange(SessionRef):
    action: GoalAction


@frozen
class ScheduleQuery:
    """Jobs of one session (None: all); ended ones too with ``finished``."""

    session: Name | None = None
    finished: bool = False


@frozen
class ScheduleFor(SessionRef):
    spec: Name
    prompt: Text
    mode: Name = "follow_up"
    label: Name | None = None

    @property
    def schedule(self) -> AddSchedule:
        """The job to add; its spec, prompt, mode and label are the scheduler's to judge."""
        mode = cast(ScheduleMode, self.mode)
        return AddSchedule(spec=self.spec, prompt=self.prompt, mode=mode, label=self.label)


@frozen
class JobRef:
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
SESSIONS = Operation[SessionsQuery, list[SessionInfo]](
    "sessions", "GET", "/sessions", SessionsQuery, list[SessionInfo], P,
    "Every session (or those of ``ids``), roots and sub-agents, oldest first.",
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
FEED = Operation[FeedQuery, None](
    "feed", "GET", "/feed", FeedQuery, None, P,
    "Every session's stored event records with seq > after, then (follow) each new one: NDJSON.",
    stream=True,
)  # fmt: skip
UNLOAD = Operation[SessionRef, SessionInfo](
    "unload", "POST", "/sessions/{session}/unload", SessionRef, SessionInfo, P,
    "Unload an idle session (kernel snapshotted, stopped); a running one is refused.",
    command=True,
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
    "MAX_IDS_CHARS",
    "REFINE_TIMEOUT",
    "Decision",
    "Diff",
    "DiffQuery",
    "EntryRef",
    "EventsQuery",
    "FeedQuery",
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
    "SessionsQuery",
]

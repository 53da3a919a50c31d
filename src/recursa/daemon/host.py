"""What the daemon serves: the runtime's operations, as the daemon calls them.

The HTTP app (:mod:`recursa.daemon.app`) is a thin translation from requests
to these calls and from their results and errors to responses. The runtime
implements it (:class:`recursa.runtime.host.RuntimeHost`); tests of the
transport use a fake.

Errors are the ordinary error tree: ``NotFound`` (404), ``ModelUnavailable``
(422), ``UsageError``/``ValueError`` (400), ``UncertainCommand`` (409), any
other ``RecursaError`` by its class, and anything else is a bug (500).
``session`` arguments accept an id, a unique id prefix or a name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from recursa.protocol.control import (
    AddSchedule,
    GoalAction,
    GoalInfo,
    ScheduleInfo,
    SetGoal,
    UpdateSchedule,
)
from recursa.protocol.events import EventRecord
from recursa.protocol.history import CompactReply, HistoryEvent, HistoryHit
from recursa.protocol.wire import (
    AgentMessage,
    CommandKey,
    CreateSession,
    DaemonStatus,
    Handle,
    HarnessDetail,
    HarnessEdit,
    HarnessEntry,
    HarnessPrompt,
    HarnessReceipt,
    InboxMessage,
    Receipt,
    RefineReply,
    SendMessage,
    SessionInfo,
    Spawn,
    UsageNode,
)


class Host(Protocol):
    async def status(self) -> DaemonStatus:
        """The daemon's pid, version, counts, and whether recovery is still running."""
        ...

    async def create_session(
        self, request: CreateSession, command: CommandKey | None
    ) -> SessionInfo:
        """Admit a root session and queue its task (when given). Idempotent by ``command``."""
        ...

    async def sessions(self) -> list[SessionInfo]:
        """Every session, roots and sub-agents, oldest first."""
        ...

    async def session(self, session: str) -> SessionInfo: ...

    async def send(self, session: str, request: SendMessage, command: CommandKey | None) -> Receipt:
        """Store a message durably, then deliver it by its mode. Idempotent by ``command``."""
        ...

    async def interrupt(self, session: str) -> SessionInfo:
        """Stop the running turn; the session stays, idle."""
        ...

    async def stop(self, session: str, command: CommandKey | None) -> SessionInfo:
        """Interrupt the session and unload it (snapshot the kernel, stop it): inactive."""
        ...

    def events(self, session: str, *, after: int, follow: bool) -> AsyncIterator[EventRecord]:
        """The session's events with ``seq > after`` in order; with ``follow``, then
        every new one (transient ones too, with ``seq == 0``) until the consumer
        stops. Nothing is missed or repeated between the stored and the live part.
        Raises ``NotFound`` when iteration starts, for an unknown session."""
        ...

    async def shutdown(self, *, force: bool) -> None:
        """Begin stopping the daemon: ``force`` skips snapshots and kills kernels.
        Returns once the stop has begun; the server exits when it is done."""
        ...

    async def usage(self, session: str) -> UsageNode:
        """The session's own and subtree usage, with its descendants' (``recursa usage``)."""
        ...

    async def wait_quiet(self, session: str, timeout: float | None) -> bool:  # noqa: ASYNC109
        """Wait until the session's whole tree is quiet: it and every descendant
        idle (or inactive or deleted) with nothing queued for the session itself.
        Returns False on timeout. (``recursa run`` exits only then.)"""
        ...

    # -- the Continual Harness (``recursa harness``, ``recursa refine``) --------------------
    # ``ref`` names an entry by id, unique id prefix or title.

    async def harness_list(
        self, kind: str | None, scope: str | None, status: str | None
    ) -> list[HarnessEntry]:
        """The newest version of every entry (any session's), oldest entry first."""
        ...

    async def harness_show(self, ref: str) -> HarnessDetail:
        """An entry's newest version, all its versions, and the one in force."""
        ...

    async def harness_log(self, limit: int) -> list[HarnessEntry]:
        """The newest ``limit`` versions of all entries, newest first: the audit log."""
        ...

    async def harness_diff(self, ref: str, from_version: int | None, to_version: int | None) -> str:
        """A unified diff between two versions (default: the newest and the one before)."""
        ...

    async def harness_revert(
        self, ref: str, to_version: int, command: CommandKey | None
    ) -> HarnessEntry:
        """A new version equal to ``to_version`` (0: before the entry existed), by a
        person. Idempotent by ``command``."""
        ...

    async def harness_approve(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        """Activate a proposed entry, by a person. UsageError unless it is proposed.
        Idempotent by ``command``."""
        ...

    async def harness_reject(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        """Reject a proposed entry, by a person. Idempotent by ``command``."""
        ...

    async def harness_prompt(self, session: str) -> HarnessPrompt:
        """Exactly the supplement the session's next model call gets, and its size."""
        ...

    async def refine(
        self, session: str, instructions: str | None, command: CommandKey | None
    ) -> RefineReply:
        """Run a refinement over the session's recent events; its edits are staged
        (and applied at once when the session is not running). Idempotent by ``command``."""
        ...

    # -- goals and schedules (``recursa goal``, ``recursa schedule``) -----------------------

    async def goal(self, session: str) -> GoalInfo | None:
        """The session's current goal, with its usage; None when it has none."""
        ...

    async def set_goal(
        self, session: str, request: SetGoal, command: CommandKey | None
    ) -> GoalInfo:
        """Give the session a goal (replacing any) and queue its first prompt.
        UsageError for a bad objective or budget. Idempotent by ``command``."""
        ...

    async def change_goal(
        self, session: str, action: GoalAction, command: CommandKey | None
    ) -> GoalInfo:
        """Pause, resume or clear the session's goal. UsageError when it has none or
        its status does not allow it. Idempotent by ``command``."""
        ...

    async def schedules(self, session: str | None, finished: bool) -> list[ScheduleInfo]:
        """Scheduled jobs oldest first, of one session or all; ended ones too with
        ``finished``."""
        ...

    async def add_schedule(
        self, session: str, request: AddSchedule, command: CommandKey | None
    ) -> ScheduleInfo:
        """Schedule a prompt for the session. UsageError for a bad spec, prompt,
        mode or label. Idempotent by ``command``."""
        ...

    async def cancel_schedule(self, job: int, command: CommandKey | None) -> ScheduleInfo:
        """Cancel a job by id (NotFound when there is none). Idempotent by ``command``."""
        ...


class KernelHost(Protocol):
    """What a kernel may ask, through ``/v1/kernel/...``. ``caller`` is the
    session the request's kernel token belongs to: the app derives it from
    the token (:meth:`session_of_token`), never from the request."""

    def session_of_token(self, token: str) -> str | None:
        """The session a kernel token was minted for, or None."""
        ...

    async def spawn(self, caller: str, request: Spawn) -> Handle:
        """``rlm()``: admit a child of ``caller`` and queue its task; returns at once.
        Raises UsageError for a bad option (depth limit, unknown spec, name taken)."""
        ...

    async def subagents(self, caller: str) -> list[Handle]:
        """The caller's children (deleted ones included), oldest first."""
        ...

    async def subagent(self, caller: str, ref: str) -> Handle:
        """One of the caller's children, by id or name. NotFound otherwise."""
        ...

    async def wait(self, caller: str, ref: str, timeout: float | None) -> Handle:  # noqa: ASYNC109
        """Wait until the child's work ends (``done``) or ``timeout`` passes (then
        ``done`` is False). When it returns the child's answer, the answer message
        queued for the caller is taken, so the model does not get it twice."""
        ...

    async def delete_subagent(self, caller: str, ref: str) -> Handle:
        """Cancel the child and its subtree and tombstone them; history stays."""
        ...

    async def message(self, caller: str, request: AgentMessage) -> list[Receipt]:
        """Store a message to each recipient of ``request.to`` and deliver it by mode.
        Raises UsageError for an unknown recipient or a limit (size, queue, rate)."""
        ...

    async def inbox(self, caller: str, wait: float) -> list[InboxMessage]:
        """Take the messages queued for the caller (oldest first), waiting up to
        ``wait`` seconds for one when none is queued. Taken messages are not also
        put in the model's context: they are the cell's to use."""
        ...

    async def stage_edit(self, caller: str, edit: HarnessEdit) -> HarnessReceipt:
        """``harness.create/update/delete/rollback``: check the edit and stage it for
        the caller's next turn boundary, as the model's. UsageError when it is wrong;
        NotFound for an entry the caller cannot see."""
        ...

    async def visible_entries(
        self, caller: str, kind: str | None, scope: str | None, status: str | None
    ) -> list[HarnessEntry]:
        """``harness.list``: the newest versions the caller can see (global entries
        and its own local ones)."""
        ...

    async def visible_entry(self, caller: str, ref: str) -> HarnessEntry:
        """``harness.get``: the newest version of an entry the caller can see; NotFound
        otherwise (one only staged so far says so)."""
        ...

    async def visible_history(self, caller: str, ref: str) -> list[HarnessEntry]:
        """``harness.history``: every version of an entry the caller can see, oldest first."""
        ...

    async def visible_diff(
        self, caller: str, ref: str, from_version: int | None, to_version: int | None
    ) -> str:
        """``harness.diff``: a unified diff between two versions of an entry the caller can see."""
        ...

    async def refine_caller(self, caller: str, instructions: str | None) -> RefineReply:
        """``refine.run``: a refinement over the caller's recent events; its edits are
        staged for the caller's turn boundary."""
        ...

    # -- the caller's history and context (``history``, ``compact``) ------------------------

    async def history_search(self, caller: str, query: str, limit: int) -> list[HistoryHit]:
        """``history.search``: the caller's events whose text (or whose cell's full
        output) contains ``query``, case-insensitive, newest first; never the
        searching cell's own step."""
        ...

    async def history_events(
        self, caller: str, type: str | None, after: int | None, limit: int
    ) -> list[HistoryEvent]:
        """``history.events``: the caller's events after ``after`` (None: the newest
        ``limit``), oldest first. ValueError for an unknown type."""
        ...

    async def history_turn(self, caller: str, turn: int, limit: int) -> list[HistoryEvent]:
        """``history.turn``: the events of the caller's turn ``turn``; NotFound without one."""
        ...

    async def history_output(self, caller: str, cell: int) -> str:
        """``history.output``: the full output of the caller's cell; NotFound without one."""
        ...

    async def compact(self, caller: str, instructions: str | None) -> CompactReply:
        """``compact.run``: compact the caller's context now, all but the step in progress."""
        ...

    async def caller_goal(self, caller: str) -> GoalInfo | None:
        """``goal.get()``: the caller's current goal, or None."""
        ...

    async def complete_goal(self, caller: str, summary: str) -> GoalInfo:
        """``goal.complete()``: the caller's goal is completed, effective at once
        (the turn that called it is not continued). UsageError without a goal."""
        ...

    async def heartbeat_create(self, caller: str, request: AddSchedule) -> ScheduleInfo:
        """``heartbeat.create``: schedule a prompt for the caller, as the model's."""
        ...

    async def heartbeat_list(self, caller: str) -> list[ScheduleInfo]:
        """``heartbeat.list``: the caller's active jobs (a person's too)."""
        ...

    async def heartbeat_update(
        self, caller: str, ref: str, request: UpdateSchedule
    ) -> ScheduleInfo:
        """``heartbeat.update``: change one of the caller's own jobs (id or label).
        UsageError for a person's job."""
        ...

    async def heartbeat_delete(self, caller: str, ref: str) -> ScheduleInfo:
        """``heartbeat.delete``: cancel one of the caller's own jobs (id or label)."""
        ...


__all__ = ["Host", "KernelHost"]

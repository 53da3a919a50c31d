"""The people's side of the runtime as the daemon serves it: a method for
every person row of the operation table (:mod:`recursa.protocol.person_ops`),
called as ``NAME(request)`` or ``NAME(request, command)``;
:class:`recursa.runtime.host.RuntimeHost` hands it to the daemon as its
``people``.

Mutating commands are idempotent by their :class:`CommandKey`: a repeated
command gets its stored result, and one found begun but never finished (a
crash in between) is :class:`UncertainCommand`, never run again. Sending a
message is a single transaction (ledger, message, ledger), so it can never be
left uncertain.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypeVar

from recursa import __version__
from recursa.config import Limits
from recursa.errors import StoreError, UncertainCommand, UsageError
from recursa.harness.entries import reason_text
from recursa.protocol.control import GoalInfo, ScheduleInfo
from recursa.protocol.events import PROTOCOL_VERSION, EventRecord
from recursa.protocol.operations import Ack
from recursa.protocol.person_ops import (
    Decision,
    Diff,
    DiffQuery,
    EntryRef,
    EventsQuery,
    FeedQuery,
    GoalChange,
    GoalFor,
    HarnessQuery,
    JobRef,
    LogQuery,
    Quiet,
    QuietWait,
    RefineSession,
    Revert,
    ScheduleFor,
    ScheduleQuery,
    SendTo,
    SessionRef,
    SessionsQuery,
)
from recursa.protocol.wire import (
    CommandKey,
    ContextFile,
    CreateSession,
    DaemonStatus,
    HarnessDetail,
    HarnessEntry,
    HarnessPrompt,
    Receipt,
    ReceiptStatus,
    RefineReply,
    SessionInfo,
    Shutdown,
    Usage,
    UsageNode,
    from_json,
    to_json,
)
from recursa.runtime.autonomy import spec_of
from recursa.runtime.event_reads import EventReads
from recursa.runtime.kernel_api import refine
from recursa.runtime.runtime import Runtime
from recursa.runtime.tree import depth_of, display_name
from recursa.session.compaction import check_context_window
from recursa.session.inputs import Attachment
from recursa.store import JSONValue, SessionRow

T = TypeVar("T")


@dataclass
class Life:
    """When the host started and how its recovery went (``recursa daemon status``)."""

    started_at: float
    recovering: bool = True
    recovery_seconds: float | None = None


class PeopleApi:
    """Sessions, events, accounting, the harness, goals and schedules, for people.
    ``stop`` begins the host's shutdown (``force``: no snapshots)."""

    def __init__(
        self, runtime: Runtime, life: Life, stop: Callable[[bool], Awaitable[None]]
    ) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self._life = life
        self._stop = stop
        self._reads = EventReads(runtime)

    # ------------------------------------------------------------------ reads

    async def status(self) -> DaemonStatus:
        loaded = [s for s in self.runtime.sessions if s.loaded]
        return DaemonStatus(
            pid=os.getpid(),
            version=__version__,
            protocol=PROTOCOL_VERSION,
            started_at=self._life.started_at,
            sessions=len(self.store.sessions()),
            loaded=len(loaded),
            running=sum(1 for s in self.runtime.sessions if s.running),
            recovering=self._life.recovering,
            recovery_seconds=self._life.recovery_seconds,
            last_seq=self.store.last_seq(),
        )

    async def sessions(self, request: SessionsQuery) -> list[SessionInfo]:
        wanted = request.wanted
        pending = self.store.inbox.pending_counts()  # one query for the whole list
        return [
            self._info(row, pending.get(row.id, 0))
            for row in self.store.sessions()
            if wanted is None or row.id in wanted
        ]

    async def session(self, request: SessionRef) -> SessionInfo:
        return self._info(self.store.session(request.session))

    async def subagents_of(self, request: SessionRef) -> list[SessionInfo]:
        parent = self.store.session(request.session).id
        return [self._info(row) for row in self.store.sessions() if row.parent_id == parent]

    def _info(self, row: SessionRow, pending: int | None = None) -> SessionInfo:
        loaded = self.runtime.find(row.id)
        totals = self.store.usage_totals(row.id)
        return SessionInfo(
            id=row.id,
            name=display_name(row),
            parent_id=row.parent_id,
            status=loaded.status if loaded else row.status,
            model=row.model,
            cwd=row.cwd,
            created_at=row.created_at,
            last_activity=self.store.last_activity(row.id) or row.updated_at,
            usage=Usage(
                calls=totals.calls,
                input_tokens=totals.input_tokens,
                output_tokens=totals.output_tokens,
                cached_tokens=totals.cached_tokens,
                cost=totals.cost,
                unknown_cost_calls=totals.unknown_cost_calls,
            ),
            last_answer=loaded.last_answer if loaded else self.store.last_answer(row.id),
            depth=depth_of(row),
            pending=self.store.inbox.pending_count(row.id) if pending is None else pending,
            cell_started_at=loaded.cell_started_at if loaded else None,
        )

    # --------------------------------------------------------------- commands

    def _replayed(self, command: CommandKey | None, kind: str) -> JSONValue | None:
        """The stored result of a command seen before, or None for a new one
        (now recorded as pending). Raises UncertainCommand for one left pending."""
        if command is None:
            return None
        seen = self.store.commands.begin(command.client_id, command.command_id, kind)
        if seen is None:
            return None
        if seen.status == "pending":
            raise UncertainCommand(
                f"command {command.command_id} ({kind}) was received before the daemon stopped, "
                "and whether it took effect is unknown; it was not run again"
            )
        return seen.result

    def _finish(self, command: CommandKey | None, result: JSONValue) -> None:
        if command is not None:
            self.store.commands.finish(command.client_id, command.command_id, result)

    async def create_session(
        self, request: CreateSession, command: CommandKey | None
    ) -> SessionInfo:
        seen = self._replayed(command, "create_session")
        if seen is not None:
            return from_json(SessionInfo, seen)
        check_context_window(request.context_window)  # a usage error before any model's
        if request.context_files and not (request.task and request.task.strip()):
            raise UsageError("context files need a task: it is what the model is asked")
        limits = _limits(self.runtime.config.limits, request)
        spec = None
        if request.autonomous is not None:  # checked before anything is written
            model = self.runtime.default_model(request.model)
            spec = self.runtime.autonomy.check(
                spec_of(request.autonomous), model, task=request.task
            )
        session = await self.runtime.create_session(
            model=request.model,
            cwd=Path(request.cwd) if request.cwd else None,
            name=request.name,
            limits=limits,
            context_window=request.context_window,
            kernel_backend=request.kernel_backend,
        )
        attachments = attachments_of(request.context_files)
        if spec is not None:
            self.runtime.autonomy.start(session, spec, request.task, attachments)
        elif request.task:
            session.send(request.task, mode="follow_up", attachments=attachments)
        info = self._info(self.store.session(session.id))
        self._finish(command, to_json(info))
        return info

    async def send(self, request: SendTo, command: CommandKey | None) -> Receipt:
        row = self.store.session(request.session)
        target = self.runtime.get(row.id)
        if row.status == "deleted":
            raise UsageError(f"session {row.id} was deleted")
        with self.store.transaction():  # ledger, message and ledger: one commit
            seen = self._replayed(command, "send")
            if seen is not None:
                return from_json(Receipt, seen)
            busy = target.running
            message = target.send(
                request.text,
                mode=request.mode,
                attachments=attachments_of(request.context_files),
            )
            status: ReceiptStatus = (
                "queued" if busy and request.mode == "follow_up" else "delivered"
            )
            receipt = Receipt(message_id=message.id, session_id=row.id, status=status)
            self._finish(command, to_json(receipt))
        return receipt

    async def interrupt(self, request: SessionRef) -> SessionInfo:
        row = self.store.session(request.session)
        self.runtime.goals.interrupted(row.id)  # a person stepped in: the goal waits for them
        await self.runtime.get(row.id).interrupt()
        return self._info(self.store.session(row.id))

    async def stop(self, request: SessionRef, command: CommandKey | None) -> SessionInfo:
        row = self.store.session(request.session)
        seen = self._replayed(command, "stop")
        if seen is not None:
            return from_json(SessionInfo, seen)
        # First, before anything awaits: from now its kernel (and whatever that
        # kernel started) can reach nothing, so nothing it sends wakes it again.
        self.store.tokens.revoke(row.id)
        target = self.runtime.get(row.id)
        self.runtime.goals.interrupted(row.id)
        await target.interrupt()
        if target.loaded:
            await target.unload()
        info = self._info(self.store.session(row.id))
        self._finish(command, to_json(info))
        return info

    async def unload(self, request: SessionRef, command: CommandKey | None) -> SessionInfo:
        """Unload an idle session; one that is running is refused (nothing
        interrupted, nothing recorded, so the same command may be sent again)."""
        row = self.store.session(request.session)
        seen_before = command and self.store.commands.get(command.client_id, command.command_id)
        if not seen_before:  # a command already done answers as it did, running or not
            target = self.runtime.find(row.id)
            if target is not None and target.running:
                raise StoreError(f"session {row.id} is running: interrupt or stop it first")
        seen = self._replayed(command, "unload")
        if seen is not None:
            return from_json(SessionInfo, seen)
        target = self.runtime.find(row.id)
        if target is not None and target.loaded:
            await target.unload()
        info = self._info(self.store.session(row.id))
        self._finish(command, to_json(info))
        return info

    # ----------------------------------------------------------------- events

    async def events(self, request: EventsQuery) -> AsyncIterator[list[EventRecord]]:
        return await self._reads.events(request)

    async def feed(self, request: FeedQuery) -> AsyncIterator[list[EventRecord]]:
        return await self._reads.feed(request)

    # -------------------------------------------------------- tree, accounting

    async def usage(self, request: SessionRef) -> UsageNode:
        return self.runtime.tree.usage(request.session)

    async def wait_quiet(self, request: QuietWait) -> Quiet:
        return Quiet(await self.runtime.tree.wait_quiet(request.session, request.timeout))

    # ------------------------------------------------- the Continual Harness

    async def harness_list(self, request: HarnessQuery) -> list[HarnessEntry]:
        entries = self.runtime.learning.harness.entries(
            kind=request.kind, scope=request.scope, status=request.status
        )
        return [HarnessEntry.of(entry) for entry in entries]

    async def harness_show(self, request: EntryRef) -> HarnessDetail:
        harness = self.runtime.learning.harness
        current = harness.find(request.entry)
        history = self.store.harness.history(current.entry_id)
        effective = harness.effective(current.entry_id)
        return HarnessDetail(
            entry=HarnessEntry.of(current),
            history=tuple(HarnessEntry.of(version) for version in history),
            effective=None if effective is None else effective.version,
        )

    async def harness_log(self, request: LogQuery) -> list[HarnessEntry]:
        return [HarnessEntry.of(version) for version in self.store.harness.log(request.limit)]

    async def harness_diff(self, request: DiffQuery) -> Diff:
        harness = self.runtime.learning.harness
        return Diff(harness.diff(request.entry, request.from_version, request.to_version))

    async def harness_revert(self, request: Revert, command: CommandKey | None) -> HarnessEntry:
        harness = self.runtime.learning.harness
        return self._once_as(
            HarnessEntry,
            command,
            "harness_revert",
            lambda: HarnessEntry.of(harness.revert(request.entry, request.to)),
        )

    async def harness_approve(self, request: Decision, command: CommandKey | None) -> HarnessEntry:
        return self._decide("approve", request.entry, request.reason, command)

    async def harness_reject(self, request: Decision, command: CommandKey | None) -> HarnessEntry:
        return self._decide("reject", request.entry, request.reason, command)

    def _decide(
        self,
        action: Literal["approve", "reject"],
        ref: str,
        reason: str,
        command: CommandKey | None,
    ) -> HarnessEntry:
        """A person's decision on a proposed entry, once per command."""
        harness = self.runtime.learning.harness
        decide = harness.approve if action == "approve" else harness.reject
        checked = reason_text(reason)
        return self._once_as(
            HarnessEntry,
            command,
            f"harness_{action}",
            lambda: HarnessEntry.of(decide(ref, checked)),
        )

    async def harness_prompt(self, request: SessionRef) -> HarnessPrompt:
        row = self.store.session(request.session)
        supplement = self.runtime.learning.supplement(row.id)
        return HarnessPrompt(
            session=row.id,
            text=supplement.text,
            tokens=supplement.tokens,
            chars=len(supplement.text),
            included=tuple(supplement.included),
            left_out=tuple(supplement.left_out),
        )

    async def refine(self, request: RefineSession, command: CommandKey | None) -> RefineReply:
        row = self.store.session(request.session)
        seen = self._replayed(command, "refine")
        if seen is not None:
            return from_json(RefineReply, seen)
        reply = await refine(self.runtime, row.id, request.instructions)
        self._finish(command, to_json(reply))
        return reply

    # ------------------------------------- goals and schedules (recursa goal|schedule)

    async def goal(self, request: SessionRef) -> GoalInfo | None:
        return self.runtime.goals.info(self.store.session(request.session).id)

    async def set_goal(self, request: GoalFor, command: CommandKey | None) -> GoalInfo:
        row, goals = self.store.session(request.session), self.runtime.goals

        def change() -> GoalInfo:
            return goals.set(row.id, request.objective, request.budget)

        return self._once_as(GoalInfo, command, "set_goal", change)

    async def change_goal(self, request: GoalChange, command: CommandKey | None) -> GoalInfo:
        row, goals, action = self.store.session(request.session), self.runtime.goals, request.action
        change = {"pause": goals.pause, "resume": goals.resume, "clear": goals.clear}[action]
        return self._once_as(GoalInfo, command, f"{action}_goal", lambda: change(row.id))

    async def schedules(self, request: ScheduleQuery) -> list[ScheduleInfo]:
        session = request.session
        session_id = None if session is None else self.store.session(session).id
        return self.runtime.scheduler.jobs(session_id, finished=request.finished)

    async def add_schedule(self, request: ScheduleFor, command: CommandKey | None) -> ScheduleInfo:
        row, scheduler = self.store.session(request.session), self.runtime.scheduler
        return self._once_as(
            ScheduleInfo, command, "add_schedule", lambda: scheduler.add(row.id, request.schedule)
        )

    async def cancel_schedule(self, request: JobRef, command: CommandKey | None) -> ScheduleInfo:
        scheduler = self.runtime.scheduler
        return self._once_as(
            ScheduleInfo, command, "cancel_schedule", lambda: scheduler.cancel(request.job)
        )

    def _once_as(
        self, cls: type[T], command: CommandKey | None, kind: str, change: Callable[[], T]
    ) -> T:
        """Run a synchronous change once per command: the ledger entry and the
        change are one transaction, so it is never left uncertain."""
        with self.store.transaction():
            seen = self._replayed(command, kind)
            if seen is not None:
                return from_json(cls, seen)
            result = change()
            self._finish(command, to_json(result))
        return result

    async def shutdown(self, request: Shutdown) -> Ack:
        """Begin stopping the host (see :meth:`RuntimeHost.shutdown`)."""
        await self._stop(request.force)
        return Ack()


def _limits(default: Limits, request: CreateSession) -> Limits | None:
    """The limits a ``recursa run`` asked for, over the configured ones (None: defaults)."""
    changes: dict[str, object] = {}
    if request.max_steps is not None:
        changes["max_steps"] = request.max_steps or None
    if request.max_tokens is not None:
        changes["max_tokens"] = request.max_tokens or None
    if request.max_time is not None:
        changes["max_time"] = request.max_time or None
    if request.cell_timeout is not None:
        changes["cell_timeout"] = request.cell_timeout
    return replace(default, **changes) if changes else None  # type: ignore[arg-type]


def attachments_of(files: tuple[ContextFile, ...]) -> tuple[Attachment, ...]:
    """The session's form of the context files a person sent."""
    return tuple(Attachment(f.label, f.text) for f in files)


__all__ = ["Life", "PeopleApi"]

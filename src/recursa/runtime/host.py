"""The runtime as the daemon serves it: :class:`RuntimeHost` implements
:class:`recursa.daemon.host.Host` (structurally; this layer does not import
the daemon's).

Mutating commands are idempotent by their :class:`CommandKey`: a repeated
command gets its stored result, and one found begun but never finished (a
crash in between) is :class:`UncertainCommand`, never run again. Sending a
message is a single transaction (ledger, message, ledger), so it can never be
left uncertain.

:func:`open_host` is what ``python -m recursa.daemon`` calls: it opens the
runtime, brings every session back (reattaching live kernels, resuming turns
cut short, delivering queued messages) and starts the idle-unloading loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from recursa import __version__
from recursa.config import Config, Limits
from recursa.errors import NotFound, UncertainCommand, UsageError
from recursa.harness.entries import reason_text
from recursa.protocol.control import (
    AddSchedule,
    GoalAction,
    GoalInfo,
    ScheduleInfo,
    SetGoal,
    UpdateSchedule,
)
from recursa.protocol.events import PROTOCOL_VERSION, EventRecord
from recursa.protocol.harness import Edit, EntryVersion, Provenance
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
    ReceiptStatus,
    RefineReply,
    SendMessage,
    SessionInfo,
    Spawn,
    Usage,
    UsageNode,
    from_json,
    to_json,
)
from recursa.runtime.autonomy import spec_of
from recursa.runtime.runtime import Runtime
from recursa.runtime.tree import display_name
from recursa.store import JSONValue, SessionRow, history

log = logging.getLogger("recursa.runtime")
T = TypeVar("T")

IDLE_CHECK_SECONDS = 30.0
"""How often idle sessions are looked for (unloading is not urgent)."""


class RuntimeHost:
    def __init__(self, runtime: Runtime, *, wall: Callable[[], float] = time.time) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.started_at = wall()
        self.recovering = True
        self.recovery_seconds: float | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self._ticks: asyncio.Task[None] | None = None

    async def start(self, *, idle_check: float = IDLE_CHECK_SECONDS) -> None:
        """Recover every session, then keep unloading idle ones and delivering
        scheduled prompts (missed ticks coalesce into one, at once)."""
        began = time.monotonic()
        await self.runtime.recover()
        self.recovery_seconds = time.monotonic() - began
        self.recovering = False
        self._scheduler = asyncio.create_task(self._unload_loop(idle_check), name="idle unloading")
        self._ticks = asyncio.create_task(self.runtime.scheduler.run(), name="scheduled prompts")

    async def _unload_loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.runtime.unload_idle()
            except Exception:
                log.exception("unloading idle sessions failed")

    # ------------------------------------------------------------------ reads

    async def status(self) -> DaemonStatus:
        loaded = [s for s in self.runtime.sessions if s.loaded]
        return DaemonStatus(
            pid=os.getpid(),
            version=__version__,
            protocol=PROTOCOL_VERSION,
            started_at=self.started_at,
            sessions=len(self.store.sessions()),
            loaded=len(loaded),
            running=sum(1 for s in self.runtime.sessions if s.running),
            recovering=self.recovering,
            recovery_seconds=self.recovery_seconds,
        )

    async def sessions(self) -> list[SessionInfo]:
        return [self._info(row) for row in self.store.sessions()]

    async def session(self, session: str) -> SessionInfo:
        return self._info(self.store.session(session))

    def _info(self, row: SessionRow) -> SessionInfo:
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
            last_answer=loaded.last_answer if loaded else None,
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
        )
        if spec is not None:
            self.runtime.autonomy.start(session, spec, request.task)
        elif request.task:
            session.send(request.task, mode="follow_up")
        info = self._info(self.store.session(session.id))
        self._finish(command, to_json(info))
        return info

    async def send(self, session: str, request: SendMessage, command: CommandKey | None) -> Receipt:
        row = self.store.session(session)
        target = self.runtime.get(row.id)
        if row.status == "deleted":
            raise UsageError(f"session {row.id} was deleted")
        with self.store.transaction():  # ledger, message and ledger: one commit
            seen = self._replayed(command, "send")
            if seen is not None:
                return from_json(Receipt, seen)
            busy = target.running
            message = target.send(request.text, mode=request.mode)
            status: ReceiptStatus = (
                "queued" if busy and request.mode == "follow_up" else "delivered"
            )
            receipt = Receipt(message_id=message.id, session_id=row.id, status=status)
            self._finish(command, to_json(receipt))
        return receipt

    async def interrupt(self, session: str) -> SessionInfo:
        row = self.store.session(session)
        self.runtime.goals.interrupted(row.id)  # a person stepped in: the goal waits for them
        await self.runtime.get(row.id).interrupt()
        return self._info(self.store.session(row.id))

    async def stop(self, session: str, command: CommandKey | None) -> SessionInfo:
        row = self.store.session(session)
        seen = self._replayed(command, "stop")
        if seen is not None:
            return from_json(SessionInfo, seen)
        target = self.runtime.get(row.id)
        self.runtime.goals.interrupted(row.id)
        await target.interrupt()
        if target.loaded:
            await target.unload()
        info = self._info(self.store.session(row.id))
        self._finish(command, to_json(info))
        return info

    # ----------------------------------------------------------------- events

    async def events(self, session: str, *, after: int, follow: bool) -> AsyncIterator[EventRecord]:
        """Stored events after the cursor, then live ones. The listener is attached
        before the store is read, and records already sent are skipped by seq, so
        nothing falls between the two parts and nothing comes twice."""
        row = self.store.session(session)
        target = self.runtime.get(row.id)
        live: asyncio.Queue[EventRecord] = asyncio.Queue()
        stop = target.listen(live.put_nowait) if follow else None
        try:
            last = after
            for record in self.store.events(row.id, after=after):
                yield record
                last = record.seq
            if not follow:
                return
            while True:
                record = await live.get()
                if record.seq:
                    if record.seq <= last:
                        continue
                    last = record.seq
                yield record
        finally:
            if stop is not None:
                stop()

    # -------------------------------------------------------- tree, accounting

    async def usage(self, session: str) -> UsageNode:
        return self.runtime.tree.usage(session)

    async def wait_quiet(self, session: str, timeout: float | None) -> bool:  # noqa: ASYNC109
        return await self.runtime.tree.wait_quiet(session, timeout)

    # ---------------------------------------------------- the kernel-side API

    def session_of_token(self, token: str) -> str | None:
        session = self.store.tokens.session_of(token)
        if session is None:
            return None
        return None if self.store.session(session).status == "deleted" else session

    async def spawn(self, caller: str, request: Spawn) -> Handle:
        return self.runtime.tree.spawn(caller, request)

    async def subagents(self, caller: str) -> list[Handle]:
        return self.runtime.tree.children(caller)

    async def subagent(self, caller: str, ref: str) -> Handle:
        return self.runtime.tree.handle(self.runtime.tree.child(caller, ref))

    async def wait(self, caller: str, ref: str, timeout: float | None) -> Handle:  # noqa: ASYNC109
        return await self.runtime.tree.wait(caller, ref, timeout)

    async def delete_subagent(self, caller: str, ref: str) -> Handle:
        return await self.runtime.tree.delete(caller, ref)

    async def message(self, caller: str, request: AgentMessage) -> list[Receipt]:
        return self.runtime.tree.message(caller, request)

    async def inbox(self, caller: str, wait: float) -> list[InboxMessage]:
        return await self.runtime.tree.inbox(caller, wait)

    # ------------------------------------------------- the Continual Harness

    async def harness_list(
        self, kind: str | None, scope: str | None, status: str | None
    ) -> list[HarnessEntry]:
        entries = self.runtime.learning.harness.entries(kind=kind, scope=scope, status=status)
        return [HarnessEntry.of(entry) for entry in entries]

    async def harness_show(self, ref: str) -> HarnessDetail:
        harness = self.runtime.learning.harness
        current = harness.find(ref)
        history = self.store.harness.history(current.entry_id)
        effective = harness.effective(current.entry_id)
        return HarnessDetail(
            entry=HarnessEntry.of(current),
            history=tuple(HarnessEntry.of(version) for version in history),
            effective=None if effective is None else effective.version,
        )

    async def harness_log(self, limit: int) -> list[HarnessEntry]:
        return [HarnessEntry.of(version) for version in self.store.harness.log(limit)]

    async def harness_diff(self, ref: str, from_version: int | None, to_version: int | None) -> str:
        return self.runtime.learning.harness.diff(ref, from_version, to_version)

    async def harness_revert(
        self, ref: str, to_version: int, command: CommandKey | None
    ) -> HarnessEntry:
        harness = self.runtime.learning.harness
        return self._once(command, "harness_revert", lambda: harness.revert(ref, to_version))

    async def harness_approve(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        harness = self.runtime.learning.harness
        checked = reason_text(reason)
        return self._once(command, "harness_approve", lambda: harness.approve(ref, checked))

    async def harness_reject(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        harness = self.runtime.learning.harness
        checked = reason_text(reason)
        return self._once(command, "harness_reject", lambda: harness.reject(ref, checked))

    def _once(
        self, command: CommandKey | None, kind: str, change: Callable[[], EntryVersion]
    ) -> HarnessEntry:
        """A person's harness change, run once per command: the ledger entry and
        the version it writes are one transaction, so it is never left uncertain."""
        with self.store.transaction():
            seen = self._replayed(command, kind)
            if seen is not None:
                return from_json(HarnessEntry, seen)
            entry = HarnessEntry.of(change())
            self._finish(command, to_json(entry))
        return entry

    async def harness_prompt(self, session: str) -> HarnessPrompt:
        row = self.store.session(session)
        supplement = self.runtime.learning.supplement(row.id)
        return HarnessPrompt(
            session=row.id,
            text=supplement.text,
            tokens=supplement.tokens,
            chars=len(supplement.text),
            included=tuple(supplement.included),
            left_out=tuple(supplement.left_out),
        )

    async def refine(
        self, session: str, instructions: str | None, command: CommandKey | None
    ) -> RefineReply:
        row = self.store.session(session)
        seen = self._replayed(command, "refine")
        if seen is not None:
            return from_json(RefineReply, seen)
        reply = await self._refine(row.id, instructions)
        self._finish(command, to_json(reply))
        return reply

    async def _refine(self, session_id: str, instructions: str | None) -> RefineReply:
        if self.store.session(session_id).status == "deleted":
            raise UsageError(f"session {session_id} was deleted")
        result = await self.runtime.learning.refine(session_id, instructions)
        return RefineReply(result.refinement_id, result.staged, result.problems)

    # --------------------------------------------- the harness, from a kernel

    async def stage_edit(self, caller: str, edit: HarnessEdit) -> HarnessReceipt:
        # The evidence of a model's edit: the caller's latest event when it asked
        # (the cell that made it has started by then).
        last = self.store.last_seq(caller)
        staged = Edit(
            op=edit.op,
            entry_id=edit.entry or "",
            kind=edit.kind,
            title=edit.title,
            content=edit.content,
            code=edit.code,
            scope=edit.scope,
            meta=edit.meta,
            to_version=edit.to_version,
            provenance=Provenance(
                reason=reason_text(edit.reason),
                effect=reason_text(edit.effect),
                source_events=(last,) if last else (),
            ),
            actor="model",
        )
        if edit.op != "create":
            self._visible(caller, edit.entry or "")  # a staged-only entry says so
        receipt = self.runtime.learning.harness.stage(caller, staged)
        staged_id = receipt["staged"]
        return HarnessReceipt(
            entry_id=str(receipt["entry_id"]),
            op=edit.op,
            staged=staged_id if isinstance(staged_id, int) else 0,
            applies=str(receipt["applies"]),
        )

    async def visible_entries(
        self, caller: str, kind: str | None, scope: str | None, status: str | None
    ) -> list[HarnessEntry]:
        harness = self.runtime.learning.harness
        entries = harness.entries(session_id=caller, kind=kind, scope=scope, status=status)
        return [HarnessEntry.of(entry) for entry in entries]

    async def visible_entry(self, caller: str, ref: str) -> HarnessEntry:
        return HarnessEntry.of(self._visible(caller, ref))

    async def visible_history(self, caller: str, ref: str) -> list[HarnessEntry]:
        entry = self._visible(caller, ref)
        return [HarnessEntry.of(version) for version in self.store.harness.history(entry.entry_id)]

    async def visible_diff(
        self, caller: str, ref: str, from_version: int | None, to_version: int | None
    ) -> str:
        entry = self._visible(caller, ref)
        return self.runtime.learning.harness.diff(entry.entry_id, from_version, to_version)

    async def refine_caller(self, caller: str, instructions: str | None) -> RefineReply:
        return await self._refine(caller, instructions)

    # ----------------------------------- the caller's history and context, from a kernel

    async def history_search(self, caller: str, query: str, limit: int) -> list[HistoryHit]:
        skip = history.running_step(self.store, caller)  # the searching cell's own code
        return history.search(self.store, caller, query, limit=limit, skip=skip)

    async def history_events(
        self, caller: str, type: str | None, after: int | None, limit: int
    ) -> list[HistoryEvent]:
        return history.recent(self.store, caller, type=type, after=after, limit=limit)

    async def history_turn(self, caller: str, turn: int, limit: int) -> list[HistoryEvent]:
        return history.turn(self.store, caller, turn, limit=limit)

    async def history_output(self, caller: str, cell: int) -> str:
        text = self.store.cell_output(caller, cell)
        if text is None:
            raise NotFound(f"this session has no cell {cell}")
        return text

    async def compact(self, caller: str, instructions: str | None) -> CompactReply:
        return await self.runtime.get(caller).compact(instructions)

    def _visible(self, caller: str, ref: str) -> EntryVersion:
        """The entry ``caller`` can see by ``ref``; NotFound otherwise, saying when
        it is only staged so far (an edit applies when the turn ends)."""
        try:
            return self.runtime.learning.harness.visible(caller, ref)
        except NotFound:
            for staged in self.store.harness.staged(caller):
                edit = staged.edit
                if ref in (edit.entry_id, edit.title) or (
                    len(ref) >= 4 and edit.entry_id.startswith(ref)
                ):
                    raise NotFound(
                        f"no harness entry {ref!r} yet: it is staged, and applies when this"
                        " turn ends"
                    ) from None
            raise

    # ------------------------------------- goals and schedules (recursa goal|schedule)

    async def goal(self, session: str) -> GoalInfo | None:
        return self.runtime.goals.info(self.store.session(session).id)

    async def set_goal(
        self, session: str, request: SetGoal, command: CommandKey | None
    ) -> GoalInfo:
        row, goals = self.store.session(session), self.runtime.goals

        def change() -> GoalInfo:
            return goals.set(row.id, request.objective, request.budget)

        return self._once_as(GoalInfo, command, "set_goal", change)

    async def change_goal(
        self, session: str, action: GoalAction, command: CommandKey | None
    ) -> GoalInfo:
        row, goals = self.store.session(session), self.runtime.goals
        change = {"pause": goals.pause, "resume": goals.resume, "clear": goals.clear}[action]
        return self._once_as(GoalInfo, command, f"{action}_goal", lambda: change(row.id))

    async def schedules(self, session: str | None, finished: bool) -> list[ScheduleInfo]:
        session_id = None if session is None else self.store.session(session).id
        return self.runtime.scheduler.jobs(session_id, finished=finished)

    async def add_schedule(
        self, session: str, request: AddSchedule, command: CommandKey | None
    ) -> ScheduleInfo:
        row, scheduler = self.store.session(session), self.runtime.scheduler
        return self._once_as(
            ScheduleInfo, command, "add_schedule", lambda: scheduler.add(row.id, request)
        )

    async def cancel_schedule(self, job: int, command: CommandKey | None) -> ScheduleInfo:
        scheduler = self.runtime.scheduler
        return self._once_as(
            ScheduleInfo, command, "cancel_schedule", lambda: scheduler.cancel(job)
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

    # --------------------------------------------- goals and heartbeats, from a kernel

    async def caller_goal(self, caller: str) -> GoalInfo | None:
        return self.runtime.goals.info(caller)

    async def complete_goal(self, caller: str, summary: str) -> GoalInfo:
        return self.runtime.goals.complete(caller, summary)

    async def heartbeat_create(self, caller: str, request: AddSchedule) -> ScheduleInfo:
        return self.runtime.scheduler.add(caller, request, by="model")

    async def heartbeat_list(self, caller: str) -> list[ScheduleInfo]:
        return self.runtime.scheduler.jobs(caller)

    async def heartbeat_update(
        self, caller: str, ref: str, request: UpdateSchedule
    ) -> ScheduleInfo:
        return self.runtime.scheduler.update(caller, ref, request, by="model")

    async def heartbeat_delete(self, caller: str, ref: str) -> ScheduleInfo:
        scheduler = self.runtime.scheduler
        return scheduler.cancel(scheduler.find(caller, ref).id, session_id=caller, by="model")

    # ------------------------------------------------------------------- stop

    async def shutdown(self, *, force: bool) -> None:
        """Stop the idle and schedule loops and every session: gracefully, running
        turns are interrupted and each kernel's namespace is snapshotted before it
        stops; with ``force``, kernels stop without snapshots (the last checkpoints
        stay). Active goals stay active: the next start continues them."""
        for task in (self._scheduler, self._ticks):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception:  # a loop that died must not stop the shutdown
                    log.exception("a background loop had failed")
        self._scheduler = self._ticks = None
        await self.runtime.aclose(snapshot=not force)


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


async def open_host(
    config: Config, *, api_socket: Path | None = None
) -> tuple[RuntimeHost, Callable[[], Awaitable[None]]]:
    """The daemon's host: the runtime opened, every session recovered, idle
    unloading running. ``api_socket`` is where kernels reach the kernel API
    (the daemon's own socket). Returns the host and the function that closes it."""
    runtime = await Runtime.open(config, warm_kernels=1)
    runtime.api_socket = api_socket
    host = RuntimeHost(runtime)
    try:
        await host.start()
    except BaseException:
        await runtime.aclose()
        raise

    async def close() -> None:
        await host.shutdown(force=False)

    return host, close


__all__ = ["IDLE_CHECK_SECONDS", "RuntimeHost", "open_host"]

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
from typing import Literal, TypeVar

from recursa import __version__
from recursa.config import Config, Limits
from recursa.errors import UncertainCommand, UsageError
from recursa.harness.entries import reason_text
from recursa.protocol.control import (
    AddSchedule,
    GoalAction,
    GoalInfo,
    ScheduleInfo,
    SetGoal,
)
from recursa.protocol.events import PROTOCOL_VERSION, EventRecord
from recursa.protocol.wire import (
    CommandKey,
    CreateSession,
    DaemonStatus,
    HarnessDetail,
    HarnessEntry,
    HarnessPrompt,
    Receipt,
    ReceiptStatus,
    RefineReply,
    SendMessage,
    SessionInfo,
    Usage,
    UsageNode,
    from_json,
    to_json,
)
from recursa.runtime.autonomy import spec_of
from recursa.runtime.kernel_api import KernelApi
from recursa.runtime.runtime import Runtime
from recursa.runtime.tree import display_name
from recursa.store import JSONValue, SessionRow

log = logging.getLogger("recursa.runtime")
T = TypeVar("T")

IDLE_CHECK_SECONDS = 30.0
"""How often idle sessions are looked for (unloading is not urgent)."""


class RuntimeHost(KernelApi):
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
        return self._once_as(
            HarnessEntry,
            command,
            "harness_revert",
            lambda: HarnessEntry.of(harness.revert(ref, to_version)),
        )

    async def harness_approve(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        return self._decide("approve", ref, reason, command)

    async def harness_reject(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        return self._decide("reject", ref, reason, command)

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

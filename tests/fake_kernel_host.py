"""A :class:`~recursa.daemon.host.Host` that is also a
:class:`~recursa.daemon.host.KernelHost`, in memory, for tests of the kernels'
routes and of the kernel-side API (:mod:`recursa.api`).

It records every kernel call with the caller the app derived from the token
(``kernel_calls``). Children are admitted at once as ``running`` and end when
a test says so (:meth:`FakeKernelHost.finish`); messages go to in-memory
queues a test can fill (:meth:`FakeKernelHost.deliver`). Long polls tell a
test when they begin waiting (:meth:`FakeKernelHost.entered`) and record
their cancellation (``cancelled``), so tests synchronize on events, never on
sleeps. On cue: a child named ``taken`` is refused (UsageError), as is a
message to an unknown recipient.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import defaultdict
from dataclasses import replace

from fake_host import FakeHost
from recursa.errors import NotFound, UsageError
from recursa.protocol.control import (
    AddSchedule,
    GoalAction,
    GoalInfo,
    ScheduleInfo,
    SetGoal,
    UpdateSchedule,
)
from recursa.protocol.history import CompactReply, HistoryEvent, HistoryHit
from recursa.protocol.wire import (
    AgentMessage,
    CommandKey,
    CreateSession,
    Handle,
    HarnessDetail,
    HarnessEdit,
    HarnessEntry,
    HarnessPrompt,
    HarnessReceipt,
    InboxMessage,
    Receipt,
    RefineReply,
    Spawn,
    Usage,
    UsageNode,
)


class FakeKernelHost(FakeHost):
    def __init__(self) -> None:
        super().__init__()
        self.tokens: dict[str, str] = {}
        self.kernel_calls: list[tuple[str, str, object]] = []  # (operation, caller, argument)
        self.children: dict[str, Handle] = {}
        self.cancelled: list[str] = []  # long polls cancelled: "wait:ID", "inbox:ID", "quiet:ID"
        self.quiet = asyncio.Event()
        self.usage_tree: UsageNode | None = None
        self._ends: dict[str, asyncio.Event] = {}
        self._queues: dict[str, list[InboxMessage]] = defaultdict(list)
        self._arrivals: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._entered: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._cancellations: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._message_ids = 0

    # -- helpers for tests ------------------------------------------------------------------

    def add_root(self, name: str) -> tuple[str, str]:
        """A root session and its kernel token."""
        info = self._create(CreateSession(task=None, name=name))
        token = f"kt-{secrets.token_hex(8)}"
        self.tokens[token] = info.id
        return info.id, token

    def token_of(self, session_id: str) -> str:
        token = f"kt-{secrets.token_hex(8)}"
        self.tokens[token] = session_id
        return token

    def entered(self, kind: str) -> asyncio.Event:
        """Set once a long poll of ``kind`` (wait, inbox, quiet) begins waiting."""
        return self._entered[kind]

    def was_cancelled(self, key: str) -> asyncio.Event:
        """Set once the long poll ``key`` ("wait:ID", "inbox:ID", "quiet:ID") is cancelled."""
        return self._cancellations[key]

    def _cancel(self, key: str) -> None:
        self.cancelled.append(key)
        self._cancellations[key].set()

    def finish(self, child_id: str, answer: str | None, reason: str = "answered") -> None:
        """End the child's work, with its answer (None: ended without one)."""
        handle = self.children[child_id]
        self.children[child_id] = replace(
            handle, status="idle", done=True, answer=answer, reason=reason
        )
        self._ends[child_id].set()

    def deliver(
        self, session_id: str, text: str, *, sender: str | None = None, source: str = "user"
    ) -> InboxMessage:
        """Queue a message for ``session_id`` (from ``sender``, a child id, if given)."""
        self._message_ids += 1
        sender_name = self.children[sender].name if sender in self.children else None
        message = InboxMessage(
            id=self._message_ids,
            sender=sender,
            sender_name=sender_name,
            source=source,
            text=text,
            mode="auto",
            at=time.time(),
        )
        self._queues[session_id].append(message)
        self._arrivals[session_id].set()
        return message

    # -- KernelHost -------------------------------------------------------------------------

    def session_of_token(self, token: str) -> str | None:
        return self.tokens.get(token)

    async def spawn(self, caller: str, request: Spawn) -> Handle:
        self.kernel_calls.append(("spawn", caller, request))
        mine = [h for h in self.children.values() if h.parent_id == caller]
        if request.name == "taken" or any(h.name == request.name for h in mine if request.name):
            raise UsageError(f"a sub-agent named {request.name!r} exists")
        child_id = f"c{len(self.children) + 1:04d}cafe"
        parent = self.children.get(caller)
        handle = Handle(
            id=child_id,
            name=request.name,
            parent_id=caller,
            workspace=f"/work/{caller}/{request.name or child_id}",
            model=request.model or "faux/echo",
            status="running",
            depth=(parent.depth if parent else 0) + 1,
        )
        self.children[child_id] = handle
        self._ends[child_id] = asyncio.Event()
        return handle

    async def subagents(self, caller: str) -> list[Handle]:
        self.kernel_calls.append(("subagents", caller, None))
        return [h for h in self.children.values() if h.parent_id == caller]

    async def subagent(self, caller: str, ref: str) -> Handle:
        self.kernel_calls.append(("subagent", caller, ref))
        return self._child(caller, ref)

    async def wait(self, caller: str, ref: str, timeout: float | None) -> Handle:
        self.kernel_calls.append(("wait", caller, (ref, timeout)))
        handle = self._child(caller, ref)
        if not handle.done:
            self._entered["wait"].set()
            try:
                await asyncio.wait_for(self._ends[handle.id].wait(), timeout)
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                self._cancel(f"wait:{handle.id}")
                raise
        return self.children[handle.id]

    async def delete_subagent(self, caller: str, ref: str) -> Handle:
        self.kernel_calls.append(("delete", caller, ref))
        handle = self._child(caller, ref)
        deleted = replace(handle, status="deleted", done=True, reason="deleted")
        self.children[handle.id] = deleted
        self._ends[handle.id].set()
        return deleted

    async def message(self, caller: str, request: AgentMessage) -> list[Receipt]:
        self.kernel_calls.append(("message", caller, request))
        recipients = self._recipients(caller, request.to)
        receipts = []
        for recipient in recipients:
            self._message_ids += 1
            receipts.append(Receipt(self._message_ids, recipient, "queued"))
        return receipts

    async def inbox(self, caller: str, wait: float) -> list[InboxMessage]:
        self.kernel_calls.append(("inbox", caller, wait))
        if not self._queues[caller] and wait > 0:
            arrival = self._arrivals[caller]
            arrival.clear()
            self._entered["inbox"].set()
            try:
                await asyncio.wait_for(arrival.wait(), wait)
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                self._cancel(f"inbox:{caller}")
                raise
        taken, self._queues[caller] = self._queues[caller], []
        return taken

    # -- Host: the tree's routes ------------------------------------------------------------

    async def usage(self, session: str) -> UsageNode:
        info = self._resolve(session)
        if self.usage_tree is not None and self.usage_tree.id == info.id:
            return self.usage_tree
        return UsageNode(id=info.id, name=info.name, own=Usage(), total=Usage())

    async def wait_quiet(self, session: str, timeout: float | None) -> bool:
        info = self._resolve(session)
        if self.quiet.is_set():
            return True
        self._entered["quiet"].set()
        try:
            await asyncio.wait_for(self.quiet.wait(), timeout)
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            self._cancel(f"quiet:{info.id}")
            raise
        return True

    # -- the harness: empty (its routes are tested against the runtime) -------------------

    async def stage_edit(self, caller: str, edit: HarnessEdit) -> HarnessReceipt:
        self.kernel_calls.append(("stage_edit", caller, edit))
        raise UsageError("the fake host has no harness")

    async def visible_entries(
        self, caller: str, kind: str | None, scope: str | None, status: str | None
    ) -> list[HarnessEntry]:
        self.kernel_calls.append(("visible_entries", caller, (kind, scope, status)))
        return []

    async def visible_entry(self, caller: str, ref: str) -> HarnessEntry:
        raise NotFound(f"no harness entry {ref!r}")

    async def visible_history(self, caller: str, ref: str) -> list[HarnessEntry]:
        raise NotFound(f"no harness entry {ref!r}")

    async def visible_diff(
        self, caller: str, ref: str, from_version: int | None, to_version: int | None
    ) -> str:
        raise NotFound(f"no harness entry {ref!r}")

    async def refine_caller(self, caller: str, instructions: str | None) -> RefineReply:
        raise UsageError("the fake host has no harness")

    # -- history and compaction: empty (tested against the runtime) ------------------------

    async def history_search(self, caller: str, query: str, limit: int) -> list[HistoryHit]:
        self.kernel_calls.append(("history_search", caller, (query, limit)))
        return []

    async def history_events(
        self, caller: str, type: str | None, after: int | None, limit: int
    ) -> list[HistoryEvent]:
        self.kernel_calls.append(("history_events", caller, (type, after, limit)))
        return []

    async def history_turn(self, caller: str, turn: int, limit: int) -> list[HistoryEvent]:
        raise NotFound(f"this session has no turn {turn}")

    async def history_output(self, caller: str, cell: int) -> str:
        raise NotFound(f"this session has no cell {cell}")

    async def compact(self, caller: str, instructions: str | None) -> CompactReply:
        self.kernel_calls.append(("compact", caller, instructions))
        return CompactReply(False, detail="the fake host has no context")

    async def harness_list(
        self, kind: str | None, scope: str | None, status: str | None
    ) -> list[HarnessEntry]:
        return []

    async def harness_show(self, ref: str) -> HarnessDetail:
        raise NotFound(f"no harness entry {ref!r}")

    async def harness_log(self, limit: int) -> list[HarnessEntry]:
        return []

    async def harness_diff(self, ref: str, from_version: int | None, to_version: int | None) -> str:
        raise NotFound(f"no harness entry {ref!r}")

    async def harness_revert(
        self, ref: str, to_version: int, command: CommandKey | None
    ) -> HarnessEntry:
        raise NotFound(f"no harness entry {ref!r}")

    async def harness_approve(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        raise NotFound(f"no harness entry {ref!r}")

    async def harness_reject(
        self, ref: str, reason: str, command: CommandKey | None
    ) -> HarnessEntry:
        raise NotFound(f"no harness entry {ref!r}")

    async def harness_prompt(self, session: str) -> HarnessPrompt:
        info = self._resolve(session)
        return HarnessPrompt(info.id, "", 0, 0, (), ())

    async def refine(
        self, session: str, instructions: str | None, command: CommandKey | None
    ) -> RefineReply:
        raise UsageError("the fake host has no harness")

    # -- goals and schedules: none (tested against the runtime) ----------------------------

    async def goal(self, session: str) -> GoalInfo | None:
        self._resolve(session)
        return None

    async def set_goal(
        self, session: str, request: SetGoal, command: CommandKey | None
    ) -> GoalInfo:
        raise UsageError("the fake host has no goals")

    async def change_goal(
        self, session: str, action: GoalAction, command: CommandKey | None
    ) -> GoalInfo:
        raise UsageError("the fake host has no goals")

    async def schedules(self, session: str | None, finished: bool) -> list[ScheduleInfo]:
        return []

    async def add_schedule(
        self, session: str, request: AddSchedule, command: CommandKey | None
    ) -> ScheduleInfo:
        raise UsageError("the fake host has no schedules")

    async def cancel_schedule(self, job: int, command: CommandKey | None) -> ScheduleInfo:
        raise NotFound(f"no scheduled job {job}")

    async def caller_goal(self, caller: str) -> GoalInfo | None:
        self.kernel_calls.append(("caller_goal", caller, None))
        return None

    async def complete_goal(self, caller: str, summary: str) -> GoalInfo:
        self.kernel_calls.append(("complete_goal", caller, summary))
        raise UsageError("this session has no goal to complete")

    async def heartbeat_create(self, caller: str, request: AddSchedule) -> ScheduleInfo:
        self.kernel_calls.append(("heartbeat_create", caller, request))
        raise UsageError("the fake host has no schedules")

    async def heartbeat_list(self, caller: str) -> list[ScheduleInfo]:
        self.kernel_calls.append(("heartbeat_list", caller, None))
        return []

    async def heartbeat_update(
        self, caller: str, ref: str, request: UpdateSchedule
    ) -> ScheduleInfo:
        raise NotFound(f"no scheduled job {ref!r} for this session")

    async def heartbeat_delete(self, caller: str, ref: str) -> ScheduleInfo:
        raise NotFound(f"no scheduled job {ref!r} for this session")

    # -- internals --------------------------------------------------------------------------

    def _child(self, caller: str, ref: str) -> Handle:
        for handle in self.children.values():
            if handle.parent_id == caller and ref in (handle.id, handle.name):
                return handle
        raise NotFound(f"no sub-agent {ref!r}")

    def _recipients(self, caller: str, to: str) -> list[str]:
        if to == "parent":
            parent = self.children[caller].parent_id if caller in self.children else None
            if parent is None:
                raise UsageError("this session has no parent")
            return [parent]
        if to == "all":
            return [h.id for h in self.children.values() if h.parent_id == caller]
        kind, _, ref = to.partition(":")
        if kind == "child":
            return [self._child(caller, ref).id]
        if kind == "sibling" and caller in self.children:
            parent = self.children[caller].parent_id
            assert parent is not None
            return [self._child(parent, ref).id]
        raise UsageError(f"no recipient {to!r}")

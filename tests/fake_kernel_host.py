"""A :class:`~recursa.daemon.host.Host` that is also a
:class:`~recursa.daemon.host.KernelHost`, in memory, for tests of the kernels'
routes and of the kernel-side API (:mod:`recursa.api`).

It serves every row of the operation table, the ones it does not fake
refused by its :func:`~recursa.daemon.host.unserved` bases. It records every kernel call with the caller the app derived from the token
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
from recursa.daemon.host import unserved
from recursa.errors import NotFound, UsageError
from recursa.protocol.control import AddSchedule, CompleteGoal, GoalInfo, ScheduleInfo
from recursa.protocol.history import (
    CompactReply,
    CompactRequest,
    EventsRequest,
    HistoryEvent,
    HistoryHit,
    SearchRequest,
)
from recursa.protocol.kernel_ops import ChildRef, ChildWait, InboxWait
from recursa.protocol.person_ops import (
    HarnessQuery,
    LogQuery,
    Quiet,
    QuietWait,
    ScheduleQuery,
    SessionRef,
)
from recursa.protocol.wire import (
    AgentMessage,
    CreateSession,
    Handle,
    HarnessEdit,
    HarnessEntry,
    HarnessPrompt,
    HarnessReceipt,
    InboxMessage,
    Receipt,
    Spawn,
    Usage,
    UsageNode,
)


class FakeKernelHost(FakeHost, unserved("kernel")):  # type: ignore[misc]
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

    async def subagent(self, caller: str, request: ChildRef) -> Handle:
        self.kernel_calls.append(("subagent", caller, request.ref))
        return self._child(caller, request.ref)

    async def wait(self, caller: str, request: ChildWait) -> Handle:
        ref, timeout = request.ref, request.timeout
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

    async def delete_subagent(self, caller: str, request: ChildRef) -> Handle:
        self.kernel_calls.append(("delete", caller, request.ref))
        handle = self._child(caller, request.ref)
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

    async def inbox(self, caller: str, request: InboxWait) -> list[InboxMessage]:
        wait = request.wait
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

    async def usage(self, request: SessionRef) -> UsageNode:
        info = self._resolve(request.session)
        if self.usage_tree is not None and self.usage_tree.id == info.id:
            return self.usage_tree
        return UsageNode(id=info.id, name=info.name, own=Usage(), total=Usage())

    async def wait_quiet(self, request: QuietWait) -> Quiet:
        info = self._resolve(request.session)
        if self.quiet.is_set():
            return Quiet(True)
        self._entered["quiet"].set()
        try:
            await asyncio.wait_for(self.quiet.wait(), request.timeout)
        except TimeoutError:
            return Quiet(False)
        except asyncio.CancelledError:
            self._cancel(f"quiet:{info.id}")
            raise
        return Quiet(True)

    # -- the harness, history, goals and schedules: mostly empty (tested against the runtime)

    async def stage_edit(self, caller: str, edit: HarnessEdit) -> HarnessReceipt:
        self.kernel_calls.append(("stage_edit", caller, edit))
        raise UsageError("the fake host has no harness")

    async def visible_entries(self, caller: str, request: HarnessQuery) -> list[HarnessEntry]:
        filters = (request.kind, request.scope, request.status)
        self.kernel_calls.append(("visible_entries", caller, filters))
        return []

    async def history_search(self, caller: str, request: SearchRequest) -> list[HistoryHit]:
        self.kernel_calls.append(("history_search", caller, (request.query, request.limit)))
        return []

    async def history_events(self, caller: str, request: EventsRequest) -> list[HistoryEvent]:
        asked = (request.type, request.after, request.limit)
        self.kernel_calls.append(("history_events", caller, asked))
        return []

    async def compact(self, caller: str, request: CompactRequest) -> CompactReply:
        self.kernel_calls.append(("compact", caller, request.instructions))
        return CompactReply(False, detail="the fake host has no context")

    async def harness_list(self, request: HarnessQuery) -> list[HarnessEntry]:
        return []

    async def harness_log(self, request: LogQuery) -> list[HarnessEntry]:
        return []

    async def harness_prompt(self, request: SessionRef) -> HarnessPrompt:
        info = self._resolve(request.session)
        return HarnessPrompt(info.id, "", 0, 0, (), ())

    async def goal(self, request: SessionRef) -> GoalInfo | None:
        self._resolve(request.session)
        return None

    async def schedules(self, request: ScheduleQuery) -> list[ScheduleInfo]:
        return []

    async def caller_goal(self, caller: str) -> GoalInfo | None:
        self.kernel_calls.append(("caller_goal", caller, None))
        return None

    async def complete_goal(self, caller: str, request: CompleteGoal) -> GoalInfo:
        self.kernel_calls.append(("complete_goal", caller, request.summary))
        raise UsageError("this session has no goal to complete")

    async def heartbeat_create(self, caller: str, request: AddSchedule) -> ScheduleInfo:
        self.kernel_calls.append(("heartbeat_create", caller, request))
        raise UsageError("the fake host has no schedules")

    async def heartbeat_list(self, caller: str) -> list[ScheduleInfo]:
        self.kernel_calls.append(("heartbeat_list", caller, None))
        return []

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

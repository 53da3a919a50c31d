"""The kernel-side API as the runtime answers it: a method for every kernel
row of the operation table (:mod:`recursa.protocol.kernel_ops`), called as
``NAME(caller, request)``; :class:`recursa.runtime.host.RuntimeHost` hands it
to the daemon as its ``kernels``. The caller is always the session of the
kernel's token; these methods never take it from a request.
"""

from __future__ import annotations

from collections.abc import Callable

from recursa.errors import NotFound, UsageError
from recursa.harness.entries import reason_text
from recursa.kernel import ApiCall
from recursa.protocol.control import (
    AddSchedule,
    CompleteGoal,
    GoalInfo,
    ScheduleInfo,
)
from recursa.protocol.harness import Edit, EntryVersion, Provenance
from recursa.protocol.history import (
    MAX_EVENTS,
    CompactReply,
    CompactRequest,
    EventsRequest,
    HistoryEvent,
    HistoryHit,
    SearchRequest,
)
from recursa.protocol.kernel_ops import (
    CellOutput,
    CellRef,
    ChildRef,
    ChildWait,
    InboxWait,
    JobLabel,
    JobUpdate,
    LlmCall,
    LlmReply,
    TurnRef,
)
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
from recursa.runtime.light_calls import LightCalls
from recursa.runtime.runtime import Runtime
from recursa.store import history


class KernelApi:
    """Sub-agents, messages, light model calls, the harness, history, goals and
    heartbeats, for the session whose kernel calls."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.light = LightCalls(runtime)

    # ---------------------------------------------------- the kernel-side API

    def serve_in_process(self, call_as: Callable[[str], ApiCall]) -> None:
        """Kernels that reach the API over their own channels are relayed
        through ``call_as`` (the daemon's kernel app, in this process)."""
        self.runtime.kernel_api_as = call_as

    def session_of_token(self, token: str) -> str | None:
        session = self.store.tokens.session_of(token)
        if session is None:
            return None
        return None if self.store.session(session).status == "deleted" else session

    async def spawn(self, caller: str, request: Spawn) -> Handle:
        return self.runtime.tree.spawn(caller, request)

    async def subagents(self, caller: str) -> list[Handle]:
        return self.runtime.tree.children(caller)

    async def subagent(self, caller: str, request: ChildRef) -> Handle:
        return self.runtime.tree.handle(self.runtime.tree.child(caller, request.ref))

    async def wait(self, caller: str, request: ChildWait) -> Handle:
        return await self.runtime.tree.wait(caller, request.ref, request.timeout)

    async def delete_subagent(self, caller: str, request: ChildRef) -> Handle:
        return await self.runtime.tree.delete(caller, request.ref)

    async def message(self, caller: str, request: AgentMessage) -> list[Receipt]:
        return self.runtime.tree.message(caller, request)

    async def inbox(self, caller: str, request: InboxWait) -> list[InboxMessage]:
        return await self.runtime.tree.inbox(caller, request.wait)

    # --------------------------------------------- the harness, from a kernel

    async def stage_edit(self, caller: str, edit: HarnessEdit) -> HarnessReceipt:
        # The evidence of a model's edit: the input its turn answers and the
        # cell that made it (started by then), else its latest event.
        evidence = tuple(
            seq
            for seq in (
                self.store.last_seq(caller, type="user_input"),
                self.store.last_seq(caller, type="cell_started"),
            )
            if seq
        ) or tuple(seq for seq in (self.store.last_seq(caller),) if seq)
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
                source_events=evidence,
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

    async def visible_entries(self, caller: str, request: HarnessQuery) -> list[HarnessEntry]:
        harness = self.runtime.learning.harness
        entries = harness.entries(
            session_id=caller, kind=request.kind, scope=request.scope, status=request.status
        )
        return [HarnessEntry.of(entry) for entry in entries]

    async def visible_entry(self, caller: str, request: EntryRef) -> HarnessEntry:
        return HarnessEntry.of(self._visible(caller, request.entry))

    async def visible_history(self, caller: str, request: EntryRef) -> list[HarnessEntry]:
        entry = self._visible(caller, request.entry)
        return [HarnessEntry.of(version) for version in self.store.harness.history(entry.entry_id)]

    async def visible_diff(self, caller: str, request: DiffQuery) -> Diff:
        entry = self._visible(caller, request.entry)
        harness = self.runtime.learning.harness
        return Diff(harness.diff(entry.entry_id, request.from_version, request.to_version))

    async def refine_caller(self, caller: str, request: RefineRequest) -> RefineReply:
        return await refine(self.runtime, caller, request.instructions)

    # ----------------------------------- the caller's history and context, from a kernel

    async def history_search(self, caller: str, request: SearchRequest) -> list[HistoryHit]:
        skip = history.running_step(self.store, caller)  # the searching cell's own code
        return history.search(self.store, caller, request.query, limit=request.limit, skip=skip)

    async def history_events(self, caller: str, request: EventsRequest) -> list[HistoryEvent]:
        return history.recent(
            self.store, caller, type=request.type, after=request.after, limit=request.limit
        )

    async def history_turn(self, caller: str, request: TurnRef) -> list[HistoryEvent]:
        return history.turn(self.store, caller, request.turn, limit=MAX_EVENTS)

    async def history_output(self, caller: str, request: CellRef) -> CellOutput:
        text = self.store.cell_output(caller, request.cell)
        if text is None:
            raise NotFound(f"this session has no cell {request.cell}")
        return CellOutput(request.cell, text)

    async def llm(self, caller: str, request: LlmCall) -> LlmReply:
        return await self.light.call(caller, request)

    async def compact(self, caller: str, request: CompactRequest) -> CompactReply:
        return await self.runtime.get(caller).compact(request.instructions)

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

    # --------------------------------------------- goals and heartbeats, from a kernel

    async def caller_goal(self, caller: str) -> GoalInfo | None:
        return self.runtime.goals.info(caller)

    async def complete_goal(self, caller: str, request: CompleteGoal) -> GoalInfo:
        return self.runtime.goals.complete(caller, request.summary)

    async def heartbeat_create(self, caller: str, request: AddSchedule) -> ScheduleInfo:
        return self.runtime.scheduler.add(caller, request, by="model")

    async def heartbeat_list(self, caller: str) -> list[ScheduleInfo]:
        return self.runtime.scheduler.jobs(caller)

    async def heartbeat_update(self, caller: str, request: JobUpdate) -> ScheduleInfo:
        return self.runtime.scheduler.update(caller, request.job, request.update, by="model")

    async def heartbeat_delete(self, caller: str, request: JobLabel) -> ScheduleInfo:
        scheduler = self.runtime.scheduler
        job = scheduler.find(caller, request.job).id
        return scheduler.cancel(job, session_id=caller, by="model")


async def refine(runtime: Runtime, session_id: str, instructions: str | None) -> RefineReply:
    """A refinement over the session's recent events; UsageError for a deleted session."""
    if runtime.store.session(session_id).status == "deleted":
        raise UsageError(f"session {session_id} was deleted")
    result = await runtime.learning.refine(session_id, instructions)
    return RefineReply(result.refinement_id, result.staged, result.problems)


__all__ = ["KernelApi", "refine"]

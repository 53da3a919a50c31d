"""The Session: a thin shell around the turn loop.

A session owns its lifecycle, its inbox and the persistence of its events;
the turn loop (:mod:`recursa.session.loop`, driven by
:mod:`recursa.session.turns`) owns what happens in a turn, the model context
(:mod:`recursa.session.model_context`) what the model sees and how it is
called, and the kernel slot (:mod:`recursa.session.kernel_slot`) its kernel. Every event
passes through :meth:`Session.record`, which appends it to the store (so it is
durable before anyone sees it), applies it to the conversation, and publishes
it to listeners.

Inputs go through the durable inbox: :meth:`send` stores the message before
it returns. ``steer`` (and ``auto``, while a turn runs) joins the running
turn before its next model call; ``follow_up`` (and ``auto`` while idle)
starts a turn when the current one ends. A message becomes a ``user_input``
event in the same transaction that marks it delivered: exactly once.

A session is rebuilt from its log by :meth:`replay`; after a daemon crash,
:meth:`recover` also reattaches its kernel, marks cells whose result was lost
as interrupted (they never run again) and resumes a turn that was cut short.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal

from recursa.models.types import Message
from recursa.protocol.events import (
    Event,
    EventRecord,
    InputSource,
    Notice,
    SessionStatus,
    StatusChanged,
    TurnEnded,
    is_transient,
)
from recursa.protocol.history import CompactReply
from recursa.session.context import Conversation
from recursa.session.deps import SessionDeps, SessionHost
from recursa.session.inputs import Attachment, InputPlacer, stash
from recursa.session.kernel_slot import KernelSlot, KernelSource, SlotDeps
from recursa.session.listeners import Listeners
from recursa.session.model_context import ModelContext
from recursa.session.replay import Cut, lost_results, read_log
from recursa.session.turns import Turns
from recursa.store import MessageKind, MessageRow

SendMode = Literal["auto", "steer", "follow_up"]

log = logging.getLogger("recursa.session")


class Session:
    """One agent session. Create through :meth:`recursa.runtime.Runtime.create_session`."""

    def __init__(self, session_id: str, cwd: Path, deps: SessionDeps) -> None:
        self.id = session_id
        self.cwd = cwd
        self.deps = deps
        self.model_ref = deps.model_info.ref
        self.fenced = not deps.model_info.native_tools
        self.status: SessionStatus = "admitted"
        self.last_answer: str | None = None
        self.last_end: TurnEnded | None = None
        self.last_activity = 0.0
        self.cell_started_at: float | None = None
        """When the cell running now started (its ``cell_started`` time); None between cells."""
        self.idle_since = deps.clock()
        """When the session last went idle, by the runtime's (monotonic) clock."""
        self._conversation = Conversation(fenced=self.fenced)
        self._model = ModelContext(session_id, cwd, deps, self._conversation, self.record)
        self._slot = KernelSlot(
            session_id,
            cwd,
            deps.workspace,
            SlotDeps(
                store=deps.store,
                kernels=deps.kernels,
                tasks=deps.tasks,
                record=self.record,
                limits=deps.limits,
                snapshot_max_bytes=deps.snapshot_max_bytes,
                kernel_env=lambda: deps.host.kernel_env(session_id),
                backend=deps.kernel_backend,
                kernel_relay=lambda: deps.host.kernel_relay(session_id),
                prelude=lambda: self._model.prelude,
            ),
        )
        self._inputs = InputPlacer(
            session_id,
            deps.workspace,
            deps.store,
            self._slot.set_variables,
            window=deps.model_info.context_window,
            share=deps.inline_input_share,
        )
        self._listeners = Listeners()
        self._turns = Turns(self, self._model, self._slot)
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._interrupting = False

    # ---------------------------------------------------------------- loading

    def replay(self) -> Cut | None:
        """Rebuild the context and counters from the stored log. Returns the work
        it shows as cut short (:class:`~recursa.session.replay.Cut`), if any."""
        state = read_log(self.deps.store.events(self.id), self._conversation)
        self._turns.count = max(self._turns.count, state.turns)
        self._turns.cells = max(self._turns.cells, state.cells)
        self.last_activity = state.last_activity or self.last_activity
        if state.last_end is not None:
            self.last_end = state.last_end
        if state.last_answer is not None:
            self.last_answer = state.last_answer
        if state.status is not None:
            self.status = state.status
        return state.cut

    async def recover(self) -> None:
        """After a daemon restart: rebuild, reattach the kernel if it survived,
        settle what the crash cut short, and carry on with what is waiting."""
        cut = self.replay()
        attached = await self._slot.reattach()
        if cut is not None:
            text = "recovered: the daemon stopped during this turn, which now goes on"
            self.record(Notice(level="warning", text=text))
            for result in lost_results(cut):
                self.record(result)
            self._conversation.close_unanswered()
            self._start_worker(resume=cut)
        elif self.deps.store.inbox.pending_count(self.id):
            self._start_worker()
        elif self.status != "deleted":
            self._set_status("idle" if attached else "inactive")

    # ----------------------------------------------------------------- inputs

    def send(
        self,
        text: str,
        *,
        mode: SendMode = "auto",
        source: InputSource = "user",
        sender: str | None = None,
        kind: MessageKind = "message",
        attachments: tuple[Attachment, ...] = (),
    ) -> MessageRow:
        """Store a message (durable when this returns) and deliver it by its mode;
        never waits for the model. See the module docstring for the modes.
        ``attachments`` are put in the kernel as variables before the model sees
        the message (:mod:`recursa.session.inputs`)."""
        if self._closed:
            raise RuntimeError(f"session {self.id} is closed")
        with self.deps.store.transaction():
            row = self.deps.store.inbox.enqueue(
                self.id, text, source=source, mode=mode, sender=sender, kind=kind
            )
            stash(self.deps.workspace, row, attachments)
        if self.running:
            if mode in ("steer", "auto"):
                self._turns.steer_waiting = True
        else:
            self._start_worker()
        self.deps.host.activity()
        return row

    @property
    def inputs(self) -> InputPlacer:
        """How the session's inputs are delivered (long ones put in the kernel)."""
        return self._inputs

    def wake(self) -> None:
        """Start taking inputs if some are queued and no turn runs (messages
        written to the store directly, e.g. a sub-agent's first task)."""
        if not self.running and self.deps.store.inbox.pending_count(self.id):
            self._start_worker()
            self.deps.host.activity()

    @property
    def interrupting(self) -> bool:
        """:meth:`interrupt` is stopping the running turn."""
        return self._interrupting

    @property
    def running(self) -> bool:
        """A worker is taking inputs (a turn runs or is about to)."""
        return self._worker is not None and not self._worker.done()

    async def _after_turn(self) -> None:
        if self.last_end is None or self._interrupting:
            return
        try:
            await self.deps.host.after_turn(self, self.last_end)
        except asyncio.CancelledError:
            raise
        except Exception:  # a control's failure must not take the session down
            log.exception("session %s: a turn-end control failed", self.id)

    def _prestart(self) -> None:
        if self.deps.prestart_kernel:
            self._slot.prestart()

    @property
    def kernel_ready(self) -> bool:
        """The session holds a running kernel (not one still starting)."""
        return self._slot.ready

    @property
    def loaded(self) -> bool:
        """The session has a kernel (or is getting one)."""
        return self._slot.loaded

    async def wait_idle(self) -> TurnEnded | None:
        """Wait until no turn runs and nothing is being taken; return the last turn's end."""
        while self.running:
            assert self._worker is not None
            await asyncio.wait([self._worker])
        return self.last_end

    async def ask(self, text: str) -> TurnEnded | None:
        """Send ``text`` and wait for the session to go idle (the SDK's one-liner)."""
        self.send(text)
        return await self.wait_idle()

    async def interrupt(self) -> None:
        """Stop the running turn; the session stays, idle. Queued follow-ups stay
        queued and run with the next input."""
        worker = self._worker
        if worker is None or worker.done():
            return
        self._interrupting = True
        worker.cancel()
        await asyncio.wait([worker])

    # ----------------------------------------------------------------- events

    def listen(self, callback: Callable[[EventRecord], None]) -> Callable[[], None]:
        """Call ``callback`` with every event from now on, persisted (``seq > 0``) and
        transient (``seq == 0``), synchronously and in order, right after it is
        durable. The callback must be quick and must not raise. Returns a function
        that stops the calls."""
        return self._listeners.add(callback)

    async def watch(self) -> AsyncIterator[EventRecord]:
        """Every event from now on, as an async iterator (a queue fed by :meth:`listen`)."""
        async for record in self._listeners.watch():
            yield record

    def in_progress(self) -> tuple[EventRecord, ...]:
        """The streamed pieces (transient records) of the reply or cell in progress,
        in order; with :meth:`listen` called in the same step, a late watcher
        gets the whole of it, once."""
        return self._listeners.in_progress()

    def history(self, after: int = 0) -> list[EventRecord]:
        return self.deps.store.events(self.id, after=after)

    def record(self, event: Event) -> EventRecord:
        """Persist (unless transient), apply to the context, publish. In that order:
        a listener never sees an event that is not yet durable."""
        if is_transient(event):
            record = EventRecord(seq=0, session_id=self.id, ts=0.0, event=event)
        else:
            record = self.deps.store.append(self.id, event)
        self._publish(record)
        return record

    def published(self, record: EventRecord) -> None:
        """An event another party appended to this session's log (e.g. messages a
        cell took from the inbox): apply it and tell the listeners."""
        self._publish(record)

    def _publish(self, record: EventRecord) -> None:
        if record.seq:
            self._conversation.apply(record.event, record.seq)
            self.last_activity = record.ts
            kind = record.event.type
            if kind == "cell_started":
                self.cell_started_at = record.ts
            elif kind in ("cell_finished", "turn_ended"):
                self.cell_started_at = None
        self._listeners.publish(record)

    def _set_status(self, status: SessionStatus) -> None:
        if status == "idle":
            self.idle_since = self.deps.clock()
        if status != self.status:
            self.status = status
            self.deps.store.set_status(self.id, status)
            self.record(StatusChanged(status=status))

    # ------------------------------------------------------------------ turns

    def _start_worker(self, *, resume: Cut | None = None) -> None:
        # Running from now, before the caller returns: whoever sent the input
        # and then waits for the session to settle must not see the old idle.
        self._set_status("running")
        self._worker = self.deps.tasks.start(self._work(resume), name=f"session {self.id}")
        self._worker.add_done_callback(lambda _: self.deps.host.activity())

    async def _work(self, resume: Cut | None) -> None:
        """Run turns while inputs wait. An interrupt ends the running turn and this
        worker; what is still queued waits for the next input. The last check for
        waiting input is followed by no await, so a message sent later always
        finds this worker done and starts a new one."""
        try:
            if resume is not None:
                self._set_status("running")
                self._prestart()
                await self._turns.run(resume.turn, resume=True)
                await self._checkpoint()
                await self._after_turn()
            while not (self._closed or self._interrupting):
                pending = self.deps.store.inbox.pending(self.id)
                if not pending:
                    break
                self._set_status("running")
                self._prestart()
                self._turns.steer_waiting = False
                await self._inputs.deliver(pending, self._publish)
                await self._turns.run(None, resume=False)
                await self._checkpoint()
                await self._after_turn()
        finally:
            self._interrupting = False
            if not self._closed:
                try:
                    self._set_status("idle")
                except Exception:  # never mask what ended the worker
                    log.exception("session %s: could not record the idle status", self.id)

    async def _checkpoint(self) -> None:
        if self.deps.checkpoint_each_turn and not self._closed:
            await self._slot.checkpoint()

    # ------------------------------------------------------------- compaction

    async def compact(self, instructions: str | None = None) -> CompactReply:
        """The agent's compaction (``compact.run()``, from a cell): replace all of
        the context but the step in progress with a summary. Automatic
        compaction happens by itself before model calls (:mod:`recursa.session.compactor`)."""
        return await self._model.compact(instructions)

    @property
    def context(self) -> tuple[Message, ...]:
        """The messages the next model call gets (compactions applied)."""
        return self._model.messages

    @property
    def context_tokens(self) -> int:
        """The size of the model's context now, in tokens (measured where it can be)."""
        return self._model.tokens

    # -------------------------------------------------------------- lifecycle

    async def unload(self) -> None:
        """Snapshot the kernel's namespace and stop it; the session goes inactive
        and loads again (a new kernel, the namespace restored) on its next input."""
        if self.running:
            raise RuntimeError(f"session {self.id} is running; interrupt it first")
        await self._slot.unload()
        if not self.running:  # an input may have started a turn during the snapshot
            self._set_status("inactive")

    async def close(self, *, snapshot: bool = False) -> None:
        """Stop any running turn and let go of the kernel: with ``snapshot``,
        unload it (the daemon's graceful stop); else shut it down. The history
        stays in the store."""
        self._closed = True  # before the interrupt, so no queued turn starts
        await self.interrupt()
        if snapshot and self._slot.loaded:
            await self._slot.unload()
            self._set_status("inactive")
        else:
            await self._slot.close()


__all__ = ["KernelSource", "SendMode", "Session", "SessionDeps", "SessionHost"]

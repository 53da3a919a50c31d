"""The Session: a thin shell around the turn loop.

A session owns its lifecycle, its inbox, its kernel and the persistence of
its events; the turn loop (:mod:`recursa.session.loop`) owns what happens in
a turn. Every event the loop yields passes through :meth:`Session.record`,
which appends it to the store (so it is durable before anyone sees it),
applies it to the conversation, and publishes it to watchers.

Inputs: :meth:`send` queues a message. ``steer`` (and ``auto``, while a turn
runs) joins the running turn before its next model call; ``follow_up`` (and
``auto`` while idle) starts a turn when the current one ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from recursa.config import Limits
from recursa.errors import KernelError
from recursa.kernel import CellOutput, Kernel, OutputPart, bound_text
from recursa.models.retry import with_retries
from recursa.models.types import ModelInfo, Request, StreamEvent, Usage
from recursa.protocol.events import (
    CellFinished,
    CellStatus,
    Event,
    EventRecord,
    InputSource,
    KernelStatus,
    Notice,
    SessionStatus,
    StatusChanged,
    TurnEnded,
    UserInput,
    is_transient,
)
from recursa.protocol.events import CellOutput as CellOutputEvent
from recursa.session.cells import PYTHON_TOOL
from recursa.session.context import (
    BASE_PROMPT,
    FENCED_PROMPT,
    Conversation,
    find_context_files,
    system_prompt,
)
from recursa.session.loop import TurnHooks, run_turn
from recursa.store import Store

SendMode = Literal["auto", "steer", "follow_up"]

log = logging.getLogger("recursa.session")


class KernelSource(Protocol):
    """Where a session gets its kernel (a pool that keeps one warm)."""

    async def acquire(self, cwd: Path) -> Kernel: ...


class ModelCaller(Protocol):
    def __call__(self, request: Request) -> AsyncIterator[StreamEvent]: ...


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """What a session is built from; the runtime supplies it."""

    store: Store
    kernels: KernelSource
    call_model: ModelCaller
    cost: Callable[[Usage], float | None]
    model_info: ModelInfo
    model_name: str
    limits: Limits
    clock: Callable[[], float]
    max_retries: int = 4
    retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    supplements: tuple[str, ...] = field(default_factory=tuple)


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
        self._conversation = Conversation(fenced=self.fenced)
        self._system = system_prompt(
            FENCED_PROMPT if self.fenced else BASE_PROMPT, find_context_files(cwd), deps.supplements
        )
        self._inbox: deque[UserInput] = deque()
        self._steers: list[UserInput] = []
        self._listeners: list[Callable[[EventRecord], None]] = []
        self._turns = 0
        self._cells = 0
        self._worker: asyncio.Task[None] | None = None
        self._kernel_task: asyncio.Task[Kernel] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._interrupting = False

    # ----------------------------------------------------------------- inputs

    def send(
        self,
        text: str,
        *,
        mode: SendMode = "auto",
        source: InputSource = "user",
        sender: str | None = None,
    ) -> None:
        """Queue a message; never waits for the model. See the module docstring for modes."""
        if self._closed:
            raise RuntimeError(f"session {self.id} is closed")
        running = self._worker is not None and not self._worker.done()
        if running and mode in ("steer", "auto") and self.status == "running":
            self._steers.append(UserInput(text=text, source=source, sender=sender, mode="steer"))
            return
        self._inbox.append(UserInput(text=text, source=source, sender=sender))
        if not running:
            self._worker = asyncio.create_task(self._work(), name=f"session {self.id}")

    async def wait_idle(self) -> TurnEnded | None:
        """Wait until no turn runs and nothing is queued; return the last turn's end."""
        while True:
            await self._idle.wait()
            worker = self._worker
            if worker is None or worker.done():
                break
            await asyncio.shield(worker)
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
        self._listeners.append(callback)

        def stop() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return stop

    async def watch(self) -> AsyncIterator[EventRecord]:
        """Every event from now on, as an async iterator (a queue fed by :meth:`listen`)."""
        queue: asyncio.Queue[EventRecord] = asyncio.Queue()
        stop = self.listen(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            stop()

    def history(self) -> list[EventRecord]:
        return self.deps.store.events(self.id)

    def record(self, event: Event) -> EventRecord:
        """Persist (unless transient), apply to the context, publish. In that order:
        a watcher never sees an event that is not yet durable."""
        if is_transient(event):
            record = EventRecord(seq=0, session_id=self.id, ts=0.0, event=event)
        else:
            record = self.deps.store.append(self.id, event)
            self._conversation.apply(event)
        for listener in list(self._listeners):
            listener(record)
        return record

    def _set_status(self, status: SessionStatus) -> None:
        if status != self.status:
            self.status = status
            self.deps.store.set_status(self.id, status)
            self.record(StatusChanged(status=status))

    # ------------------------------------------------------------------ turns

    async def _work(self) -> None:
        """Run turns while inputs are waiting. An interrupt ends the running turn
        and this worker; what is still queued waits for the next input."""
        self._idle.clear()
        try:
            while not self._closed:
                inputs = [*self._inbox, *self._take_steers()]
                self._inbox.clear()
                if not inputs:
                    break
                self._set_status("running")
                self._ensure_kernel()
                for item in inputs:
                    self.record(item)
                await self._turn()
                if self._interrupting:
                    break
        finally:
            self._interrupting = False
            if not self._closed:
                try:
                    self._set_status("idle")
                except Exception:  # never mask what ended the worker
                    log.exception("session %s: could not record the idle status", self.id)
            self._idle.set()

    async def _turn(self) -> None:
        self._turns += 1
        turn = self._turns
        hooks = TurnHooks(
            model=self._call_model,
            request=self._request,
            execute=self._execute,
            steers=self._take_steers,
            cost=self.deps.cost,
            next_cell=self._next_cell,
            clock=self.deps.clock,
            limits=self.deps.limits,
            model_ref=self.model_ref,
            fenced=self.fenced,
        )
        ended: TurnEnded | None = None
        try:
            async for event in run_turn(turn, hooks):
                self.record(event)
                if isinstance(event, TurnEnded):
                    ended = event
        except asyncio.CancelledError:
            ended = TurnEnded(turn=turn, reason="interrupted", detail="interrupted by the user")
            self.record(ended)
            self.last_end = ended
            task = asyncio.current_task()
            if not self._interrupting or task is None:
                raise
            task.uncancel()  # the cancellation was ours and is handled here
            return
        except KernelError as exc:
            ended = TurnEnded(turn=turn, reason="internal_error", detail=str(exc))
            self.record(ended)
        except Exception as exc:  # a bug: end the turn with a reason, keep the session
            log.exception("session %s: turn %d failed", self.id, turn)
            ended = TurnEnded(
                turn=turn, reason="internal_error", detail=f"{type(exc).__name__}: {exc}"
            )
            self.record(ended)
        if ended is None:  # the loop's contract says this cannot happen; say so if it does
            ended = TurnEnded(
                turn=turn, reason="internal_error", detail="the turn ended without a reason"
            )
            self.record(ended)
        self.last_end = ended
        if ended.answer is not None:
            self.last_answer = ended.answer

    def _request(self) -> Request:
        return Request(
            model=self.deps.model_name,
            system=self._system,
            messages=self._conversation.snapshot(),
            tools=() if self.fenced else (PYTHON_TOOL,),
            cache_key=self.id,
        )

    def _call_model(self, request: Request) -> AsyncIterator[StreamEvent]:
        return with_retries(
            lambda: self.deps.call_model(request),
            max_retries=self.deps.max_retries,
            sleep=self.deps.retry_sleep,
        )

    def _take_steers(self) -> list[UserInput]:
        steers, self._steers = self._steers, []
        return steers

    def _next_cell(self) -> int:
        self._cells += 1
        return self._cells

    # ----------------------------------------------------------------- kernel

    def _ensure_kernel(self) -> None:
        """Start getting a kernel now, so it is ready when the first cell comes
        (the first model call is usually still in flight)."""
        if self._kernel_task is None:
            self._kernel_task = asyncio.create_task(
                self.deps.kernels.acquire(self.cwd), name=f"kernel {self.id}"
            )

    async def _kernel(self) -> Kernel:
        self._ensure_kernel()
        assert self._kernel_task is not None
        try:
            return await asyncio.shield(self._kernel_task)
        except KernelError:
            self._kernel_task = None
            raise

    async def _execute(self, cell: int, call_id: str, code: str, time_limit: float) -> CellFinished:
        kernel = await self._kernel()
        parts: list[OutputPart] = []

        def stream(part: OutputPart) -> None:
            parts.append(part)
            self.record(CellOutputEvent(cell=cell, stream=part.kind, text=part.text))

        try:
            output: CellOutput = await kernel.execute(code, timeout=time_limit, on_output=stream)
        except asyncio.CancelledError:
            # The kernel interrupts the cell itself; record what it printed so far,
            # so the model knows the cell ran (and may have had effects).
            note = "interrupted by the user; the cell may have partly run"
            partial = CellOutput(status="interrupted", parts=tuple(parts), note=note).text()
            self.deps.store.put_cell_output(self.id, cell, call_id, partial)
            shown, truncated = bound_text(partial, self.deps.limits.output_chars, ref=None)
            self.record(
                CellFinished(
                    cell=cell,
                    call_id=call_id,
                    status="interrupted",
                    output=shown,
                    chars=len(partial),
                    truncated=truncated,
                )
            )
            raise
        if output.status in ("timeout", "kernel_died") and output.note:
            self.record(
                KernelStatus(
                    state="restarted" if "restart" in output.note else "ready", detail=output.note
                )
            )
        text = output.text()
        shown, truncated = bound_text(text, self.deps.limits.output_chars, ref=f"_out[{cell}]")
        self.deps.store.put_cell_output(self.id, cell, call_id, text)
        if truncated:
            try:
                await kernel.set_output(cell, text)
            except KernelError:
                self.record(
                    Notice(
                        level="warning",
                        text=f"could not keep cell {cell}'s full output in the kernel",
                    )
                )
        status: CellStatus = output.status
        return CellFinished(
            cell=cell,
            call_id=call_id,
            status=status,
            output=shown,
            chars=len(text),
            truncated=truncated,
            duration=output.duration,
        )

    # -------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Stop any running turn and shut the kernel down. The history stays in the store."""
        self._closed = True  # before the interrupt, so no queued turn starts
        await self.interrupt()
        task, self._kernel_task = self._kernel_task, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        try:
            kernel = await task
        except (asyncio.CancelledError, KernelError):
            return
        await kernel.shutdown()


__all__ = ["KernelSource", "SendMode", "Session", "SessionDeps"]

"""One real ipykernel process per session, driven from asyncio.

:class:`Kernel` is what a session holds: it runs cells and keeps them within
their limits. The process itself (launch, exit watch, channels, stop) is a
:class:`~recursa.kernel.lifecycle.KernelProcess`; the messages travel on the
lean channels of :mod:`recursa.kernel.wire`. Model code runs only in that
process; what comes back is a :class:`CellOutput`, a pure value.

The guarantees a session relies on:

- The kernel's environment is exactly the mapping given (the allow-listed
  one from :func:`recursa.config.kernel_environment`) plus ``JPY_PARENT_PID``,
  which jupyter_client adds so the kernel exits with its parent.
- :meth:`Kernel.execute` returns for every cell: a cell past its limit is
  interrupted, and if it ignores the interrupt for ``interrupt_grace``
  seconds the kernel is restarted; a kernel that dies is noticed at once and
  restarted. Each such event is told in one line in ``CellOutput.note``, and
  ``CellOutput.restarted`` says whether the process was replaced.
- A cell whose caller is cancelled is stopped the same way, in a task the
  kernel owns: the cancellation reaches the caller at once, and the next
  request waits until the kernel is idle again (or restarted, which the next
  cell's note then tells). :meth:`Kernel.shutdown` ends that task too.
- One request at a time: cells, silent commands and restarts are serialized
  by a lock; :meth:`Kernel.interrupt`, :meth:`Kernel.restart` and
  :meth:`Kernel.shutdown` reach a running cell through a flag and a wakeup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from jupyter_core.paths import jupyter_runtime_dir

from recursa.errors import KernelError
from recursa.kernel.collect import DEFAULT_MAX_OUTPUT_CHARS, OnOutput, OutputCollector
from recursa.kernel.lifecycle import PAYLOAD_EXPR, KernelProcess, execute_content, find_reply
from recursa.kernel.types import CellOutput, ExecStatus
from recursa.kernel.wire import JSONDict

DEFAULT_STARTUP_TIMEOUT = 60.0
DEFAULT_INTERRUPT_GRACE = 3.0
"""Seconds a cell has to stop after an interrupt before the kernel is restarted."""
IDLE_AFTER_REPLY = 5.0
"""After the reply, how long to wait for ``status: idle`` (the end of output)
beyond the cell's own limit."""

StopReason = Literal["interrupt", "restart", "shutdown"]
"""What another task asked of a running cell."""
Stopping = Literal["timeout", "interrupt"]
"""Why a running cell was sent an interrupt."""

Replaced = Literal["died", "stuck", "requested"]
"""Why the process was replaced while a cell ran: it died, it ignored an
interrupt, or :meth:`Kernel.restart` was called."""

_STRENGTH: dict[StopReason | None, int] = {None: 0, "interrupt": 1, "restart": 2, "shutdown": 3}

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Run:
    """One cell in flight, shared by the task that runs it and its caller."""

    collector: OutputCollector
    replaced: Replaced | None = None
    exit: str = ""
    """How the process ended, when it died."""
    _abandoned: bool = False

    def abandon(self) -> None:
        """The caller was cancelled: nobody reads the outcome or the output."""
        self._abandoned = True
        self.collector.on_output = None

    def abandoned(self) -> bool:
        # A method, not an attribute: it changes while the task awaits.
        return self._abandoned


class Kernel:
    """A persistent IPython kernel in its own process.

    ``cwd`` is where the process starts, and where it starts again after a
    restart (:meth:`chdir` moves both). ``env`` is the whole environment of
    the process. Connection and log files live in ``runtime_dir`` (default:
    Jupyter's runtime directory); :attr:`connection_file` names the kernel's
    file, which exists while a process runs and keeps its path across
    restarts. ``max_output_chars`` bounds what one cell's output may hold in
    memory; ``interrupt_grace`` is how long an interrupted cell has to stop.

    Use ``async with Kernel(...) as kernel:`` or pair :meth:`start` with
    :meth:`shutdown`. A kernel is bound to the event loop that started it.
    """

    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str],
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        runtime_dir: Path | None = None,
        python: str = sys.executable,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        self._cwd = _absolute(cwd)
        self.interrupt_grace = interrupt_grace
        self.max_output_chars = max_output_chars
        runtime = Path(runtime_dir) if runtime_dir is not None else Path(jupyter_runtime_dir())
        self._proc = KernelProcess(
            env, python=python, runtime_dir=runtime, startup_timeout=startup_timeout
        )
        self._lock = asyncio.Lock()
        self._running = False
        self._stop: StopReason | None = None
        self._closed = False
        self._started = False
        self._carried = ""
        """Restarts not yet told to any caller (those after a cancelled cell),
        for the next cell's note."""
        self.restarts = 0
        """How many times the process was replaced (on request, timeout or death)."""

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def cwd(self) -> Path:
        return self._cwd

    @property
    def connection_file(self) -> Path:
        return self._proc.connection_file

    @property
    def startup_time(self) -> float | None:
        """Seconds the last start or restart took, from launch to ready."""
        return self._proc.startup_time

    def is_alive(self) -> bool:
        return self._proc.is_alive()

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the process and return once it answers and is bootstrapped.

        Raises :class:`KernelError` if it cannot be launched or is not ready
        within ``startup_timeout``; nothing is left running then. Calling it
        on a started kernel does nothing.
        """
        self._check_open()
        async with self._lock:
            self._check_open()
            if not self._started:
                await self._proc.launch(self._cwd)
                self._started = True

    async def restart(self) -> None:
        """Replace the process with a fresh one, ready on return (on a kernel
        never started, this starts it). A running cell is stopped and
        returns ``interrupted``."""
        self._check_open()
        generation = self.restarts
        self._request_stop("restart")
        async with self._lock:
            self._check_open()
            if self.restarts == generation:  # the running cell did not restart it already
                await self._restart_locked()

    async def shutdown(self) -> None:
        """Stop the process (politely when idle, then by force), close the
        channels and remove the kernel's files. Idempotent; a running cell
        returns ``interrupted``, and a cancelled cell still being stopped is
        ended first, so no task of this kernel outlives the call."""
        # A busy kernel does not act on a shutdown request (its main thread
        # is in the cell), so one with a running cell is killed at once.
        busy = self._running
        if not self._closed:
            self._request_stop("shutdown")
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            await self._proc.stop(graceful=not busy)

    async def interrupt(self) -> None:
        """Interrupt the running cell, which returns ``interrupted``; if it
        does not stop within ``interrupt_grace`` seconds the kernel is
        restarted. Does nothing when no cell runs."""
        self._request_stop("interrupt")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise KernelError("this kernel was shut down; start a new one")

    def _request_stop(self, reason: StopReason) -> None:
        # A stronger request replaces a weaker one (interrupt < restart < shutdown).
        if self._running and _STRENGTH[reason] > _STRENGTH[self._stop]:
            self._stop = reason
            if self._proc.channels is not None:
                self._proc.channels.wake()

    async def _restart_locked(self) -> None:
        await self._proc.stop(graceful=False, keep_connection_file=True)
        self.restarts += 1
        await self._proc.launch(self._cwd)
        self._started = True

    async def _ensure_alive(self) -> str:
        """Restart a dead kernel; return a note saying so, or ``""``."""
        if not self._started:
            raise KernelError("the kernel is not started")
        if self._proc.is_alive():
            return ""
        # Not even launched: an earlier restart failed, so this is another try.
        how = self._proc.exit_description() if self._proc.launched else "an earlier restart failed"
        await self._restart_locked()
        return (
            f"the kernel process had died since the last cell ({how}), so it was restarted "
            "before this cell ran; variables from earlier cells are gone"
        )

    # -- harness commands -------------------------------------------------------------

    async def chdir(self, cwd: Path) -> None:
        """Move the kernel into ``cwd`` (silently); restarts start there too.
        Raises :class:`KernelError` if the kernel cannot (no such directory)."""
        cwd = _absolute(cwd)
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_alive()
            await self._proc.silent(f"__import__('os').chdir({str(cwd)!r})")
            self._cwd = cwd

    async def set_output(self, cell: int, text: str) -> None:
        """Set ``_out[cell] = text`` in the kernel, silently: no output, no
        history, no execution count. Used when the output shown to the model
        was truncated, so the whole text stays reachable from code."""
        code = (
            "if not isinstance(globals().get('_out'), dict):\n"
            "    _out = {}\n"
            f"_out[{int(cell)}] = {PAYLOAD_EXPR}\n"
        )
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_alive()
            await self._proc.silent(code, payload=text)

    # -- cells ----------------------------------------------------------------------------

    # ``timeout`` is a limit that interrupts the kernel, not a cancel scope.
    async def execute(
        self,
        code: str,
        *,
        timeout: float,  # noqa: ASYNC109
        on_output: OnOutput | None = None,
    ) -> CellOutput:
        """Run one cell and return its outcome; never raises for the cell's sake.

        Output is collected in arrival order until the kernel reports idle
        and the reply is in. ``on_output`` sees each kept piece as it
        arrives, on the event loop: it must return quickly.
        Raises :class:`KernelError` only when the kernel cannot be used at
        all (not started, shut down, or a restart failed).

        If the caller is cancelled, the cancellation propagates at once and
        ``on_output`` is called no more. The cell goes on being stopped in a
        task the kernel owns, as if it had timed out: interrupted, and the
        kernel restarted if it is still busy ``interrupt_grace`` seconds
        later. Requests made meanwhile wait for that; the next cell's note
        tells of a restart it needed.
        """
        self._check_open()
        await self._lock.acquire()
        try:
            self._check_open()
            run = _Run(OutputCollector(max_chars=self.max_output_chars, on_output=on_output))
            task = asyncio.get_running_loop().create_task(
                self._execute_locked(code, timeout, run), name="recursa-kernel-cell"
            )
        except BaseException:
            self._lock.release()
            raise
        # The lock is the task's now: released once the task is done, even
        # if it is cancelled before it starts. A request that takes the lock
        # next therefore finds no task of an earlier cell still running.
        task.add_done_callback(self._release_lock)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._abandon(run, task)
            raise

    def _release_lock(self, task: asyncio.Task[CellOutput]) -> None:
        self._lock.release()

    async def _execute_locked(self, code: str, limit: float, run: _Run) -> CellOutput:
        before = await self._ensure_alive()
        untold = _join(self._carried, before)
        self._carried = ""
        if run.abandoned():  # cancelled while the kernel was restarted: run nothing
            self._carried = untold
            return CellOutput(status="interrupted", restarted=bool(untold))
        self._stop = None
        self._running = True
        try:
            out = await self._run_cell(code, limit, run)
        except BaseException:
            self._carried = untold  # not told: the caller gets an exception
            raise
        finally:
            self._running = False
            self._stop = None
        if run.abandoned():
            self._carried = _join(untold, _after_cancel(run))
        elif untold:
            out = replace(out, note=_join(untold, out.note), restarted=True)
        return out

    def _abandon(self, run: _Run, task: asyncio.Task[CellOutput]) -> None:
        """The caller of :meth:`execute` was cancelled: stop the cell, tell nobody."""
        run.abandon()
        if not task.done():
            self._request_stop("interrupt")
            task.add_done_callback(_log_failure)
            return
        # It ended just as the caller was cancelled; its outcome is lost.
        if task.cancelled() or task.exception() is not None:
            return
        if task.result().restarted and run.replaced != "requested":
            self._carried = _join(self._carried, _LOST_RESTART)

    async def _run_cell(self, code: str, limit: float, run: _Run) -> CellOutput:
        proc = self._proc
        channels = proc.channels
        assert channels is not None
        loop = asyncio.get_running_loop()
        collector = run.collector
        # Output of earlier requests (late iopub, stale replies) is not this cell's.
        while channels.recv_iopub() is not None or channels.recv_shell() is not None:
            pass
        started = loop.time()
        deadline = started + limit
        reply: JSONDict | None = None
        idle = False
        stopping: Stopping | None = None
        give_up_at = float("inf")  # when an interrupted cell is declared stuck

        def finish(status: ExecStatus, note: str = "") -> CellOutput:
            count = reply.get("execution_count") if reply is not None else None
            return CellOutput(
                status=status,
                parts=collector.parts(),
                execution_count=count if isinstance(count, int) else None,
                duration=loop.time() - started,
                note=_join(note, collector.note()),
                restarted=run.replaced is not None,
            )

        with channels.request():
            msg_id = channels.send("execute_request", execute_content(code, silent=False))
            try:
                while True:
                    while (frames := channels.recv_iopub()) is not None:
                        msg = channels.parse(frames, want=msg_id)
                        if msg is None or msg.parent_id != msg_id:
                            continue
                        if msg.msg_type == "status":
                            idle = idle or msg.content.get("execution_state") == "idle"
                        else:
                            collector.add(msg)
                    if reply is None:
                        reply = find_reply(channels, msg_id)
                        if reply is not None:
                            deadline = max(deadline, loop.time() + IDLE_AFTER_REPLY)
                    now = loop.time()
                    if reply is not None and (idle or now >= deadline):
                        return finish(*_settled(reply, stopping, limit))
                    if not proc.is_alive():
                        return finish(*await self._after_death(stopping, limit, run))
                    if self._stop == "shutdown":
                        return finish("interrupted", "the kernel was shut down while the cell ran")
                    if self._stop == "restart":
                        run.replaced = "requested"
                        await self._restart_locked()
                        return finish("interrupted", _RESTARTED_ON_REQUEST)
                    if reply is None:
                        if stopping is None and (self._stop == "interrupt" or now >= deadline):
                            stopping = "interrupt" if self._stop == "interrupt" else "timeout"
                            await proc.interrupt()
                            give_up_at = now + self.interrupt_grace
                        elif stopping is not None and now >= give_up_at:
                            run.replaced = "stuck"
                            await self._restart_locked()
                            return finish(*_stuck(stopping, limit))
                    # Until the reply, an interrupted cell is watched against its
                    # grace; after it, only the wait for idle is bounded.
                    wake_at = give_up_at if stopping is not None and reply is None else deadline
                    await channels.wait(min(wake_at, proc.next_check(now)))
            except asyncio.CancelledError:
                # Only the event loop's own teardown cancels this task (a
                # caller's cancellation is shielded): do not leave it running.
                if stopping is None:
                    with contextlib.suppress(Exception):
                        await proc.interrupt()
                raise

    async def _after_death(
        self, stopping: Stopping | None, limit: float, run: _Run
    ) -> tuple[ExecStatus, str]:
        how = self._proc.exit_description()
        run.replaced, run.exit = "died", how
        await self._restart_locked()
        gone = "so it was restarted; all variables are gone"
        if stopping == "timeout":
            return "timeout", (
                f"the cell ran past its {_seconds(limit)} limit and the kernel died "
                f"when interrupted ({how}), {gone}"
            )
        if stopping == "interrupt":
            return "interrupted", f"the kernel died when the cell was interrupted ({how}), {gone}"
        return "kernel_died", f"the kernel process died while the cell ran ({how}), {gone}"


_RESTARTED_ON_REQUEST = (
    "the kernel was restarted on request while the cell ran; all variables are gone"
)
_LOST_RESTART = (
    "the kernel was restarted during or before the previous cell, whose outcome was lost "
    "when it was cancelled; variables from earlier cells are gone"
)
_AFTER_CANCEL = (
    "so the kernel was restarted before this cell ran; variables from earlier cells are gone"
)


def _after_cancel(run: _Run) -> str:
    """What the next cell is told of a restart that a cancelled cell needed.
    A restart someone asked for is theirs to tell."""
    if run.replaced == "stuck":
        return f"the previous cell was cancelled but did not stop when interrupted, {_AFTER_CANCEL}"
    if run.replaced == "died":
        return (
            f"the kernel died ({run.exit}) while the previous, cancelled cell was being "
            f"stopped, {_AFTER_CANCEL}"
        )
    return ""


def _log_failure(task: asyncio.Task[CellOutput]) -> None:
    # An abandoned cell's failure (a restart that failed) has no caller to
    # reach; the next request finds the kernel not running and restarts it.
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("stopping a cancelled cell failed: %s", exc)


def _settled(reply: JSONDict, stopping: Stopping | None, limit: float) -> tuple[ExecStatus, str]:
    """Status and note of a cell whose reply came."""
    if stopping == "timeout":
        return "timeout", (
            f"the cell ran past its {_seconds(limit)} limit and was interrupted; variables are kept"
        )
    if stopping == "interrupt":
        return "interrupted", "the cell was interrupted on request; variables are kept"
    status = reply.get("status")
    if status == "ok":
        return "ok", ""
    if status == "aborted":
        return "error", "the kernel aborted the cell without running it"
    return "error", ""


def _stuck(stopping: Stopping, limit: float) -> tuple[ExecStatus, str]:
    """Status and note of a cell that ignored its interrupt."""
    if stopping == "timeout":
        return "timeout", (
            f"the cell ran past its {_seconds(limit)} limit and did not stop when interrupted, "
            "so the kernel was restarted; all variables are gone"
        )
    return "interrupted", (
        "the cell was interrupted on request but did not stop, "
        "so the kernel was restarted; all variables are gone"
    )


def _absolute(path: Path) -> Path:
    # Relative to this process's directory, like the kernel's first start.
    return Path(os.path.abspath(path))


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


__all__ = ["DEFAULT_INTERRUPT_GRACE", "DEFAULT_STARTUP_TIMEOUT", "IDLE_AFTER_REPLY", "Kernel"]

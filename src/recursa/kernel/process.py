"""One real ipykernel process per session, driven from asyncio.

:class:`Kernel` is what a session holds: it runs cells and keeps them within
their limits. The process itself (launch, exit watch, channels, stop) is a
:class:`~recursa.kernel.lifecycle.KernelProcess`; the messages travel on the
channels of :mod:`recursa.kernel.wire` (jupyter_client's ``AsyncKernelClient``).
Model code runs only in that process; what comes back is a :class:`CellOutput`,
a pure value.

The guarantees a session relies on:

- The kernel's environment is exactly the mapping given (the allow-listed
  one from :func:`recursa.config.kernel_environment`) and what
  :meth:`Kernel.export_env` added since, for every process a restart makes too.
- The process outlives this one: it leads its own session and does not
  watch its parent, and its connection file stays while it runs.
  :meth:`Kernel.attach` takes it over from a later process (a daemon
  restarted after a crash), interrupting the cell it may still be running
  for nobody; an attached kernel is then like any other.
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
import logging
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal, Self

from jupyter_core.paths import jupyter_runtime_dir

from recursa.errors import KernelError
from recursa.kernel import notes
from recursa.kernel.cell import Run, StopReason, run_cell
from recursa.kernel.collect import DEFAULT_MAX_OUTPUT_CHARS, OnOutput, OutputCollector
from recursa.kernel.commands import HarnessCommands, absolute
from recursa.kernel.forkserver import ForkServers
from recursa.kernel.gateway import GatewayClient
from recursa.kernel.lifecycle import KernelProcess
from recursa.kernel.relay import ApiCall, ApiTransport, Relay
from recursa.kernel.remote import GATEWAY_PREFIX, GatewayProcess
from recursa.kernel.sandbox import NO_SANDBOX, SandboxPolicy
from recursa.kernel.types import CellOutput

DEFAULT_STARTUP_TIMEOUT = 60.0
DEFAULT_INTERRUPT_GRACE = 3.0
"""Seconds a cell has to stop after an interrupt before the kernel is restarted."""
ATTACH_TIMEOUT = 3.0
"""Seconds a kernel being reattached has to answer on its control channel."""
IDLE_PROBE = 0.2
"""Seconds a reattached kernel has to answer on shell before it is taken to be
running a cell (an idle one answers within milliseconds; a busy one only
once the cell ends). Taking an idle kernel for a busy one costs little: it
is interrupted, which an idle ipykernel ignores, and answers at once. This is
on the path of every recovery that finds a cell cut short."""

AttachOutcome = Literal["idle", "interrupted", "restarted"]
"""What :meth:`Kernel.attach` found: an idle kernel, one running a cell (which
was interrupted), or one that had to be replaced."""

_STRENGTH: dict[StopReason | None, int] = {None: 0, "interrupt": 1, "restart": 2, "shutdown": 3}

log = logging.getLogger(__name__)


class Kernel(HarnessCommands):
    """A persistent IPython kernel in its own process.

    ``cwd`` is where the process starts, and where it starts again after a
    restart (:meth:`chdir` moves both). ``env`` is the whole environment of
    the process. Connection and log files live in ``runtime_dir`` (default:
    Jupyter's runtime directory); :attr:`connection_file` names the kernel's
    file, which exists while a process runs and keeps its path across
    restarts (``connection_file`` chooses it; it then sets the runtime
    directory). ``max_output_chars`` bounds what one cell's output may hold
    in memory; ``interrupt_grace`` is how long an interrupted cell has to stop.
    ``sandbox`` confines every process (:mod:`recursa.kernel.sandbox`): it
    may write only in ``cwd`` as first given (its workspace, for good) and
    reaches the kernel API only at ``api_socket``. With ``forks`` its
    processes are forked from a pre-imported zygote where one works
    (:mod:`recursa.kernel.forkserver`), else launched the usual way.
    ``api_transport`` is how its code reaches the kernel API: ``"socket"``
    (the socket and token :meth:`export_env` gives it) or ``"comm"`` (its
    own channels, served by :meth:`serve_api`; :mod:`recursa.kernel.relay`).

    Use ``async with Kernel(...) as kernel:`` or pair :meth:`start` with
    :meth:`shutdown`. A kernel is bound to the event loop that started it.
    The harness's silent commands (:meth:`chdir`, :meth:`export_env`,
    :meth:`snapshot`, :meth:`restore`, ...) are those of
    :class:`~recursa.kernel.commands.HarnessCommands`.
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
        connection_file: Path | None = None,
        sandbox: SandboxPolicy = NO_SANDBOX,
        api_socket: Path | None = None,
        forks: ForkServers | None = None,
        gateway: GatewayClient | None = None,
        kernel_id: str | None = None,
        api_transport: ApiTransport = "socket",
    ) -> None:
        self._cwd = absolute(cwd)
        # A gateway's kernel has no socket back to the daemon: its API is its channels.
        remote = gateway is not None
        self._relay = Relay() if api_transport == "comm" or remote else None
        self.interrupt_grace = interrupt_grace
        self.max_output_chars = max_output_chars
        self._proc: KernelProcess | GatewayProcess
        if gateway is not None:
            self._proc = GatewayProcess(
                gateway,
                startup_timeout=startup_timeout,
                kernel_id=kernel_id,
                workspace=self._cwd,
                relay=self._relay,
            )
        else:
            runtime = Path(runtime_dir) if runtime_dir is not None else Path(jupyter_runtime_dir())
            self._proc = KernelProcess(
                env,
                python=python,
                runtime_dir=runtime,
                startup_timeout=startup_timeout,
                connection_file=connection_file,
                sandbox=sandbox,
                api_socket=api_socket,
                workspace=self._cwd,
                forks=forks,
                relay=self._relay,
            )
        self._lock = asyncio.Lock()
        self._running = False
        self._stop: StopReason | None = None
        self._closed = False
        self._stopped = False
        """:meth:`shutdown` has stopped the process, all of it (not cancelled)."""
        self._started = False
        self._carried = ""
        """Restarts not yet told to any caller (those after a cancelled cell),
        for the next cell's note."""
        self.restarts = 0
        """How many times the process was replaced (on request, timeout or death)."""
        self.attach_outcome: AttachOutcome | None = None
        """For a kernel from :meth:`attach`: what it was doing when taken over."""

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
    def kernel_id(self) -> str | None:
        """The gateway's id of this kernel; None for a local kernel."""
        return self._proc.kernel_id if isinstance(self._proc, GatewayProcess) else None

    @property
    def backend(self) -> str:
        """Where the kernel runs: ``local`` or ``gateway``."""
        return "gateway" if isinstance(self._proc, GatewayProcess) else "local"

    @property
    def workspace(self) -> Path | None:
        """The directory the kernel may write when sandboxed (its first ``cwd``)."""
        return self._proc.workspace

    @property
    def sandbox(self) -> SandboxPolicy:
        return self._proc.sandbox

    @property
    def api_socket(self) -> Path | None:
        """The kernel-API socket its sandbox was bound to."""
        return self._proc.api_socket

    @property
    def api_transport(self) -> ApiTransport:
        return "socket" if self._relay is None else "comm"

    def serve_api(self, call: ApiCall | None) -> None:
        """Serve a ``"comm"`` kernel's API requests through ``call``, bound to
        its session (None: refuse them), from now on and across restarts."""
        if self._relay is None:
            raise KernelError("this kernel reaches the kernel API by its socket")
        self._relay.call = call

    @property
    def forked(self) -> bool:
        """The current process was forked from a fork server (not exec'd)."""
        return self._proc.forked

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
                await self._launch()
                self._started = True

    @classmethod
    async def attach(
        cls,
        connection_file: Path,
        pid: int,
        cwd: Path,
        env: Mapping[str, str],
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        python: str = sys.executable,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        answer_within: float = ATTACH_TIMEOUT,
        sandbox: SandboxPolicy = NO_SANDBOX,
        api_socket: Path | None = None,
        forks: ForkServers | None = None,
        gateway: GatewayClient | None = None,
        api_transport: ApiTransport = "socket",
    ) -> Kernel:
        """Take over the live kernel ``pid`` that an earlier process started
        with ``connection_file``; its namespace is untouched.

        The pid must still be that kernel (not a reused pid: its command line
        names the file), and the kernel must answer on its control channel
        within ``answer_within`` seconds; otherwise :class:`KernelError`, in one
        line (a kernel that is there but silent is stopped first). A kernel
        still running a cell, whose result nobody will read now, is
        interrupted; if it does not stop within ``interrupt_grace`` seconds
        it is restarted, and the next cell's output says so
        (``restarted=True``). :attr:`attach_outcome` tells which.

        The kernel is then like one from :meth:`start`: ``cwd`` and ``env``
        (the session's allow-listed environment) are what its restarts get,
        and its death is noticed at once; its restarts run in ``sandbox``,
        with ``cwd`` as their workspace.

        With ``gateway``, ``connection_file`` is ``gateway:<kernel id>`` (what
        :attr:`connection_file` says of a gateway kernel) and ``pid`` is not used.
        """
        kernel_id = None
        if gateway is not None:
            kernel_id = str(connection_file).removeprefix(GATEWAY_PREFIX)
        kernel = cls(
            cwd,
            env,
            startup_timeout=startup_timeout,
            python=python,
            interrupt_grace=interrupt_grace,
            max_output_chars=max_output_chars,
            connection_file=Path(connection_file),
            sandbox=sandbox,
            api_socket=api_socket,
            forks=forks,
            gateway=gateway,
            kernel_id=kernel_id,
            api_transport=api_transport,
        )
        async with kernel._lock:
            await kernel._take_over(pid, answer_within)
        return kernel

    async def _take_over(self, pid: int, answer_within: float) -> None:
        proc = self._proc
        loop = asyncio.get_running_loop()
        if isinstance(proc, GatewayProcess):
            assert proc.kernel_id is not None
            await proc.adopt(proc.kernel_id, answer_within)
        else:
            await proc.adopt(pid, answer_within)
        if self._relay is not None:
            self._relay.reset_kernel()  # its calls to the daemon that died get no reply
        self._started = True
        try:
            if await proc.answers_shell(loop.time() + IDLE_PROBE):
                self.attach_outcome = "idle"
                return
            if proc.is_alive():
                log.info("kernel %d was running a cell when reattached; interrupting it", pid)
                await proc.interrupt()
                if await proc.answers_shell(loop.time() + self.interrupt_grace):
                    self.attach_outcome = "interrupted"
                    return
            how: Literal["stuck", "died"] = "stuck" if proc.is_alive() else "died"
            await self._restart_locked()
            self._carried = notes.after_attach(how, self.interrupt_grace)
            self.attach_outcome = "restarted"
        except asyncio.CancelledError:
            proc.let_go()  # it runs on, for whoever attaches next
            raise
        except BaseException:
            self._closed = True
            await proc.stop(graceful=False)
            raise

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
        ended first, so no task of this kernel outlives the call.

        Cancelled once it has begun to stop the process, it still ends it
        (see :meth:`KernelProcess.stop`); cancelled before (while an earlier
        request held the kernel), the process runs on, and a later call
        stops it.
        """
        # A busy kernel does not act on a shutdown request (its main thread
        # is in the cell), so one with a running cell is killed at once.
        busy = self._running
        if not self._closed:
            self._request_stop("shutdown")
        async with self._lock:
            if self._stopped:
                return
            self._closed = True
            await self._proc.stop(graceful=not busy)
            if self._relay is not None:
                await self._relay.aclose()
            self._stopped = True

    async def interrupt(self) -> None:
        """Interrupt the running cell, which returns ``interrupted``; if it
        does not stop within ``interrupt_grace`` seconds the kernel is
        restarted. Does nothing when no cell runs."""
        self._request_stop("interrupt")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
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
        await self._launch()
        self._started = True

    async def _launch(self) -> None:
        """Start the process in the kernel's directory. A local process starts
        there; a gateway's kernel starts where the gateway says, and is moved
        (the directory made on its host when missing: README, gateway kernels)."""
        await self._proc.launch(self._cwd)
        if isinstance(self._proc, GatewayProcess):
            where = str(self._cwd)
            try:
                await self._command(
                    f"could not move the kernel to {where}", "chdir", path=where, create=True
                )
            except BaseException:
                await self._proc.stop(graceful=False)
                raise

    async def _ensure_alive(self) -> str:
        """Restart a dead kernel; return a note saying so, or ``""``."""
        if not self._started:
            raise KernelError("the kernel is not started")
        if self._proc.is_alive():
            return ""
        if isinstance(self._proc, GatewayProcess) and await self._proc.reconnect():
            return ""  # only its connection had closed: the kernel lives on
        # Not even launched: an earlier restart failed, so this is another try.
        how = self._proc.exit_description() if self._proc.launched else "an earlier restart failed"
        await self._restart_locked()
        return (
            f"the kernel process had died since the last cell ({how}), so it was restarted "
            "before this cell ran; variables from earlier cells are gone"
        )

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
            run = Run(OutputCollector(max_chars=self.max_output_chars, on_output=on_output))
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

    async def _execute_locked(self, code: str, limit: float, run: Run) -> CellOutput:
        before = await self._ensure_alive()
        untold = notes.join(self._carried, before)
        self._carried = ""
        if run.abandoned():  # cancelled while the kernel was restarted: run nothing
            self._carried = untold
            return CellOutput(status="interrupted", restarted=bool(untold))
        self._stop = None
        self._running = True
        try:
            out = await run_cell(
                self._proc,
                code,
                limit,
                run,
                grace=self.interrupt_grace,
                requested=lambda: self._stop,
                restart=self._restart_locked,
            )
        except BaseException:
            self._carried = untold  # not told: the caller gets an exception
            raise
        finally:
            self._running = False
            self._stop = None
        if run.abandoned():
            self._carried = notes.join(untold, notes.after_cancel(run.replaced, run.exit))
        elif untold:
            out = replace(out, note=notes.join(untold, out.note), restarted=True)
        return out

    def _abandon(self, run: Run, task: asyncio.Task[CellOutput]) -> None:
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
            self._carried = notes.join(self._carried, notes.LOST_RESTART)


def _log_failure(task: asyncio.Task[CellOutput]) -> None:
    # An abandoned cell's failure (a restart that failed) has no caller to
    # reach; the next request finds the kernel not running and restarts it.
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("stopping a cancelled cell failed: %s", exc)


__all__ = [
    "ATTACH_TIMEOUT",
    "DEFAULT_INTERRUPT_GRACE",
    "DEFAULT_STARTUP_TIMEOUT",
    "IDLE_PROBE",
    "AttachOutcome",
    "Kernel",
]

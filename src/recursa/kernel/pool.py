"""Spare kernels kept warm, so a new session does not wait for a kernel to boot.

A kernel takes about half a second to start; a session that gets one from the
pool waits only for a silent ``chdir``. The pool owns its background tasks
(run under a :class:`~recursa.supervisor.Supervisor`: its own, or a group of
its owner's) and its spare kernels: :meth:`KernelPool.aclose` cancels the one
and shuts down the other, so nothing outlives it. A kernel handed out by :meth:`acquire` or
:meth:`attach` belongs to the caller, who shuts it down; it outlives this
process if that dies first, and a later pool can :meth:`attach` to it. Spares
(and a kernel on its way out) outlive a process killed outright as well; a
later pool on the same directory stops them (:meth:`stop_orphans`).

Under a sandbox a kernel's workspace (the one directory it may write) and
the kernel-API socket's directory are fixed when it is launched. A spare is
then launched for the workspace of the last kernel handed out (none before
the first), and handed out only to a caller that wants that very workspace
while the API is where it was bound; anyone else gets a kernel launched for
them. A spare holds no token (the session exports one once it has the
kernel), and nothing else can reach it: its sockets are in its own directory,
which no sandboxed kernel sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Self

from recursa.errors import KernelError
from recursa.kernel.collect import DEFAULT_MAX_OUTPUT_CHARS
from recursa.kernel.commands import absolute
from recursa.kernel.forkserver import ForkServers
from recursa.kernel.gateway import GatewayClient
from recursa.kernel.orphans import stop_orphans
from recursa.kernel.process import DEFAULT_INTERRUPT_GRACE, DEFAULT_STARTUP_TIMEOUT, Kernel
from recursa.kernel.relay import ApiTransport
from recursa.kernel.sandbox import NO_SANDBOX, SandboxPolicy
from recursa.supervisor import Supervisor

log = logging.getLogger(__name__)


class KernelPool:
    """Keeps up to ``size`` started kernels ready to hand out.

    Spares start in ``runtime_dir`` (where their connection files also live)
    with environment ``env``, and move to the caller's directory on
    :meth:`acquire`. Every kernel the pool hands out, attached ones included,
    keeps ``env`` (the session's allow-list) for all its restarts. The other
    options are passed to each :class:`Kernel`. Filling happens in background
    tasks under ``tasks`` (which :meth:`aclose` closes; default: a supervisor
    of the pool's own); a spare that fails to start is logged and not retried until the
    next :meth:`acquire`, so a broken interpreter cannot make the pool spin.
    Every kernel runs in ``sandbox``, reaching the kernel API at ``api_socket``
    (:meth:`set_api_socket` changes it for the kernels launched after).
    With ``fork_server`` kernels are forked from pre-imported zygotes, one per
    workspace and binding (:mod:`recursa.kernel.forkserver`), where that works.
    With ``gateway`` every kernel is one of that Jupyter gateway's
    (:mod:`recursa.kernel.remote`): no fork server, no local sandbox.
    ``api_transport`` is how its kernels reach the kernel API (see :class:`Kernel`).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        size: int = 1,
        runtime_dir: Path,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        python: str = sys.executable,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        tasks: Supervisor | None = None,
        sandbox: SandboxPolicy = NO_SANDBOX,
        api_socket: Path | None = None,
        fork_server: bool = False,
        gateway: GatewayClient | None = None,
        api_transport: ApiTransport = "socket",
    ) -> None:
        self.api_transport: ApiTransport = api_transport
        """How its kernels reach the kernel API (:class:`Kernel`'s ``api_transport``)."""
        if size < 0:
            raise ValueError("size must be >= 0")
        self._env = dict(env)
        self._size = size
        self._runtime_dir = Path(runtime_dir)
        self._startup_timeout = startup_timeout
        self._python = python
        self._interrupt_grace = interrupt_grace
        self._max_output_chars = max_output_chars
        self._spares: list[Kernel] = []
        self._tasks = tasks or Supervisor("kernel pool", logger=log)
        self._filling: set[asyncio.Task[None]] = set()
        """The starts in flight (their tasks), which callers wait on."""
        self._waiting = 0
        """Callers of :meth:`acquire` waiting for a start in flight: each
        counts on one of them."""
        self._leaving: set[Kernel] = set()
        """Spares discarded and not yet known to be stopped: a discard cancelled
        by :meth:`aclose` (even before it began) must not leave one running."""
        self._closed = False
        self._gateway = gateway
        if gateway is not None:
            # The gateway's host runs and confines its kernels, which reach the
            # kernel API over their own channels (no socket back to this host).
            fork_server, sandbox = False, NO_SANDBOX
            self.api_transport = "comm"
        self._forks = ForkServers(self._runtime_dir, self._env) if fork_server else None
        self._sandbox = sandbox
        self._api_socket = api_socket
        self._spare_workspace: Path | None = None if sandbox.enabled else self._runtime_dir
        """Where spares are launched: the runtime directory when unconfined
        (each moves to its caller's directory), else the last workspace asked for."""

    @property
    def sandbox(self) -> SandboxPolicy:
        return self._sandbox

    def set_api_socket(self, api_socket: Path | None) -> None:
        """Kernels launched from now on reach the kernel API at ``api_socket``;
        spares bound to another are replaced."""
        if api_socket == self._api_socket:
            return
        self._api_socket = api_socket
        if self._sandbox.enabled and not self._closed:
            self._discard_unfit()
            self._top_up()

    def expect(self, workspace: Path) -> None:
        """Keep spares for ``workspace`` from now on (under a sandbox; without
        one every spare fits every caller): what :meth:`acquire` learns from
        its callers, told ahead of the first."""
        self._check_open()
        if self._sandbox.enabled and self._spare_workspace != absolute(workspace):
            self._spare_workspace = absolute(workspace)
            self._discard_unfit()
            self._top_up()

    @property
    def ready(self) -> int:
        """How many started kernels are waiting to be acquired."""
        return len(self._spares)

    async def start(self) -> None:
        """Begin starting spares in the background; returns at once."""
        self._check_open()
        self._top_up()

    async def fill(self) -> None:
        """Start spares and return once the pool holds ``size`` ready kernels
        (or the starts in flight have ended, if some failed)."""
        self._check_open()
        self._top_up()
        while self._filling and len(self._spares) < self._size:
            await asyncio.wait(set(self._filling), return_when=asyncio.FIRST_COMPLETED)

    async def acquire(self, cwd: Path) -> Kernel:
        """A started kernel whose working directory is ``cwd``.

        Takes a spare when one is ready; otherwise waits for a spare already
        starting (whichever is ready first), unless every start in flight is
        already awaited by another caller; otherwise starts a kernel
        directly. A spare taken is replaced in the background. Raises
        :class:`KernelError` if no kernel can be started. Under a sandbox only
        a spare bound to ``cwd`` is taken (see the module docstring).
        """
        self._check_open()
        cwd = Path(cwd)
        if not cwd.is_dir():
            # Checked here so that a bad path does not cost a warm spare.
            raise KernelError(f"cannot start a kernel in {cwd}: not a directory")
        if self._sandbox.enabled and self._spare_workspace != absolute(cwd):
            self._spare_workspace = absolute(cwd)
            self._discard_unfit()
        kernel = await self._take_spare()
        self._top_up()
        if kernel is None:
            kernel = self._new_kernel(cwd)
            await kernel.start()
            return kernel
        try:
            await kernel.chdir(cwd)
        except BaseException:
            await kernel.shutdown()
            raise
        return kernel

    async def attach(self, connection_file: Path, pid: int, cwd: Path) -> Kernel:
        """The live kernel ``pid`` that an earlier process started with
        ``connection_file``, taken over with its namespace untouched; its
        restarts start in ``cwd`` with this pool's environment. A cell it was
        still running for nobody is interrupted (see :meth:`Kernel.attach`).
        Raises :class:`KernelError`, in one line, if it is gone or does not answer.
        """
        self._check_open()
        return await Kernel.attach(
            Path(connection_file),
            pid,
            Path(cwd),
            self._env,
            startup_timeout=self._startup_timeout,
            python=self._python,
            interrupt_grace=self._interrupt_grace,
            max_output_chars=self._max_output_chars,
            sandbox=self._sandbox,
            api_socket=self._api_socket,
            forks=self._forks,
            gateway=self._gateway,
            api_transport=self.api_transport,
        )

    async def stop_orphans(self, *, keep: Collection[Path]) -> list[int]:
        """Kill the kernels of this pool's directory that an earlier process
        launched and left to nobody (its spares, a kernel it was handing out),
        and remove their files; ``keep`` are connection files still held
        (by sessions that reattach them). See :mod:`recursa.kernel.orphans`.
        Returns the pids killed."""
        self._check_open()
        return await stop_orphans(self._runtime_dir, keep=keep)

    async def _take_spare(self) -> Kernel | None:
        """A live spare: one ready, else the first of the starts in flight that
        no other caller counts on. ``None`` when there is none to wait for."""
        while True:
            self._check_open()
            while self._spares:
                spare = self._spares.pop(0)
                if spare.is_alive() and self._fits(spare):
                    return spare
                # It died while waiting (killed from outside, out of memory),
                # or was bound elsewhere while it started.
                self._leaving.add(spare)
                await spare.shutdown()
                self._leaving.discard(spare)
            if len(self._filling) <= self._waiting:
                return None
            # A start that ends appends its kernel to the spares before its
            # task is done; one that fails appends nothing, and the loop then
            # waits for another or gives up.
            self._waiting += 1
            try:
                await asyncio.wait(set(self._filling), return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._waiting -= 1

    async def aclose(self) -> None:
        """Cancel the background starts and discards, and shut down every spare
        and every discarded kernel not yet stopped: no kernel of the pool's
        outlives the call. Idempotent."""
        self._closed = True
        # A cancelled start shuts its own half-started kernel down; a cancelled
        # discard may not have begun, so its kernel is shut down here.
        await self._tasks.aclose()
        spares, self._spares = self._spares + list(self._leaving), []
        self._leaving.clear()
        await asyncio.gather(*(k.shutdown() for k in spares), return_exceptions=True)
        if self._gateway is not None:
            await self._gateway.aclose()
        if self._forks is not None:
            # Kernels handed out live on; their zygotes stay until they end,
            # and their restarts are launched the usual way.
            await self._forks.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise KernelError("the kernel pool is closed")

    def _new_kernel(self, cwd: Path) -> Kernel:
        return Kernel(
            cwd,
            self._env,
            startup_timeout=self._startup_timeout,
            runtime_dir=self._runtime_dir,
            python=self._python,
            interrupt_grace=self._interrupt_grace,
            max_output_chars=self._max_output_chars,
            sandbox=self._sandbox,
            api_socket=self._api_socket,
            forks=self._forks,
            gateway=self._gateway,
            api_transport=self.api_transport,
        )

    def _fits(self, kernel: Kernel) -> bool:
        """Whether a spare may go to the caller that wants the current binding."""
        if not self._sandbox.enabled:
            return True
        bound = (kernel.workspace, kernel.api_socket)
        return bound == (self._spare_workspace, self._api_socket)

    def _discard_unfit(self) -> None:
        """Shut down, in the background, the spares bound to what is no longer wanted."""
        unfit = [k for k in self._spares if not self._fits(k)]
        self._spares = [k for k in self._spares if self._fits(k)]
        for kernel in unfit:
            self._leaving.add(kernel)
            self._tasks.start(self._discard(kernel), name="recursa-kernel-pool-discard")

    async def _discard(self, kernel: Kernel) -> None:
        await kernel.shutdown()
        # Not on a cancellation: aclose() then finishes the shutdown.
        self._leaving.discard(kernel)

    def _top_up(self) -> None:
        if self._spare_workspace is None:
            return  # sandboxed, and no workspace asked for yet
        missing = self._size - len(self._spares) - len(self._filling)
        for _ in range(max(missing, 0)):
            task = self._tasks.start(self._start_spare(), name="recursa-kernel-pool-fill")
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _start_spare(self) -> None:
        self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        assert self._spare_workspace is not None
        kernel = self._new_kernel(self._spare_workspace)
        try:
            await kernel.start()
        except KernelError as exc:
            log.warning("a spare kernel failed to start: %s", exc)
            return
        except asyncio.CancelledError:
            # start() already stopped the half-started process; make sure.
            with contextlib.suppress(Exception):
                await kernel.shutdown()
            raise
        if self._closed:
            await kernel.shutdown()
        else:
            self._spares.append(kernel)


__all__ = ["KernelPool"]

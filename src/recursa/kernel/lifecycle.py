"""The kernel process: launched or adopted, watched, connected and stopped.

:class:`KernelProcess` is the layer under :class:`recursa.kernel.Kernel`. It
holds one process at a time (a restart is a stop and a launch), and the
channels to it. It knows nothing of cells, limits or notes.

A process is launched by ``jupyter_client``'s :class:`AsyncKernelManager`
from a fixed command line, in its own session and *independent*: it outlives
the process that launched it, and its connection file stays while it runs.
A later process (a daemon restarted after a crash) adopts it from that file
and its pid (:meth:`KernelProcess.adopt`). Either way a
:class:`~recursa.kernel.watch.ProcessWatch` notices its exit at once (a pidfd
on Linux, which works for processes that are not our children), signals its
process group, and reaps it when we are its parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from jupyter_client.manager import AsyncKernelManager

from recursa.errors import KernelError
from recursa.kernel.driver import ChannelDriver
from recursa.kernel.forkserver import ForkServer, ForkServers
from recursa.kernel.launch import (
    IPC_NAME,
    kernel_dir,
    kernel_dir_of,
    make_manager,
)
from recursa.kernel.limits import release_limits
from recursa.kernel.orphans import connection_name
from recursa.kernel.relay import Relay
from recursa.kernel.sandbox import (
    NO_SANDBOX,
    KernelView,
    SandboxPolicy,
    connection_argument,
    interpreter_paths,
    launch_prefix,
    sandbox_env,
)
from recursa.kernel.watch import DEATH_POLL_INTERVAL, ProcessWatch
from recursa.kernel.wire import Channels, execute_content

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

SHUTDOWN_GRACE = 2.0
"""Seconds a kernel has to exit after a shutdown request before it is killed."""
KILL_WAIT = 5.0
_PARENT_VARIABLES = ("JPY_PARENT_PID", "JPY_INTERRUPT_EVENT", "IPY_INTERRUPT_EVENT")
"""Set in a daemon that runs inside a Jupyter kernel; they would tie our kernels
to it. Never passed on."""
_CONNECTION_KEYS = ("transport", "ip", "key", "shell_port", "iopub_port", "control_port")

log = logging.getLogger(__name__)


class KernelProcess(ChannelDriver):
    """At most one live kernel process, and the channels to it.

    Invariants: :attr:`channels` is set exactly while a process (launched or
    adopted) is being used; the connection file keeps its path across
    restarts, and exists while a process runs; :meth:`stop` leaves no
    process, no socket and (unless told to keep the connection file for a
    restart) no file behind.

    ``connection_file`` names the file of a kernel to adopt; by default a
    new name in ``runtime_dir`` is made up. Each process runs under
    ``sandbox`` (:mod:`recursa.kernel.sandbox`), bound to the workspace of
    its first launch and to ``api_socket`` (the kernel API's socket);
    its sockets are in its own directory (:attr:`kernel_dir`). With ``relay``
    the kernel API goes over the kernel's own channels: every process is
    bootstrapped for it, and the relay serves each new :attr:`channels`.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        python: str,
        runtime_dir: Path,
        startup_timeout: float,
        connection_file: Path | None = None,
        sandbox: SandboxPolicy = NO_SANDBOX,
        api_socket: Path | None = None,
        workspace: Path | None = None,
        forks: ForkServers | None = None,
        relay: Relay | None = None,
    ) -> None:
        self.relay = relay
        self._env = {k: v for k, v in env.items() if k not in _PARENT_VARIABLES}
        self._forks = forks
        self.forked = False
        """The current process was forked by a fork server (not exec'd)."""
        self._python = python
        self.startup_timeout = startup_timeout
        self.sandbox = sandbox
        self.api_socket = api_socket
        self.workspace = workspace
        """The directory a sandboxed kernel may write (its first launch's), once known."""
        if connection_file is None:
            # Absolute, so that the command line names it whatever the cwd:
            # adopting checks the process's command line against it.
            self._runtime_dir = Path(os.path.abspath(runtime_dir))
            self._name = connection_name()  # names this process: see orphans.py
            self.connection_file = self._runtime_dir / f"{self._name}.json"
        else:
            self.connection_file = Path(os.path.abspath(connection_file))
            self._runtime_dir = self.connection_file.parent
            self._name = self.connection_file.stem
        self._log_file = self._runtime_dir / f"{self._name}.log"
        self.kernel_dir: Path | None = None
        """The kernel's own directory (its sockets), once launched or adopted."""
        self._rebuild = False
        """The manager (an adopted kernel's) is not the one to launch the next process."""
        self._manager: AsyncKernelManager | None = None
        self.channels: Channels | None = None
        self._watch: ProcessWatch | None = None
        self.startup_time: float | None = None

    @property
    def pid(self) -> int | None:
        return self._watch.pid if self._watch is not None else None

    @property
    def launched(self) -> bool:
        """A process was launched or adopted and not stopped (it may have died since)."""
        return self._watch is not None

    def is_alive(self) -> bool:
        return self._watch is not None and self._watch.is_alive()

    @property
    def exchange_dir(self) -> Path | None:
        """Where a sandboxed kernel and the harness pass files (its own
        directory); None when the kernel is not sandboxed (it writes in place)."""
        return self.kernel_dir if self.sandbox.enabled else None

    def add_env(self, env: Mapping[str, str]) -> None:
        """Add ``env`` to the environment of every process launched from now on."""
        self._env.update({k: v for k, v in env.items() if k not in _PARENT_VARIABLES})

    # -- start ------------------------------------------------------------------------

    async def launch(self, cwd: Path) -> None:
        """Start a process in ``cwd``; return when it answers and is bootstrapped.

        Raises :class:`KernelError` (quoting the process's own output when it
        has any) and leaves nothing running if that fails or is cancelled.
        """
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self.startup_timeout
        server = self._fork_server(cwd)
        if server is not None and self._forks is not None:
            try:
                await self._launch(cwd, deadline, server)
            except KernelError as exc:
                self._forks.failed(server, str(exc))
            else:
                self.startup_time = loop.time() - began
                return
        await self._launch(cwd, deadline, None)
        self.startup_time = loop.time() - began

    def _fork_server(self, cwd: Path) -> ForkServer | None:
        """The fork server to start this kernel from, if any: one for its
        configuration that works, and a kernel directory that fits under it."""
        if self._forks is None:
            return None
        workspace = self.workspace or Path(os.path.abspath(cwd))
        server = self._forks.server_for(
            python=self._python,
            sandbox=self.sandbox,
            workspace=workspace,
            api_socket=self.api_socket,
        )
        if server is None:
            return None
        if self.kernel_dir is None:
            self.kernel_dir = server.kernel_dir(self._name)
            return server if self.kernel_dir is not None else None
        # A restart: forked only into the directory it was given at first.
        return server if self.kernel_dir.parent == server.directory else None

    async def _launch(self, cwd: Path, deadline: float, server: ForkServer | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self._manager is None or self._rebuild:
                self._manager = self._new_manager(cwd)
                self._rebuild = False
            if server is not None:
                self._watch = await self._fork(server, cwd, deadline)
            else:
                self._watch = await self._spawn(cwd)
            self._watch.watch(loop, self._on_exit)
            self.channels = self._connect(loop)
            await self.bootstrap(deadline)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await self.stop(graceful=False)
            if isinstance(exc, KernelError) or not isinstance(exc, Exception):
                raise  # ours already, or a cancellation
            detail = f"{exc}{self.log_tail()}"
            raise KernelError(f"could not start a kernel with {self._python}: {detail}") from exc

    def _connect(self, loop: asyncio.AbstractEventLoop) -> Channels:
        """New channels to the current process, served by the relay if any."""
        assert self._manager is not None
        channels = Channels(self._manager.get_connection_info(), loop)
        if self.relay is not None:
            self.relay.attach(channels)
        return channels

    async def _spawn(self, cwd: Path) -> ProcessWatch:
        """Launch the process by exec (jupyter_client's way)."""
        assert self._manager is not None
        self.forked = False
        # The process's own stdout/stderr (its output before ipykernel
        # captures them, and crash messages) go to a log quoted on failure.
        with self._log_file.open("wb") as log_out:
            await self._manager.start_kernel(
                env=sandbox_env(self.sandbox, self._env),
                cwd=str(cwd),
                stdout=log_out,
                stderr=subprocess.STDOUT,
                independent=True,
            )
        process = _manager_process(self._manager)
        if process is None:
            raise KernelError("jupyter_client started no local process")
        return ProcessWatch.child(process)

    async def _fork(self, server: ForkServer, cwd: Path, deadline: float) -> ProcessWatch:
        """Fork the process from ``server``; the watch checks, as for an
        adopted kernel, that the pid is the kernel of this connection file."""
        assert self._manager is not None
        self._manager.write_connection_file()
        info = _read_connection(self.connection_file)
        pid = await server.fork(
            connection=info,
            connection_file=self.connection_file,
            cwd=cwd,
            env=self._env,
            log_file=self._log_file,
            deadline=deadline,
        )
        watch = ProcessWatch.adopt(pid, self.connection_file, lambda: server.exit_status(pid))
        self.forked = True
        return watch

    def _new_manager(self, cwd: Path) -> AsyncKernelManager:
        """A manager that launches this kernel's processes behind the limits
        and the sandbox, with its sockets in its own directory (made here)."""
        if self.workspace is None:
            self.workspace = Path(os.path.abspath(cwd))
        if self.kernel_dir is None:
            self.kernel_dir = kernel_dir(self._runtime_dir, self._name)
        self.kernel_dir.mkdir(mode=0o700, exist_ok=True)
        view = KernelView(
            workspace=self.workspace,
            kernel_dir=self.kernel_dir,
            connection_file=self.connection_file,
            api_socket=self.api_socket,
            interpreter=interpreter_paths(self._python) if self.sandbox.enabled else (),
        )
        return make_manager(
            python=self._python,
            connection_file=self.connection_file,
            ipc_prefix=self.kernel_dir / IPC_NAME,
            argv_prefix=launch_prefix(self.sandbox, view, self._name),
            connection=connection_argument(self.sandbox, self.connection_file),
        )

    async def adopt(self, pid: int, answer_within: float) -> None:
        """Take over the live kernel ``pid`` that another process launched with
        this connection file, once it has answered on its control channel
        (which a kernel busy with a cell still serves).

        Raises :class:`KernelError` in one line if there is no such kernel;
        one that is there but does not answer within ``answer_within`` seconds is
        stopped first (nobody could use it, and nobody else knows of it).
        Cancelled, it lets go of the kernel and leaves it running.
        """
        info = _read_connection(self.connection_file)
        self._watch = watch = ProcessWatch.adopt(pid, self.connection_file)
        loop = asyncio.get_running_loop()
        try:
            prefix = Path(info["ip"])
            # The adopted process is only talked to; its next process (a
            # restart) gets a manager of its own, with the sandbox.
            self.kernel_dir = kernel_dir_of(prefix, self._name)
            self._rebuild = True
            self._manager = make_manager(
                python=self._python, connection_file=self.connection_file, ipc_prefix=prefix
            )
            self._manager.load_connection_info(cast("KernelConnectionInfo", info))
            watch.watch(loop, self._on_exit)
            self.channels = self._connect(loop)
            answered = await self.answers_control(loop.time() + answer_within)
        except BaseException:
            self.let_go()
            raise
        if answered:
            return
        # It is that kernel, but of no use: stopped, and its files removed.
        gone = not self.is_alive()
        await self.stop(graceful=False)
        if gone:
            raise KernelError(f"kernel process {pid} exited while it was being reattached")
        raise KernelError(
            f"kernel process {pid} did not answer within {answer_within:g} s; it was stopped"
        )

    def let_go(self) -> None:
        """Forget the process without stopping it: close the channels and the
        watch, keep every file. It runs on, for a later :meth:`adopt`."""
        self._disconnect()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._manager = None

    async def interrupt(self) -> None:
        """Send SIGINT to the kernel's process group."""
        if self._watch is not None:
            self._watch.signal_group(signal.SIGINT)

    # -- stop -----------------------------------------------------------------------------

    async def stop(self, *, graceful: bool, keep_connection_file: bool = False) -> None:
        """Stop the process (asking first when ``graceful``) and release
        everything attached to it. Safe to call with no process. The process
        need not be our child: one that ignores the request is killed by pid.

        Cancelled, it still ends the process before the cancellation goes on:
        the process is killed at once (before anything else is awaited), then
        released as without ``graceful``. Nobody else would stop it.
        """
        try:
            await self._stop(graceful=graceful, keep_connection_file=keep_connection_file)
        except asyncio.CancelledError:
            self._kill_now()
            await self._stop(graceful=False, keep_connection_file=keep_connection_file)
            raise

    def _kill_now(self) -> None:
        """Close the channels and send SIGKILL to the process group, without
        waiting: if :meth:`stop` is cancelled again while it waits for the
        exit, at most files are left (which :mod:`recursa.kernel.orphans`
        removes later), never a process."""
        self._disconnect()
        watch = self._current_watch()
        if watch is not None:
            watch.signal_group(signal.SIGKILL)

    def _current_watch(self) -> ProcessWatch | None:
        """The watch of the current process; made from the manager's process
        when a launch was cancelled between the spawn and our bookkeeping."""
        km = self._manager
        if self._watch is None and km is not None:
            process = _manager_process(km)
            if process is not None:
                self._watch = ProcessWatch.child(process)
        return self._watch

    async def _stop(self, *, graceful: bool, keep_connection_file: bool) -> None:
        km = self._manager
        watch = self._current_watch()
        if graceful and watch is not None and self.channels is not None and watch.is_alive():
            try:
                self.channels.send("shutdown_request", {"restart": False}, control=True)
                await watch.wait_exit(SHUTDOWN_GRACE)
            except Exception:
                log.debug("polite kernel shutdown failed; killing it", exc_info=True)
        self._disconnect()
        if watch is not None:
            if watch.is_alive():
                # The whole process group: the kernel leads its own session,
                # so this also ends the shell commands it started.
                watch.signal_group(signal.SIGKILL)
                await watch.wait_exit(KILL_WAIT)
            if watch.is_alive():
                log.warning("kernel process %d did not exit when killed", watch.pid)
            watch.close()
            self._watch = None
        if km is not None:
            await _release(km, keep_connection_file=keep_connection_file)
            if not keep_connection_file:
                self._manager = None
        if not keep_connection_file:
            # The process (and with a sandbox every process it started) is
            # gone. A restart keeps its cgroup: the next process enters it.
            release_limits(self._name)
            for path in (self.connection_file, self._log_file):
                with contextlib.suppress(OSError):
                    path.unlink()
            if self.kernel_dir is not None:
                shutil.rmtree(self.kernel_dir, ignore_errors=True)

    # -- exit ---------------------------------------------------------------------------

    def _on_exit(self) -> None:
        if self.channels is not None:
            self.channels.wake()

    async def wait_exit(self, seconds: float) -> None:
        """Wait until the process is gone, for at most ``seconds``."""
        if self._watch is not None:
            await self._watch.wait_exit(seconds)

    def next_check(self, now: float) -> float:
        """The latest loop time at which a waiter must look at the process again."""
        if self._watch is None:
            return now + DEATH_POLL_INTERVAL
        return self._watch.next_check(now)

    def exit_description(self) -> str:
        """How the last process ended, for a note: ``killed by SIGKILL``, ``exit code 1``."""
        if self._watch is None:
            return "exit status unknown"
        return self._watch.exit_description()

    def log_tail(self, limit: int = 2000) -> str:
        try:
            with self._log_file.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - limit, 0))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; kernel log: {tail}" if tail else ""


async def _release(km: AsyncKernelManager, *, keep_connection_file: bool) -> None:
    """Let the manager forget a process that is gone: close the pipes of its
    launch and remove its socket files (and its connection file, unless kept)."""
    process = _manager_process(km)
    if process is not None and process.poll() is not None and km.provisioner is not None:
        with contextlib.suppress(Exception):
            await km.provisioner.wait()
    await km.cleanup_resources(restart=keep_connection_file)


def _manager_process(km: AsyncKernelManager) -> subprocess.Popen[bytes] | None:
    # The local provisioner keeps its Popen as ``process``; other provisioners
    # (remote kernels) have none, and are not supported here.
    process = getattr(km.provisioner, "process", None)
    return process if isinstance(process, subprocess.Popen) else None


def _read_connection(path: Path) -> dict[str, Any]:
    """A kernel's connection info, from its file; :class:`KernelError` if it
    is missing or not one of ours (ipc transport)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KernelError(f"the kernel's connection file {path} is gone") from None
    except (OSError, ValueError) as exc:
        raise KernelError(f"the kernel's connection file {path} is unreadable: {exc}") from None
    if not isinstance(info, dict) or any(key not in info for key in _CONNECTION_KEYS):
        raise KernelError(f"{path} is not a kernel connection file")
    if info["transport"] != "ipc":
        raise KernelError(f"{path} is not a recursa kernel's (its transport is not ipc)")
    return info


__all__ = [
    "KILL_WAIT",
    "SHUTDOWN_GRACE",
    "KernelProcess",
    "execute_content",
]

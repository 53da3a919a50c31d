"""The kernel process: launched, watched, connected and stopped.

:class:`KernelProcess` is the layer under :class:`recursa.kernel.Kernel`. It
holds one process at a time (a restart is a stop and a launch), started by
``jupyter_client``'s :class:`AsyncKernelManager` from a fixed command line, and
the lean channels to it. It knows nothing of cells, limits or notes.

A process's exit is noticed at once: on Linux a pidfd is registered with the
event loop, which wakes whatever is waiting on the channels; elsewhere
waiters poll every :data:`DEATH_POLL_INTERVAL` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from uuid import uuid4

from jupyter_client.manager import AsyncKernelManager

from recursa.errors import KernelError
from recursa.kernel.launch import BOOTSTRAP, ipc_prefix, make_manager
from recursa.kernel.wire import Channels, JSONDict, pidfd_open

SILENT_TIMEOUT = 60.0
"""Limit for the harness's own silent commands (bootstrap, chdir, set_output)."""
SHUTDOWN_GRACE = 2.0
"""Seconds a kernel has to exit after a shutdown request before it is killed."""
KILL_WAIT = 5.0
DEATH_POLL_INTERVAL = 0.25
"""Only where no pidfd exists (not Linux): how often liveness is polled."""
_PROBE_INTERVAL = 0.2
_PAYLOAD_KEY = "recursa_payload"
PAYLOAD_EXPR = f"get_ipython().kernel.get_parent('shell')['content'][{_PAYLOAD_KEY!r}]"
"""Kernel-side expression for the ``payload`` of the running silent request
(the kernel ignores request fields it does not know)."""

log = logging.getLogger(__name__)


class KernelProcess:
    """At most one live kernel process, and the channels to it.

    Invariants: :attr:`channels` is set exactly while a launched process is
    being used; the connection file keeps its path across restarts;
    :meth:`stop` leaves no process, no socket and (unless told to keep the
    connection file for a restart) no file behind.
    """

    def __init__(
        self, env: Mapping[str, str], *, python: str, runtime_dir: Path, startup_timeout: float
    ) -> None:
        self._env = dict(env)
        self._python = python
        self._runtime_dir = runtime_dir
        self._startup_timeout = startup_timeout
        name = f"kernel-{uuid4().hex[:12]}"
        self.connection_file = runtime_dir / f"{name}.json"
        self._log_file = runtime_dir / f"{name}.log"
        self._name = name
        self._manager: AsyncKernelManager | None = None
        self.channels: Channels | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None
        self._exited = asyncio.Event()
        self.startup_time: float | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def launched(self) -> bool:
        """A process was launched and not stopped (it may have died since)."""
        return self._process is not None

    def is_alive(self) -> bool:
        proc = self._process
        return proc is not None and not self._exited.is_set() and proc.poll() is None

    # -- start ------------------------------------------------------------------------

    async def launch(self, cwd: Path) -> None:
        """Start a process in ``cwd``; return when it answers and is bootstrapped.

        Raises :class:`KernelError` (quoting the process's own output when it
        has any) and leaves nothing running if that fails or is cancelled.
        """
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self._startup_timeout
        self._exited = asyncio.Event()
        try:
            self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self._manager is None:
                self._manager = make_manager(
                    python=self._python,
                    connection_file=self.connection_file,
                    ipc_prefix=ipc_prefix(self._runtime_dir, self._name),
                )
            # The process's own stdout/stderr (its output before ipykernel
            # captures them, and crash messages) go to a log quoted on failure.
            with self._log_file.open("wb") as log_out:
                await self._manager.start_kernel(
                    env=dict(self._env), cwd=str(cwd), stdout=log_out, stderr=subprocess.STDOUT
                )
            process = _manager_process(self._manager)
            if process is None:
                raise KernelError("jupyter_client started no local process")
            self._process = process
            self._pidfd = pidfd_open(process.pid)
            if self._pidfd is not None:
                loop.add_reader(self._pidfd, self._on_exit)
            self.channels = Channels(self._manager.get_connection_info(), loop)
            await self._wait_ready(deadline)
            await self.silent(BOOTSTRAP, deadline=deadline)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await self.stop(graceful=False)
            if isinstance(exc, KernelError) or not isinstance(exc, Exception):
                raise  # ours already, or a cancellation
            detail = f"{exc}{self._log_tail()}"
            raise KernelError(f"could not start a kernel with {self._python}: {detail}") from exc
        self.startup_time = loop.time() - began

    async def _wait_ready(self, deadline: float) -> None:
        """Ready means: a ``kernel_info_reply`` came back on shell, and iopub
        delivers (ipykernel greets each subscriber with ``iopub_welcome``).
        Both are needed: a SUB socket joins late, and output sent before it
        joined would be lost."""
        channels = self.channels
        assert channels is not None
        loop = asyncio.get_running_loop()
        got_reply = got_iopub = False
        next_probe = loop.time()
        with channels.request():
            while True:
                now = loop.time()
                if now >= next_probe:
                    # Repeated: a request sent before the kernel bound its
                    # socket waits in a queue, but not one sent to a process
                    # that then failed.
                    channels.send("kernel_info_request", {})
                    next_probe = now + _PROBE_INTERVAL
                while (frames := channels.recv_shell()) is not None:
                    msg = channels.parse(frames)
                    got_reply = got_reply or (
                        msg is not None and msg.msg_type == "kernel_info_reply"
                    )
                while (frames := channels.recv_iopub()) is not None:
                    got_iopub = got_iopub or channels.parse(frames) is not None
                if got_reply and got_iopub:
                    return
                if not self.is_alive():
                    how = self.exit_description()
                    raise KernelError(f"the kernel exited while starting ({how}){self._log_tail()}")
                if now >= deadline:
                    limit = f"{self._startup_timeout:g} s"
                    raise KernelError(f"the kernel was not ready within {limit}{self._log_tail()}")
                await channels.wait(min(next_probe, deadline, self.next_check(now)))

    # -- harness commands ---------------------------------------------------------------

    async def silent(
        self, code: str, *, payload: str | None = None, deadline: float | None = None
    ) -> None:
        """Run harness code: no output kept, no history, no execution count.

        ``payload`` travels in the request beside the code, where the code
        reads it as :data:`PAYLOAD_EXPR`: far cheaper for large text than a
        literal, which IPython would have to tokenize and compile. A lone
        surrogate in it arrives as ``?`` (UTF-8 cannot carry one). Any failure
        (an exception in the code, a dead or silent kernel) is ours and
        raises :class:`KernelError`.
        """
        channels = self.channels
        if channels is None:
            raise KernelError("the kernel is not running")
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + SILENT_TIMEOUT
        with channels.request():
            content = execute_content(code, silent=True)
            if payload is not None:
                content[_PAYLOAD_KEY] = _utf8(payload)
            msg_id = channels.send("execute_request", content)
            while True:
                while channels.recv_iopub() is not None:
                    pass  # a silent request prints nothing we keep
                reply = find_reply(channels, msg_id)
                if reply is not None:
                    if reply.get("status") != "ok":
                        error = f"{reply.get('ename', 'error')}: {reply.get('evalue', '')}"
                        raise KernelError(f"the kernel failed a harness command: {error}")
                    return
                now = loop.time()
                if not self.is_alive():
                    how = self.exit_description()
                    raise KernelError(f"the kernel died during a harness command ({how})")
                if now >= deadline:
                    raise KernelError("the kernel did not answer a harness command in time")
                await channels.wait(min(deadline, self.next_check(now)))

    async def interrupt(self) -> None:
        """Send SIGINT to the kernel's process group."""
        if self._manager is not None and self.is_alive():
            await self._manager.interrupt_kernel()

    # -- stop -----------------------------------------------------------------------------

    async def stop(self, *, graceful: bool, keep_connection_file: bool = False) -> None:
        """Stop the process (asking first when ``graceful``) and release
        everything attached to it. Safe to call with no process."""
        km = self._manager
        if self._process is None and km is not None:
            # A launch cancelled between the spawn and our bookkeeping.
            self._process = _manager_process(km)
        if graceful and km is not None and self.is_alive():
            try:
                await km.request_shutdown()
                await self.wait_exit(SHUTDOWN_GRACE)
            except Exception:
                log.debug("polite kernel shutdown failed; killing it", exc_info=True)
        if self.channels is not None:
            self.channels.close()
            self.channels = None
        if km is not None and self._process is not None:
            if self.is_alive():
                # The whole process group: the kernel leads its own session,
                # so this also ends the shell commands it started.
                await km.signal_kernel(signal.SIGKILL)
                await self.wait_exit(KILL_WAIT)
            # The process is gone, so this only reaps it and removes the ipc
            # files (and, unless it is kept, the connection file).
            await km.shutdown_kernel(now=True, restart=keep_connection_file)
        elif km is not None and not keep_connection_file:
            await km.cleanup_resources(restart=False)
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._process = None
        if not keep_connection_file:
            with contextlib.suppress(OSError):
                self._log_file.unlink()

    # -- exit ---------------------------------------------------------------------------

    def _on_exit(self) -> None:
        # The pidfd stays readable once the process is gone: stop watching it.
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
        if self._process is not None:
            self._process.poll()  # reap it now, not at the next cell
        self._exited.set()
        if self.channels is not None:
            self.channels.wake()

    async def wait_exit(self, seconds: float) -> None:
        """Wait until the process is gone, for at most ``seconds``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        if self._pidfd is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exited.wait(), seconds)
            return
        # Without a pidfd nothing signals the exit: poll.
        while self.is_alive() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    def next_check(self, now: float) -> float:
        """The latest loop time at which a waiter must look at the process again."""
        return now + DEATH_POLL_INTERVAL if self._pidfd is None else float("inf")

    def exit_description(self) -> str:
        """How the last process ended, for a note: ``killed by SIGKILL``, ``exit code 1``."""
        code = self._process.poll() if self._process is not None else None
        if code is None:
            return "exit status unknown"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            with self._log_file.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - limit, 0))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; kernel log: {tail}" if tail else ""


def _manager_process(km: AsyncKernelManager) -> subprocess.Popen[bytes] | None:
    # The local provisioner keeps its Popen as ``process``; other provisioners
    # (remote kernels) have none, and are not supported here.
    process = getattr(km.provisioner, "process", None)
    return process if isinstance(process, subprocess.Popen) else None


def find_reply(channels: Channels, msg_id: str) -> JSONDict | None:
    """Drain the shell socket; the content of the reply to ``msg_id`` if it came."""
    found: JSONDict | None = None
    while (frames := channels.recv_shell()) is not None:
        msg = channels.parse(frames, want=msg_id)
        if msg is not None and msg.parent_id == msg_id and msg.msg_type == "execute_reply":
            found = msg.content
    return found


def execute_content(code: str, *, silent: bool) -> JSONDict:
    """An ``execute_request``'s content: history unless silent, never stdin."""
    return {
        "code": _encodable(code),
        "silent": silent,
        "store_history": not silent,
        "user_expressions": {},
        "allow_stdin": False,
        # One request is in flight at a time, so there is never a queue to
        # abort; False avoids racing the kernel's post-error abort window.
        "stop_on_error": False,
    }


def _encodable(code: str) -> str:
    """``code`` with lone surrogates written as ``\\udXXX`` escapes.

    ipykernel never answers a request whose code holds a lone surrogate (its
    own messages about that code fail to encode), so the cell would hang
    until its limit and cost a restart.
    As an escape, one inside a string literal still means the same character.
    """
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:
        return code.encode("utf-8", "backslashreplace").decode("utf-8")
    return code


def _utf8(text: str) -> str:
    """``text`` with lone surrogates replaced by ``?``, so that it encodes:
    the session's JSON packer raises on most of them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


__all__ = [
    "DEATH_POLL_INTERVAL",
    "KILL_WAIT",
    "PAYLOAD_EXPR",
    "SHUTDOWN_GRACE",
    "SILENT_TIMEOUT",
    "KernelProcess",
    "execute_content",
    "find_reply",
]

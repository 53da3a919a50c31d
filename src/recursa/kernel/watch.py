"""A kernel process known by its pid: alive or not, still the same process, signalled
and reaped safely, its exit noticed at once.

Kernels lead their own session and outlive the process that launched them, so
the process watching one is not always its parent: a restarted daemon watches
kernels that an earlier daemon launched. A :class:`ProcessWatch` covers both:

- **Liveness.** A process that exited is dead even while it waits, a zombie,
  to be reaped by a parent that may never do it (a container's init often
  does not): on Linux a pidfd says so; elsewhere
  :func:`~recursa.kernel.pids.is_alive` does, and ``os.kill(pid, 0)`` is
  never trusted alone.
- **Identity.** A pid is reused once its process is reaped. An adopted pid is
  checked against the command line the kernel was launched with (which names
  its connection file) through a pidfd opened *before* the check, so the
  process checked is the process watched and signalled.
- **Signals** go to the kernel's process group (its shell commands too), and
  only while the kernel itself is alive: a dead kernel's pid and group may
  belong to someone else.
- **Reaping** happens when this process is the parent, and never steals the
  status of another child that happens to have the same pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from recursa.errors import KernelError
from recursa.kernel.pids import command_line, is_alive

DEATH_POLL_INTERVAL = 0.25
"""Only where no pidfd exists (not Linux): how often liveness is polled."""

_P_PIDFD: int | None = getattr(os, "P_PIDFD", None)


def pidfd_open(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` exits, where the
    platform has one (Linux 5.3+); ``None`` means: poll instead."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


class ProcessWatch:
    """One process by pid. Use :meth:`child` for a process this one launched,
    :meth:`adopt` for one launched elsewhere.

    Invariants: :attr:`exited` is set at most once, when the process is seen
    gone, and then :meth:`is_alive` is false for good; no signal is sent once
    it is set; the pidfd (if any) is closed by :meth:`close`.
    """

    def __init__(
        self,
        pid: int,
        *,
        child: subprocess.Popen[bytes] | None,
        pidfd: int | None,
        status: Callable[[], int | None] | None = None,
    ):
        self.pid = pid
        self._child = child
        self._status = status
        """Where the wait status of a process another one reaps is told (a fork server)."""
        self._pidfd = pidfd
        self._leader = _leads_group(pid)
        self.exited = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._on_exit: Callable[[], None] | None = None

    @classmethod
    def child(cls, process: subprocess.Popen[bytes]) -> ProcessWatch:
        """A process this one launched (its parent until it is reaped)."""
        return cls(process.pid, child=process, pidfd=pidfd_open(process.pid))

    @classmethod
    def adopt(
        cls, pid: int, connection_file: Path, status: Callable[[], int | None] | None = None
    ) -> ProcessWatch:
        """The live kernel process ``pid`` whose command line names
        ``connection_file``; :class:`KernelError` (one line) if there is none.
        ``status`` tells its wait status once it has ended, where another
        process is its parent and knows it (a fork server)."""
        if pid <= 0:
            raise KernelError(f"{pid} is not a process id")
        pidfd = pidfd_open(pid)
        watch = cls(pid, child=None, pidfd=pidfd, status=status)
        try:
            if not watch.is_alive():
                raise KernelError(f"kernel process {pid} is not running")
            if not _launched_with(pid, connection_file):
                raise KernelError(
                    f"process {pid} is not the kernel of {connection_file.name} "
                    "(the kernel is gone and its pid was reused)"
                )
            # The command line was read through /proc, by pid: the process
            # read is the one the pidfd holds only if that one is still alive.
            if not watch.is_alive():
                raise KernelError(f"kernel process {pid} exited while it was being checked")
        except BaseException:
            watch.close()
            raise
        return watch

    # -- liveness ---------------------------------------------------------------------------

    def is_alive(self) -> bool:
        if self.exited.is_set():
            return False
        if self._child is not None:
            alive = self._child.poll() is None  # reaps it when it is gone
        elif self._pidfd is not None:
            alive = not _readable(self._pidfd)
        else:
            alive = is_alive(self.pid)
        if not alive:
            self._mark_exited()
        return alive

    def watch(self, loop: asyncio.AbstractEventLoop, on_exit: Callable[[], None]) -> None:
        """Call ``on_exit`` on ``loop`` as soon as the process exits (at once
        where a pidfd exists; elsewhere, the next time liveness is checked)."""
        self._loop = loop
        self._on_exit = on_exit
        if self._pidfd is not None and not self.exited.is_set():
            loop.add_reader(self._pidfd, self.is_alive)
            self._reading = True

    def next_check(self, now: float) -> float:
        """The latest loop time at which a waiter must check liveness again."""
        return now + DEATH_POLL_INTERVAL if self._pidfd is None else float("inf")

    async def wait_exit(self, seconds: float) -> None:
        """Wait until the process is gone, for at most ``seconds``."""
        if not self.is_alive():
            return
        if self._reading:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), seconds)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        # Without a pidfd nothing signals the exit: poll.
        while self.is_alive() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    def _mark_exited(self) -> None:
        if self.exited.is_set():
            return
        self.exited.set()
        self._stop_reading()  # the pidfd stays readable once the process is gone
        self.reap()
        if self._on_exit is not None:
            self._on_exit()

    # -- acting on it -----------------------------------------------------------------------

    def signal_group(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the kernel's process group (to the kernel alone if
        it leads none). Nothing is sent once the kernel is gone."""
        if not self.is_alive():
            return
        with contextlib.suppress(ProcessLookupError):
            if self._leader:
                os.killpg(self.pid, sig)
            elif self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self.pid, sig)

    def reap(self) -> None:
        """Collect the exit status if this process is the parent. A pidfd names
        the very process, so a reused pid's child is never reaped by mistake."""
        if self._child is not None:
            self._child.poll()
        elif self._pidfd is not None and _P_PIDFD is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitid(_P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG)

    def exit_description(self) -> str:
        """How the process ended, for a note: ``killed by SIGKILL``, ``exit code 1``."""
        code = self._child.poll() if self._child is not None else None
        if code is None and self._status is not None:
            status = self._status()
            code = None if status is None else os.waitstatus_to_exitcode(status)
        if code is None:
            return "exit status unknown"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def close(self) -> None:
        """Stop watching and release the pidfd. Idempotent."""
        self._stop_reading()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self._on_exit = None

    def _stop_reading(self) -> None:
        if self._reading and self._loop is not None and self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
        self._reading = False


def _launched_with(pid: int, connection_file: Path) -> bool:
    args = command_line(pid)
    return args is not None and str(connection_file) in args


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


__all__ = ["DEATH_POLL_INTERVAL", "ProcessWatch"]

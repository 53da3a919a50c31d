"""Other processes by pid: alive or not, their command lines, and a scan of all of them.

The one place recursa asks the operating system about a process it holds no
handle to (the daemon it started, a kernel an earlier daemon launched, a
launcher that may have died). It asks through psutil, so the answers mean
the same on Linux and macOS and there is no ``ps`` to run or parse. Two
decisions hold everywhere:

- **A zombie is dead.** A process that exited but has not been reaped (its
  parent may never do it: a container's init often does not) runs no code
  and holds no resources worth waiting for. It has no command line either.
- **An entry that exists but cannot be read counts as alive.** The pid is
  taken by a process we may not inspect (another user's, under a hardened
  ``/proc``); calling it dead would let a caller treat its pid, socket or
  files as free. Such a process has no command line we can see, so it never
  passes for one of ours.

A pid names a process only until that process is reaped; callers that must
act on the very process they checked hold a pidfd
(:class:`~recursa.kernel.watch.ProcessWatch`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil

_GONE = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (see the module
    docstring: a zombie is dead, an unreadable entry alive). Never raises."""
    if pid <= 0:
        return False
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:
        return True
    return str(status) not in _GONE


def command_line(pid: int) -> list[str] | None:
    """The arguments process ``pid`` was started with; None when it has none
    to show (gone, a zombie, a kernel thread, or one we may not read)."""
    if pid <= 0:
        return None
    try:
        process = psutil.Process(pid)
        if str(process.status()) in _GONE:
            return None
        args = [str(arg) for arg in process.cmdline()]
    except psutil.Error:
        return None
    return args or None


def command_lines() -> Iterator[tuple[int, list[str]]]:
    """Every other live process we may read, with its arguments: zombies,
    processes without a command line and this process are left out."""
    me = os.getpid()
    for process in psutil.process_iter(["cmdline", "status"]):
        info = process.info
        args = info.get("cmdline")
        if process.pid == me or not args or str(info.get("status")) in _GONE:
            continue
        yield process.pid, [str(arg) for arg in args]


__all__ = ["command_line", "command_lines", "is_alive"]

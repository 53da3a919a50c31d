"""Process hardening for processes that hold provider credentials."""

from __future__ import annotations

import ctypes
import sys

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4


def harden_process() -> bool:
    """Make this process non-dumpable (Linux): other processes of the same user,
    such as the model's kernels, can then no longer read its memory or its
    ``/proc/PID/environ``, where provider keys may sit. (Root and
    CAP_SYS_PTRACE holders still can.) The flag is reset by ``execve``, so the
    kernels the process starts are not affected.

    Returns whether the process is non-dumpable now, as read back from the
    kernel; False elsewhere than Linux and when ``prctl`` is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        return bool(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


__all__ = ["harden_process"]

"""Process hardening for processes that hold provider credentials."""

from __future__ import annotations

import ctypes
import sys

_PR_SET_DUMPABLE = 4


def harden_process() -> None:
    """Make this process non-dumpable (Linux): other processes of the same user,
    such as the model's kernels, can then no longer read its memory or its
    ``/proc/PID/environ``, where provider keys may sit. (Root and
    CAP_SYS_PTRACE holders still can.) Elsewhere, and when ``prctl`` is not
    available, this does nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


__all__ = ["harden_process"]

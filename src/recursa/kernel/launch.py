"""How a kernel process is launched: its command line, its manager and its bootstrap.

The kernel is ipykernel run by a given Python, always from this fixed command
line, never from a kernelspec found on disk: a user's ``python3`` kernelspec
(with its own ``env`` stanza or interpreter) must not change what an agent's
kernel is or what environment it sees.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from recursa.errors import KernelError
from recursa.kernel.wire import shared_context

MAX_IPC_PATH_BYTES = 96
"""Longest socket path prefix: unix socket paths must fit ``sun_path`` (108
bytes on Linux, 104 on macOS) with the ``-N`` port suffix and zeromq's own
margin."""

KERNEL_FLAGS: tuple[str, ...] = (
    # Hundreds of kernels must not contend for one history sqlite file.
    "--HistoryManager.enabled=False",
    # Tracebacks are read by a model, not a terminal.
    "--InteractiveShell.colors=nocolor",
    # ipykernel sleeps 0.5 ms after every cell so that clients which stop
    # reading at the shell reply still see late output. This client reads
    # until ``status: idle`` on iopub, which follows all output, so the sleep
    # is pure latency.
    "--IPythonKernel._execute_sleep=0",
)

BOOTSTRAP = r"""
_out = {}

def __recursa_bootstrap():
    import sys
    # ipykernel ends every cell with sys.stdout.flush() and sys.stderr.flush(),
    # and each blocks on a round trip through its IOPub thread (about 0.2 ms),
    # even with nothing to send. Skip the round trip when the stream holds no
    # text: there is nothing to order. A stream with text flushes as before,
    # so output order is exactly ipykernel's. Skipped if the internals differ.
    for stream in (sys.stdout, sys.stderr):
        lock = getattr(stream, "_buffer_lock", None)
        if lock is None or not isinstance(getattr(stream, "_buffers", None), dict):
            continue
        if getattr(stream, "echo", None) is not None:
            continue

        def flush(stream=stream, lock=lock, full_flush=stream.flush):
            with lock:
                empty = not stream._buffers
            if not empty:
                full_flush()

        stream.flush = flush

    # ipykernel forces colors on for the programs a cell runs, for notebooks
    # that render ANSI codes. A model reads plain text: let programs decide.
    import os
    for name in ("FORCE_COLOR", "CLICOLOR_FORCE"):
        os.environ.pop(name, None)

    # Text a cell writes below Python (os.system, C code) is captured by
    # ipykernel and also echoed to the process's original stdout/stderr: the
    # kernel's log file, which would then grow without bound. That log is for
    # startup failures only, so the echo goes to /dev/null from here on.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            fd = getattr(stream, "_original_stdstream_copy", None)
            if isinstance(fd, int):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)

__recursa_bootstrap()
del __recursa_bootstrap
"""
"""Run silently in every fresh kernel process. It creates ``_out``, the dict
where the session keeps the full text of outputs that were truncated for the
model; makes an empty flush free; stops forcing colors on programs; and
stops the kernel log from growing.
Only ``_out`` is left in the namespace. (matplotlib is not touched: ipykernel
already selects its inline, non-interactive backend through ``MPLBACKEND``,
at no cost.)"""


def kernel_argv(python: str) -> list[str]:
    """The kernel's command line; ``{connection_file}`` is filled in by jupyter_client."""
    return [python, "-m", "ipykernel_launcher", "-f", "{connection_file}", *KERNEL_FLAGS]


class _FixedSpecManager(KernelSpecManager):
    """Answers every kernelspec lookup with one spec built in code."""

    def __init__(self, spec: KernelSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._spec = spec

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return self._spec


def ipc_prefix(runtime_dir: Path, name: str) -> Path:
    """Where a kernel's unix sockets go: beside its connection file when the
    path fits in a socket address, else in a private directory under the
    system's temporary directory. The connection file records the choice."""
    beside = runtime_dir / f"{name}-ipc"
    if len(os.fsencode(beside)) <= MAX_IPC_PATH_BYTES:
        return beside
    short = Path(tempfile.gettempdir()) / f"recursa-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    info = short.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KernelError(
            f"{short} is not a private directory of this user; remove it, or use a "
            "shorter kernel runtime directory"
        )
    return short / f"{name}-ipc"


def make_manager(*, python: str, connection_file: Path, ipc_prefix: Path) -> AsyncKernelManager:
    """A manager for one kernel on the ipc transport."""
    if len(os.fsencode(ipc_prefix)) > MAX_IPC_PATH_BYTES:
        raise KernelError(f"the kernel socket path {ipc_prefix} is too long for a unix socket")
    spec = KernelSpec(
        argv=kernel_argv(python),
        display_name="recursa",
        language="python",
        interrupt_mode="signal",
        env={},
        metadata={},
    )
    return AsyncKernelManager(
        kernel_spec_manager=_FixedSpecManager(spec),
        transport="ipc",
        ip=str(ipc_prefix),
        connection_file=str(connection_file),
        context=shared_context(),
    )


__all__ = [
    "BOOTSTRAP",
    "KERNEL_FLAGS",
    "MAX_IPC_PATH_BYTES",
    "ipc_prefix",
    "kernel_argv",
    "make_manager",
]

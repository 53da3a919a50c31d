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
from recursa.kernel.wire import IOPUB_QUEUE_MESSAGES, shared_context

MAX_IPC_PATH_BYTES = 96
"""Longest socket path prefix: unix socket paths must fit ``sun_path`` (108
bytes on Linux, 104 on macOS) with the ``-N`` port suffix and zeromq's own
margin."""

KERNEL_NAME_BYTES = len("kernel-4194304-0123456789ab")
"""Longest kernel name (:func:`recursa.kernel.orphans.connection_name`): a pid
has at most 7 digits (Linux's ``pid_max`` is at most 2**22)."""

OUTPUT_CHUNK_CHARS = 262_144
"""Characters a kernel's output stream holds before the writer waits for them
to be sent: the largest stream message a flood of small writes produces."""

KERNEL_FLAGS: tuple[str, ...] = (
    # The kernel outlives the process that launched it (a daemon killed with
    # SIGKILL reattaches to it when it restarts). ipykernel exits with its
    # parent when given one (JPY_PARENT_PID, which jupyter_client sets unless
    # the launch is ``independent``, or this flag): a thread polls getppid()
    # every second. Pid 1 is the value ipykernel never watches ("init never
    # goes away"), and unlike 0 it does not print a connection banner into
    # the kernel's log.
    "--IPKernelApp.parent_handle=1",
    # Hundreds of kernels must not contend for one history sqlite file.
    "--HistoryManager.enabled=False",
    # Tracebacks are read by a model, not a terminal.
    "--InteractiveShell.colors=nocolor",
    # ipykernel sleeps 0.5 ms after every cell so that clients which stop
    # reading at the shell reply still see late output. This client reads
    # until ``status: idle`` on iopub, which follows all output, so the sleep
    # is pure latency.
    "--IPythonKernel._execute_sleep=0",
    # No busy status before each request: this client waits for idle and never
    # reads busy (recursa.api.kernelapp.HarnessKernel).
    "--HarnessKernel.publish_busy=False",
    # Messages are packed with orjson (jupyter_client's default when it is
    # installed) but read with the json module, which keeps integers of any
    # size exact where orjson makes floats of those past 64 bits.
    "--Session.unpacker=jupyter_client.session.json_unpacker",
)

EXTENSION = "recursa.api.extension"
"""The IPython extension that makes a fresh kernel recursa's: everything that
runs in a kernel on the harness's behalf is a module of :mod:`recursa.api`."""

BOOTSTRAP = f"get_ipython().extension_manager.load_extension({EXTENSION!r})"
"""Run silently in every fresh kernel process: it loads :data:`EXTENSION`
(:func:`recursa.api.extension.load_ipython_extension` says what that does),
whose settings are on the kernel's command line (:func:`extension_flags`).
A kernel Python that cannot import recursa fails here, in one line."""

USE_COMM = "__import__('recursa.api.channel').api.channel.use_comm(get_ipython())"
"""Run silently after :data:`BOOTSTRAP` in a kernel whose API goes over its own
channels (:mod:`recursa.api.channel`, :mod:`recursa.kernel.relay`): a kernel the
harness did not launch (a gateway's) is switched the same way. Binds no name."""


def extension_flags() -> tuple[str, ...]:
    """The extension's settings, as IPython configuration on the command line
    (:class:`recursa.api.extension.RecursaKernel` reads them)."""
    return (
        f"--RecursaKernel.output_chunk_chars={OUTPUT_CHUNK_CHARS}",
        f"--RecursaKernel.iopub_send_queue={IOPUB_QUEUE_MESSAGES}",
    )


def kernel_argv(python: str, connection: str = "{connection_file}") -> list[str]:
    """The kernel's command line; ``{connection_file}`` is filled in by
    jupyter_client (a sandboxed kernel reads the file at another path)."""
    return [
        python,
        "-m",
        "recursa.api.launcher",
        "-f",
        connection,
        *KERNEL_FLAGS,
        *extension_flags(),
    ]


class _KeptKernelManager(AsyncKernelManager):
    """A manager that leaves the connection file alone when it is garbage
    collected (jupyter_client's deletes it): the kernel may outlive this
    process, and a later one reattaches through that file. :meth:`stop
    <recursa.kernel.lifecycle.KernelProcess.stop>` removes it."""

    def __del__(self) -> None:
        self._close_control_socket()


class _FixedSpecManager(KernelSpecManager):
    """Answers every kernelspec lookup with one spec built in code."""

    def __init__(self, spec: KernelSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._spec = spec

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return self._spec


IPC_NAME = "ipc"
"""The name of a kernel's unix sockets in its directory (``ipc-1``, ``ipc-2``, ...)."""


def kernel_dir(runtime_dir: Path, name: str, *, deeper: int = 0) -> Path:
    """A kernel's own directory, which holds its unix sockets and nothing of
    any other kernel (a sandbox binds it into the kernel, and only it): beside
    its connection file when the socket paths fit in a socket address, else
    in a private directory under the system's temporary directory. The
    connection file records the choice (its ``ip`` is ``<dir>/ipc``). The
    directory is not created here. With ``deeper``, the sockets are that many
    bytes further down (a fork server's kernels' directories are in its own:
    :func:`zygote_dir`)."""
    beside = runtime_dir / name
    if len(os.fsencode(beside / IPC_NAME)) + deeper <= MAX_IPC_PATH_BYTES:
        return beside
    short = Path(tempfile.gettempdir()) / f"recursa-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    info = short.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KernelError(
            f"{short} is not a private directory of this user; remove it, or use a "
            "shorter kernel runtime directory"
        )
    return short / name


def zygote_dir(runtime_dir: Path, name: str) -> Path:
    """A fork server's directory, chosen as :func:`kernel_dir` chooses a
    kernel's, so that its kernels' directories (one longest kernel name down)
    fit under it."""
    return kernel_dir(runtime_dir, name, deeper=1 + KERNEL_NAME_BYTES)


def kernel_dir_of(ipc_prefix: Path, name: str) -> Path | None:
    """The kernel directory that ``ipc_prefix`` (a connection file's ``ip``)
    lies in, for a kernel named ``name``; None for a prefix of another layout
    (``<runtime dir>/<name>-ipc``, from before kernels had directories)."""
    if ipc_prefix.name == IPC_NAME and ipc_prefix.parent.name == name:
        return ipc_prefix.parent
    return None


def make_manager(
    *,
    python: str,
    connection_file: Path,
    ipc_prefix: Path,
    argv_prefix: list[str] | None = None,
    connection: str = "{connection_file}",
) -> AsyncKernelManager:
    """A manager for one kernel on the ipc transport; ``argv_prefix`` (the
    limits and the sandbox) goes in front of the kernel's command line, which
    reads the connection file at ``connection``."""
    if len(os.fsencode(ipc_prefix)) > MAX_IPC_PATH_BYTES:
        raise KernelError(f"the kernel socket path {ipc_prefix} is too long for a unix socket")
    spec = KernelSpec(
        argv=[*(argv_prefix or ()), *kernel_argv(python, connection)],
        display_name="recursa",
        language="python",
        interrupt_mode="signal",
        env={},
        metadata={},
    )
    return _KeptKernelManager(
        kernel_spec_manager=_FixedSpecManager(spec),
        transport="ipc",
        ip=str(ipc_prefix),
        connection_file=str(connection_file),
        context=shared_context(),
    )


__all__ = [
    "BOOTSTRAP",
    "EXTENSION",
    "IPC_NAME",
    "KERNEL_FLAGS",
    "KERNEL_NAME_BYTES",
    "MAX_IPC_PATH_BYTES",
    "OUTPUT_CHUNK_CHARS",
    "USE_COMM",
    "extension_flags",
    "kernel_argv",
    "kernel_dir",
    "kernel_dir_of",
    "make_manager",
    "zygote_dir",
]

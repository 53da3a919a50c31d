"""Kernels forked from a pre-imported parent: the daemon's side of the fork server.

An exec'd kernel spends most of its start importing ipykernel, IPython and
recursa's kernel-side modules, and holds its own copy of all of them. A
:class:`ForkServer` starts one process, the zygote (:mod:`recursa.kernel.zygote`),
that imports them once; each kernel is then a ``fork()`` of it: the start
costs the fork and ipykernel's own set-up, and idle kernels share the
zygote's pages copy-on-write.

One zygote serves the kernels of one *configuration*: the interpreter, the
sandbox policy, the workspace and the kernel-API socket
(:class:`ForkServers` keeps one per configuration, started on first use).
It runs inside the sandbox that an exec'd kernel of that configuration would
get (:mod:`recursa.kernel.sandbox`), with its own directory, under which each
of its kernels has its directory (sockets); each kernel's connection file
stays where the daemon keeps it (the kernel gets its content in the request).

What differs from an exec'd sandboxed kernel, precisely (the kernels of one
zygote share one workspace already, read-write):

- They share one sandbox: one mount namespace, one private ``/tmp``, one
  PID namespace. A kernel sees its siblings' processes in ``/proc``, but
  not their memory or descriptors: each kernel is made non-dumpable before
  it runs any code, and so is the zygote, which also bars ptrace (for any
  user but root: a daemon run as root gives its kernels the power to read
  each other). A kernel's ``/proc/<pid>/environ`` is the zygote's, and the
  programs a kernel starts do not carry its session's token either (the
  kernel moves it out of its environment: :mod:`recursa.api.client`). It
  can see its siblings' socket directories and connect to them (reading
  another kernel's output on iopub; running code needs the kernel's key,
  which is in no file the sandbox shows). It cannot see the daemon's
  directories, other workspaces, nor the kernels of other zygotes.
- Nothing secret passes through the zygote: a request's key and environment
  travel in a memfd the zygote hands on unread, so no later kernel (a copy
  of the zygote's memory) holds an earlier one's secrets.
- A forked kernel closes the zygote's socket before any IPython code runs,
  says it has bound its sockets on a pipe of its own, and reads no IPython
  configuration or startup file: IPython's directory is in the ``/tmp`` its
  siblings share, where one could plant code for the next kernel to run.
- A stop still ends everything the kernel started: each kernel is a child
  subreaper, so what it detaches stays below it, and what remains when it
  dies is killed by the zygote.
- Resource limits (``[kernel] memory_max``, ``max_processes``) need a cgroup
  per kernel, entered before the kernel runs: with a limit configured kernels
  are never forked (:meth:`ForkServers.server_for` gives None).

When the zygote cannot be started, dies, or a fork fails, the kernel is
launched the usual way, and the fork server of that configuration is not
used again (one log line says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recursa.errors import KernelError
from recursa.kernel.launch import (
    IPC_NAME,
    KERNEL_FLAGS,
    MAX_IPC_PATH_BYTES,
    extension_flags,
    zygote_dir,
)
from recursa.kernel.orphans import connection_name
from recursa.kernel.pids import is_alive
from recursa.kernel.sandbox import (
    KernelView,
    SandboxPolicy,
    interpreter_paths,
    launch_prefix,
    sandbox_env,
)
from recursa.kernel.watch import ProcessWatch
from recursa.kernel.zygote import MAX_MESSAGE, PADDING_CHAR, PADDING_CHARS

log = logging.getLogger(__name__)

FORKS_HERE = sys.platform.startswith("linux")
"""The fork server needs Linux: a pidfd, ``SCM_CREDENTIALS``, ``prctl``, ``/proc``.
Elsewhere every kernel is launched as a process of its own."""
ZYGOTE_MODULE = "recursa.kernel.zygote"
READY_TIMEOUT = 30.0
"""Seconds a zygote has to import everything and say it is ready."""
CLOSE_WAIT = 2.0
"""Seconds :meth:`ForkServer.close` waits for a zygote to exit."""
_UCRED = 12  # struct ucred: pid, uid, gid
_KEPT_EXITS = 4096
"""Exit statuses kept for the notes of kernels' deaths (the newest)."""


class ForkServer:
    """One zygote and the socket to it. Use :meth:`fork`; :meth:`close` lets
    the zygote go (it lives until its last kernel has ended)."""

    def __init__(
        self,
        *,
        python: str,
        sandbox: SandboxPolicy,
        workspace: Path,
        api_socket: Path | None,
        runtime_dir: Path,
        env: Mapping[str, str],
        name: str,
    ) -> None:
        self.python = python
        self.sandbox = sandbox
        self.workspace = workspace
        self.api_socket = api_socket
        self.name = name
        self._runtime_dir = runtime_dir
        self._env = dict(env)
        self.directory = zygote_dir(runtime_dir, name)
        """The zygote's directory: its kernels' directories are in it."""
        self._marker = runtime_dir / f"{name}.zygote"
        self._log_file = runtime_dir / f"{name}.log"
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._waiting: dict[int, asyncio.Future[int]] = {}
        self._exits: dict[int, int] = {}
        """Wait statuses of ended kernels, by pid."""
        self._pids: dict[int, int] = {}
        """Request id -> pid, for the kernels forked."""
        self._bound: dict[int, int] = {}
        """Request id -> the read end of the pipe its kernel says "bound" on."""
        self._next = 0
        self._ready: asyncio.Future[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        self.broken: str | None = None
        """Why this server is not used (None while it is usable)."""
        self.told = False
        """The log has said that this server is not used (once is enough)."""

    def kernel_dir(self, name: str) -> Path | None:
        """Where the kernel ``name`` keeps its sockets, under this zygote's
        directory (made here; the kernel's own is not); None when the socket
        paths would not fit."""
        path = self.directory / name
        if len(os.fsencode(path / IPC_NAME)) > MAX_IPC_PATH_BYTES:
            return None
        self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        return path

    # -- start ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the zygote (once); :class:`KernelError` if it cannot be."""
        if self.broken is not None:
            raise KernelError(self.broken)
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(
                self._start(), name=f"fork server {self.name}"
            )
        try:
            await asyncio.shield(self._starting)
        except KernelError as exc:
            self.broken = str(exc)
            raise

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        self._marker.write_text("{}", encoding="utf-8")
        view = KernelView(
            workspace=self.workspace,
            kernel_dir=self.directory,
            connection_file=self._marker,
            api_socket=self.api_socket,
            interpreter=interpreter_paths(self.python) if self.sandbox.enabled else (),
        )
        prefix = launch_prefix(self.sandbox, view, self.name)
        argv = [*prefix, self.python, "-P", "-m", ZYGOTE_MODULE, PADDING_CHAR * PADDING_CHARS]
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        ours.setblocking(False)
        try:
            with self._log_file.open("wb") as log_out:
                # A fork and exec: as quick as the Popen jupyter_client makes.
                self._process = subprocess.Popen(  # noqa: ASYNC220
                    argv,
                    stdin=theirs.fileno(),
                    stdout=log_out,
                    stderr=subprocess.STDOUT,
                    cwd=self.workspace,
                    env=sandbox_env(self.sandbox, self._env),
                    start_new_session=True,
                )
        except OSError as exc:
            ours.close()
            raise KernelError(f"could not start a fork server: {exc}") from None
        finally:
            theirs.close()
        self._sock = ours
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._on_readable)
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT)
        except TimeoutError:
            self._fail(f"the fork server was not ready within {READY_TIMEOUT:g} s")
        if self.broken is not None:
            raise KernelError(f"{self.broken}{self._log_tail()}")

    # -- fork -----------------------------------------------------------------------------

    async def fork(
        self,
        *,
        connection: Mapping[str, Any],
        connection_file: Path,
        cwd: Path,
        env: Mapping[str, str],
        log_file: Path,
        deadline: float,
    ) -> int:
        """Fork a kernel in ``cwd`` with environment ``env`` on ``connection``
        (its connection file's content); return its pid once it has bound its
        sockets (a client connecting then finds them at once, instead of
        retrying on zeromq's reconnect interval). :class:`KernelError` if the
        zygote cannot, or the kernel ends or is not that far by ``deadline``
        (loop time), when it is killed."""
        await self.start()
        sock = self._sock
        if sock is None or self.broken is not None:
            raise KernelError(self.broken or "the fork server is closed")
        self._next += 1
        ident = self._next
        cmdline = "\0".join([self.python, "-m", "recursa.api.launcher", "-f", str(connection_file)])
        if len(cmdline.encode()) >= PADDING_CHARS:
            raise KernelError("the kernel's command line is too long to fork it")
        request = {
            "id": ident,
            "cwd": str(cwd),
            "argv": [*KERNEL_FLAGS, *extension_flags()],
            "cmdline": cmdline,
        }
        data = json.dumps(request).encode()
        # What is secret (the kernel's key, the session's token in its
        # environment) never passes through the zygote's memory, which every
        # later kernel of it copies: it goes in a memfd the zygote only hands on.
        secret = json.dumps(
            {"env": sandbox_env(self.sandbox, env), "connection": dict(connection)}
        ).encode()
        if len(data) > MAX_MESSAGE or len(secret) > MAX_MESSAGE:
            raise KernelError("the fork request is too large")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._waiting[ident] = future
        # The kernel says it has bound its sockets on a pipe of its own: it
        # closes the zygote's socket before any IPython code runs.
        bound_read, bound_write = os.pipe()
        self._bound[ident] = bound_read
        loop.add_reader(bound_read, self._on_bound, ident)
        try:
            secret_fd = _sealed(secret)
            try:
                with log_file.open("wb") as log_out:
                    fds = [log_out.fileno(), secret_fd, bound_write]
                    socket.send_fds(sock, [data], fds)
            finally:
                os.close(secret_fd)
                os.close(bound_write)
            left = deadline - loop.time()
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, left))
        except TimeoutError:
            pid = self._pids.get(ident)
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            raise KernelError("the forked kernel was not ready in time") from None
        except OSError as exc:
            self._fail(f"the fork server is gone ({exc})")
            raise KernelError(self.broken or "the fork server failed") from None
        except BaseException:
            # Cancelled as the kernel came up (or before it said it was
            # bound): nobody will hold it.
            pid = self._pids.get(ident)
            if future.done() and not future.cancelled() and future.exception() is None:
                pid = future.result()
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            raise
        finally:
            self._waiting.pop(ident, None)
            if not future.done():
                future.cancel()
            self._stop_reading(ident)

    def _on_bound(self, ident: int) -> None:
        """The kernel of request ``ident`` wrote on its pipe (it has bound its
        sockets), or the pipe closed (it ended first)."""
        fd = self._bound.get(ident)
        if fd is None:
            return
        try:
            said = os.read(fd, 1)
        except BlockingIOError:
            return
        except OSError:
            said = b""
        self._stop_reading(ident)
        self._on_readable()  # its "forked" (with its pid) was sent before
        future = self._waiting.get(ident)
        pid = self._pids.get(ident)
        if not said or pid is None:
            if future is not None and not future.done():
                future.set_exception(KernelError("the forked kernel ended before it was ready"))
            return
        if future is not None and not future.done():
            future.set_result(pid)
        else:
            # Nobody waits for it any more (cancelled, timed out): it must not run.
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def _stop_reading(self, ident: int) -> None:
        """Stop watching request ``ident``'s pipe and close it (once)."""
        fd = self._bound.pop(ident, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def exit_status(self, pid: int) -> int | None:
        """The wait status of the forked kernel ``pid``, once the zygote has
        reaped it and said so (messages already sent are read first)."""
        if pid not in self._exits:
            self._on_readable()
        return self._exits.get(pid)

    # -- messages -------------------------------------------------------------------------

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data, ancdata, _flags, _addr = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(_UCRED))
            except BlockingIOError:
                return
            except OSError as exc:
                self._fail(f"the fork server's socket failed ({exc})")
                return
            if not data:
                self._fail("the fork server exited")
                return
            try:
                message = json.loads(data)
            except ValueError:
                continue
            self._handle(message, _sender(ancdata))

    def _handle(self, message: dict[str, Any], sender: int | None) -> None:
        if "ready" in message and self._ready is not None and not self._ready.done():
            self._ready.set_result(None)
            return
        ident = message.get("id")
        if "error" in message and ident is None:
            self._fail(f"the fork server failed: {message['error']}")
            return
        if not isinstance(ident, int):
            return
        future = self._waiting.get(ident)
        if message.get("forked") and sender is not None:
            self._pids[ident] = sender
        elif "exit" in message:
            pid = self._pids.pop(ident, None)
            if pid is not None:
                if len(self._exits) >= _KEPT_EXITS:
                    del self._exits[next(iter(self._exits))]  # the oldest
                self._exits[pid] = int(message["exit"])
            if future is not None and not future.done():
                future.set_exception(KernelError("the forked kernel exited at once"))
        elif "error" in message and future is not None and not future.done():
            future.set_exception(KernelError(f"the fork server could not fork: {message['error']}"))

    def _fail(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(KernelError(why))
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)
        self._close_socket()

    def _close_socket(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            text = self._log_file.read_bytes()[-limit:].decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; its log: {text}" if text else ""

    # -- stop -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Let the zygote go: it forks no more, and exits once its last kernel
        has ended (at once when it has none). Its files are removed when it
        has exited by then."""
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            with contextlib.suppress(BaseException):
                await self._starting
        if self.broken is None:
            self.broken = "the fork server is closed"
        self._close_socket()
        process = self._process
        if process is None:
            return
        _reap_lingering()
        if any(is_alive(pid) for pid in self._pids.values()):
            # Kernels of its own still run (a daemon that lets them live on,
            # to be reattached later): it stays for them.
            _LINGERING.append(process)
            return
        watch = ProcessWatch.child(process)
        try:
            await watch.wait_exit(CLOSE_WAIT)
            if watch.is_alive():
                _LINGERING.append(process)
                return
        finally:
            watch.close()
        for path in (self._marker, self._log_file):
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            self.directory.rmdir()  # kernels' own directories are theirs to remove


_LINGERING: list[subprocess.Popen[bytes]] = []
"""Zygotes let go while their kernels run: reaped once they have exited."""


def _reap_lingering() -> None:
    _LINGERING[:] = [p for p in _LINGERING if p.poll() is None]


def _sealed(data: bytes) -> int:
    """A memfd holding ``data``, read from its start."""
    fd = os.memfd_create("recursa-fork-request", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _sender(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _UCRED:
            return int.from_bytes(data[:4], sys.byteorder, signed=True)
    return None


class ForkServers:
    """The fork servers of one pool, one per configuration, started on first use."""

    def __init__(self, runtime_dir: Path, env: Mapping[str, str]) -> None:
        self._runtime_dir = Path(os.path.abspath(runtime_dir))
        self._env = dict(env)
        self._servers: dict[tuple[object, ...], ForkServer] = {}
        self._closed = False

    def server_for(
        self,
        *,
        python: str,
        sandbox: SandboxPolicy,
        workspace: Path,
        api_socket: Path | None,
    ) -> ForkServer | None:
        """The server for kernels of this configuration; None where kernels
        are not forked (resource limits, or a server that failed)."""
        if sandbox.limits.controllers or self._closed or not FORKS_HERE:
            return None
        key = (python, sandbox, workspace, api_socket)
        server = self._servers.get(key)
        if server is None:
            name = "zygote" + connection_name().removeprefix("kernel")
            try:
                server = ForkServer(
                    python=python,
                    sandbox=sandbox,
                    workspace=workspace,
                    api_socket=api_socket,
                    runtime_dir=self._runtime_dir,
                    env=self._env,
                    name=name,
                )
            except KernelError as exc:  # no private directory for it
                log.warning("kernels are launched without the fork server: %s", exc)
                self._closed = True
                return None
            self._servers[key] = server
        if server.broken is not None:
            # It broke by itself (its zygote died) since it was last used.
            self._tell(server, server.broken)
            return None
        return server

    def failed(self, server: ForkServer, why: str) -> None:
        """A fork failed: launch kernels the usual way from now on (for this
        configuration), and say so once."""
        if server.broken is None:
            server.broken = why
        self._tell(server, why)

    def _tell(self, server: ForkServer, why: str) -> None:
        if not server.told:
            server.told = True
            log.warning("kernels are launched without the fork server: %s", why)

    async def aclose(self) -> None:
        """Close every server; kernels launched from now on (restarts of
        kernels handed out) are not forked."""
        self._closed = True
        servers = list(self._servers.values())
        self._servers.clear()
        await asyncio.gather(*(s.close() for s in servers), return_exceptions=True)


__all__ = ["READY_TIMEOUT", "ZYGOTE_MODULE", "ForkServer", "ForkServers"]

"""Serving the app with uvicorn on the daemon's two unix sockets, and only there.

The people's socket (``daemon.sock``) and the kernel socket
(``kernel-api/kernel.sock``) each get a uvicorn server of their own, with
their channel's app (:class:`~recursa.daemon.app.ChannelApps`); they start
and stop together. The sockets are made here, not by uvicorn: bound under a
restrictive umask and chmod 0600 before anything listens on them, inside
0700 directories, so there is no moment at which another user could
connect. No TCP listener exists.

A stop is asked for by ``POST /v1/shutdown`` (the app calls the host's
``shutdown`` and sets the shared :class:`~recursa.daemon.app.StopSignal`) or
by SIGTERM/SIGINT (here: ``host.shutdown(force=False)``, then the signal; a
second signal escalates to ``force=True`` and stops waiting for
connections). Open event streams end with a shutdown line, uvicorn drains the
rest, and :meth:`DaemonServer.serve` returns; the caller then closes the
host. On the way out the sockets and the state file are removed; after a
crash they stay, and the next daemon (holding the lock) replaces them (the
kernel socket in the same directory, which kernel sandboxes have mounted).

The server's background tasks (the stop watcher, a shutdown a signal began)
run under the daemon's :class:`~recursa.supervisor.Supervisor`, or under one
of the server's own that :meth:`DaemonServer.serve` closes before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Generator
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from recursa import __version__
from recursa.daemon.app import StopSignal, create_apps
from recursa.daemon.auth import KernelAuth
from recursa.daemon.host import Host, KernelHost
from recursa.daemon.paths import (
    DaemonPaths,
    DaemonState,
    kernel_socket_dir,
    prepare_home,
    read_state,
    remove_quietly,
    write_state,
)
from recursa.errors import DaemonError
from recursa.protocol.events import PROTOCOL_VERSION
from recursa.protocol.wire import HEARTBEAT_SECONDS, Shutdown
from recursa.supervisor import Supervisor

GRACEFUL_TIMEOUT = 10
"""Seconds uvicorn waits for open requests after a stop before cancelling them."""

logger = logging.getLogger("recursa.daemon")


def bind_socket(paths: DaemonPaths) -> socket.socket:
    """The daemon's socket, bound (not yet listening) and 0600.

    A file already at the path is removed first: the caller holds the daemon
    lock (or, in tests, owns the home), so it can only be a dead daemon's."""
    prepare_home(paths)
    remove_quietly(paths.socket)
    return bind_private_socket(paths.socket)


def bind_kernel_socket(paths: DaemonPaths) -> socket.socket:
    """The kernel socket, bound (not yet listening) and 0600, in its own
    directory (:func:`~recursa.daemon.paths.kernel_socket_dir`). A dead
    daemon's socket there is replaced; the directory is kept, as kernel
    sandboxes have it mounted."""
    kernel_socket_dir(paths)
    remove_quietly(paths.kernel_socket)
    return bind_private_socket(paths.kernel_socket)


def bind_private_socket(path: Path) -> socket.socket:
    """A unix socket bound at ``path`` (not yet listening), 0600 from its first
    moment: bound under a restrictive umask, which is process-wide, so call
    this before starting threads where you can."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o177)
        try:
            sock.bind(os.fspath(path))
        finally:
            os.umask(previous)
        os.chmod(path, 0o600)
    except OSError as exc:
        sock.close()
        raise DaemonError(f"cannot create the socket {path}: {exc.strerror}") from exc
    return sock


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling (which re-raises the signal
    after serving, killing the process before the host is closed)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_server(app: ASGIApp) -> QuietServer:
    """uvicorn configured for the daemon's app: HTTP/1.1 only, no lifespan, no
    logging of its own, a bounded graceful stop."""
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        http="h11",
        ws="none",
        lifespan="off",
        interface="asgi3",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT,
    )
    return QuietServer(config)


class DaemonServer:
    """One daemon's HTTP service over ``host`` on its bound sockets: the
    people's (:func:`bind_socket`) and, when given, the kernels'
    (:func:`bind_kernel_socket`)."""

    def __init__(
        self,
        host: Host,
        *,
        paths: DaemonPaths,
        sock: socket.socket,
        token: str,
        kernel_sock: socket.socket | None = None,
        kernel_host: KernelHost | None = None,
        kernel_auth: KernelAuth | None = None,
        heartbeat: float = HEARTBEAT_SECONDS,
        tasks: Supervisor | None = None,
    ) -> None:
        self._host = host
        self._paths = paths
        self._sock = sock
        self._kernel_sock = kernel_sock
        self._inodes = {path: os.stat(path).st_ino for path in self._socket_paths()}
        self.stop = StopSignal()
        self._apps = create_apps(
            host,
            token=token,
            stop=self.stop,
            kernel_host=kernel_host,
            kernel_auth=kernel_auth,
            heartbeat=heartbeat,
        )
        self._servers: list[QuietServer] = []
        self._signals = 0
        self._owns_tasks = tasks is None
        self._tasks = tasks or Supervisor("daemon server", logger=logger)

    async def serve(self, *, handle_signals: bool = True) -> DaemonState:
        """Write the state file, serve until a stop, clean up; returns the state
        it served with. ``handle_signals`` needs the main thread. A shutdown a
        signal began may outlive this call under the daemon's supervisor (it is
        cancelled here when the server's supervisor is its own)."""
        served = [(make_server(self._apps.people), self._sock)]
        if self._kernel_sock is not None:
            served.append((make_server(self._apps.kernel), self._kernel_sock))
        self._servers = [server for server, _ in served]
        state = DaemonState(
            pid=os.getpid(),
            socket=os.fspath(self._paths.socket),
            started_at=time.time(),
            version=__version__,
            protocol=PROTOCOL_VERSION,
        )
        loop = asyncio.get_running_loop()
        watcher = self._tasks.start(self._exit_on_stop(), name="stop watcher")
        signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            write_state(self._paths, state)
            logger.info(
                "serving on %s (pid %d)",
                " and ".join(map(os.fspath, self._socket_paths())),
                state.pid,
            )
            await _serve_all(served)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            watcher.cancel()
            await asyncio.wait([watcher])
            if self._owns_tasks:
                await self._tasks.aclose()
            self._remove_files(state)
        logger.info("stopped serving")
        return state

    def request_stop(self) -> None:
        """Stop serving without asking the host to shut down (tests, embedding)."""
        self.stop.request()

    async def _exit_on_stop(self) -> None:
        await self.stop.wait()
        for server in self._servers:
            server.should_exit = True

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        force = self._signals > 1
        logger.warning("%s: stopping%s", signal.Signals(sig).name, " now (force)" if force else "")
        if force:
            for server in self._servers:
                server.force_exit = True
        self._tasks.start(
            self._shutdown_host(force=force), name=f"shutdown on {signal.Signals(sig).name}"
        )

    async def _shutdown_host(self, *, force: bool) -> None:
        try:
            await self._host.shutdown(Shutdown(force=force))
        except Exception:
            logger.exception("the host failed to begin its shutdown")
        finally:
            self.stop.request()

    def _socket_paths(self) -> list[Path]:
        paths = [self._paths.socket]
        if self._kernel_sock is not None:
            paths.append(self._paths.kernel_socket)
        return paths

    def _remove_files(self, state: DaemonState) -> None:
        """Remove the sockets and state file if they are still this daemon's."""
        for path, inode in self._inodes.items():
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == inode:
                    remove_quietly(path)
        current = read_state(self._paths)
        if current is not None and current.pid == state.pid:
            remove_quietly(self._paths.state)


async def _serve_all(served: list[tuple[QuietServer, socket.socket]]) -> None:
    """Serve every (server, socket) until all have stopped. One that ends early
    (it failed to start, or crashed) stops the others, and its error is raised."""
    tasks = [asyncio.ensure_future(server.serve(sockets=[sock])) for server, sock in served]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for server, _ in served:
            server.should_exit = True
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = [
    "GRACEFUL_TIMEOUT",
    "DaemonServer",
    "QuietServer",
    "bind_kernel_socket",
    "bind_private_socket",
    "bind_socket",
    "make_server",
]

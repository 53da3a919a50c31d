"""The daemon's app served in this process, for the SDK, tests and
``recursa run --no-daemon``.

A runtime hosted in-process still has kernels in other processes, and they
reach it the one way they know: HTTP over a unix socket with their session's
token (:mod:`recursa.api`). :func:`serve_embedded` runs the same app as the
daemon (:func:`recursa.daemon.app.create_apps`) on the current event loop,
on two private sockets of its own, one per channel as the daemon does (the
people's, and the kernels' in a directory holding nothing else), and stops
it cleanly when the block ends: long polls and event streams end,
connections close, no task is left behind.

The client routes are served too, behind ``token``; without one they are
behind a random token nobody knows (the in-process caller holds the host
itself and needs no HTTP).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NamedTuple

from starlette.types import ASGIApp

from recursa.config import Config
from recursa.daemon.app import create_apps
from recursa.daemon.host import served
from recursa.daemon.paths import (
    KERNEL_SOCKET_NAME,
    MAX_SOCKET_PATH,
    check_home,
    private_dir,
    remove_quietly,
    short_socket_dir,
    socket_only_dir,
)
from recursa.daemon.replies import StopSignal
from recursa.daemon.server import QuietServer, bind_private_socket, make_server
from recursa.errors import DaemonError
from recursa.protocol.wire import HEARTBEAT_SECONDS


class Sockets(NamedTuple):
    """Where an embedded app listens."""

    people: Path
    """The people's socket: the client token, the person rows."""
    kernel: Path
    """The kernel socket (``RECURSA_API_SOCKET``): kernel tokens, the kernel
    rows; alone in its directory."""


@contextlib.asynccontextmanager
async def serve_embedded(
    host: object,
    *,
    directory: Path,
    token: str | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> AsyncIterator[Sockets]:
    """Serve ``host`` (people's and kernels' rows both: :func:`~recursa.daemon.host.served`)
    on two new sockets under ``directory`` (made 0700 if missing; a too deep
    one is replaced by a private short one), 0600, and yield their paths; kernels
    get :attr:`Sockets.kernel` as ``RECURSA_API_SOCKET``. The servers accept
    connections from the moment the paths are yielded, and are stopped and
    their sockets (and the kernel socket's directory) removed when the block ends."""
    people, kernel_host = served(host)
    if kernel_host is None:
        raise TypeError(f"{type(host).__name__} is not a KernelHost: kernels could not use it")
    stop = StopSignal()
    apps = create_apps(
        people,
        token=token or secrets.token_urlsafe(32),
        stop=stop,
        kernel_host=kernel_host,
        heartbeat=heartbeat,
    )
    name = secrets.token_hex(6)
    paths = Sockets(
        people=_new_socket_path(directory, f"api-{name}.sock"),
        kernel=_new_socket_path(directory, f"kernel-{name}/{KERNEL_SOCKET_NAME}"),
    )
    socket_only_dir(paths.kernel.parent)
    try:
        async with (
            _serving(apps.people, paths.people, stop),
            _serving(apps.kernel, paths.kernel, stop),
        ):
            yield paths
    finally:
        with contextlib.suppress(OSError):
            paths.kernel.parent.rmdir()


@contextlib.asynccontextmanager
async def _serving(app: ASGIApp, path: Path, stop: StopSignal) -> AsyncIterator[QuietServer]:
    """``app`` served on a new private socket at ``path`` for the block."""
    server = make_server(app)
    sock = bind_private_socket(path)
    try:
        config = server.config
        if not config.loaded:
            config.load()
        server.lifespan = config.lifespan_class(config)
        # uvicorn's serve() in two halves, without its signal handling and its
        # ticking main loop (which only watches for a stop and renews the Date
        # header, left out): started before the path is yielded, so every
        # connection is accepted; stopped when the block ends.
        await server.startup(sockets=[sock])
        try:
            yield server
        finally:
            stop.request()  # long polls and event streams end now
            server.should_exit = True
            await server.shutdown(sockets=[sock])
    finally:
        sock.close()
        remove_quietly(path)


@contextlib.asynccontextmanager
async def serve_local(config: Config) -> AsyncIterator[tuple[Path, str]]:
    """The runtime of ``config`` hosted in this process (``recursa run --no-daemon``):
    opened without recovering other sessions or warming kernels, served on a
    private socket under ``config.home / "api"`` with a fresh token, closed
    when the block ends. Yields the socket and the token."""
    from recursa.runtime import Runtime
    from recursa.runtime.host import RuntimeHost

    if config.home.is_dir():
        check_home(config.home)  # as the daemon does; a new home is made 0700 by the store
    token = secrets.token_urlsafe(32)
    async with (
        await Runtime.open(config, warm_kernels=0) as runtime,
        serve_embedded(RuntimeHost(runtime), directory=config.home / "api", token=token) as sockets,
    ):
        runtime.api_socket = sockets.kernel  # kernels reach rlm() and agent_message here
        yield sockets.people, token


def _new_socket_path(directory: Path, name: str) -> Path:
    """``directory / name`` (``directory`` made 0700 if missing), absolute since
    kernels run elsewhere; or, when that is too long for a unix socket, the
    same name in the private per-user directory the daemon uses for the same
    reason. A name's own directory is the caller's to make."""
    directory = Path(os.path.abspath(directory))
    if len(os.fsencode(directory / name)) > MAX_SOCKET_PATH:
        directory = short_socket_dir()
        private_dir(directory)
        return directory / name
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise DaemonError(f"cannot use {directory} for a socket: {exc.strerror}") from exc
    return directory / name


__all__ = ["Sockets", "serve_embedded", "serve_local"]

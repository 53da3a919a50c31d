"""The daemon's app served in this process, for the SDK, tests and
``recursa run --no-daemon``.

A runtime hosted in-process still has kernels in other processes, and they
reach it the one way they know: HTTP over a unix socket with their session's
token (:mod:`recursa.api`). :func:`serve_embedded` runs the same app as the
daemon (:func:`recursa.daemon.app.create_app`) on the current event loop, on
a private socket of its own, and stops it cleanly when the block ends: long
polls and event streams end, connections close, no task is left behind.

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

from recursa.config import Config
from recursa.daemon.app import create_app
from recursa.daemon.host import served
from recursa.daemon.paths import MAX_SOCKET_PATH, private_dir, remove_quietly, short_socket_dir
from recursa.daemon.replies import StopSignal
from recursa.daemon.server import bind_private_socket, make_server
from recursa.errors import DaemonError
from recursa.protocol.wire import HEARTBEAT_SECONDS


@contextlib.asynccontextmanager
async def serve_embedded(
    host: object,
    *,
    directory: Path,
    token: str | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> AsyncIterator[Path]:
    """Serve ``host`` (people's and kernels' rows both: :func:`~recursa.daemon.host.served`)
    on a new socket in ``directory`` (made 0700 if missing; a too deep one is
    replaced by a private short one), 0600, and yield its path; kernels get it
    as ``RECURSA_API_SOCKET``. The server accepts
    connections from the moment the path is yielded, and is stopped and its
    socket removed when the block ends."""
    people, kernel_host = served(host)
    if kernel_host is None:
        raise TypeError(f"{type(host).__name__} is not a KernelHost: kernels could not use it")
    path = _new_socket_path(directory)
    stop = StopSignal()
    app = create_app(
        people,
        token=token or secrets.token_urlsafe(32),
        stop=stop,
        kernel_host=kernel_host,
        heartbeat=heartbeat,
    )
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
            yield path
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

    token = secrets.token_urlsafe(32)
    async with (
        await Runtime.open(config, warm_kernels=0) as runtime,
        serve_embedded(RuntimeHost(runtime), directory=config.home / "api", token=token) as socket,
    ):
        runtime.api_socket = socket  # kernels reach rlm() and agent_message here
        yield socket, token


def _new_socket_path(directory: Path) -> Path:
    """A fresh socket path in ``directory`` (made 0700 if missing), absolute
    since kernels run elsewhere; or, when that is too long for a unix socket,
    in the private per-user directory the daemon uses for the same reason."""
    name = f"api-{secrets.token_hex(6)}.sock"
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


__all__ = ["serve_embedded", "serve_local"]

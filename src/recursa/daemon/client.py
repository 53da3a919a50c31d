"""The daemon's client: typed async calls over the unix socket.

:class:`DaemonClient` speaks HTTP/1.1 to the daemon of one ``RECURSA_HOME``
with the token from ``daemon.token``. It never starts a daemon (that is
:mod:`recursa.daemon.process`): a daemon that cannot be reached is a
:class:`~recursa.errors.DaemonError` saying so in one line.

Idempotency: every mutating call carries this client's id (random, one per
client object) and a fresh command id. When the connection drops before a
reply, the call is sent once more with the *same* ids, after waiting (up to
``reconnect_window``) for the daemon to accept connections again; the daemon
answers a repeated command with its stored result, or ``uncertain`` when
its outcome was lost in a crash (→ :class:`~recursa.errors.UncertainCommand`).

Event streams: :meth:`DaemonClient.events` yields records in order; when the
connection drops (or falls silent past ``stream_timeout``, three missed
heartbeats by default) it reconnects from the last ``seq`` it yielded, so
nothing is missed or repeated, and gives up with a DaemonError after
``reconnect_window`` without a connection. Transient records (``seq == 0``)
sent while disconnected are lost; they are never stored.

Errors from the daemon become the matching error class with the daemon's
one-line message (see :mod:`recursa.daemon.errormap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlencode

from recursa.daemon.errormap import MAX_MESSAGE_CHARS
from recursa.daemon.harden import harden_process
from recursa.daemon.paths import DaemonPaths, read_token
from recursa.daemon.transport import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    Dropped,
    NotRunning,
    Outgoing,
    Transport,
    decode_reply,
    error_of,
    parse_line,
)
from recursa.environ import environment, home_dir
from recursa.errors import DaemonError, one_line
from recursa.protocol.operations import Operation, decode
from recursa.protocol.person_ops import (
    CREATE_SESSION,
    EVENTS,
    FEED,
    INTERRUPT,
    SEND,
    SESSION,
    SESSIONS,
    SHUTDOWN,
    STATUS,
    STOP,
    UNLOAD,
    USAGE,
    WAIT_QUIET,
    EventsQuery,
    FeedQuery,
    QuietWait,
    SendTo,
    SessionRef,
    SessionsQuery,
)
from recursa.protocol.plain import from_plain
from recursa.protocol.wire import (
    HEARTBEAT_SECONDS,
    CreateSession,
    DaemonStatus,
    Receipt,
    SendMessage,
    SessionInfo,
    Shutdown,
    UsageNode,
)

DEFAULT_TIMEOUT = 120.0
RECONNECT_WINDOW = 30.0
STREAM_TIMEOUT = 3 * HEARTBEAT_SECONDS
QUIET_PIECE = 30.0
"""Longest wait one ``wait-quiet`` request asks the daemon for."""
if TYPE_CHECKING:
    from recursa.config import Config
    from recursa.daemon.machine import Row as ModelRow
    from recursa.kernel.venv import KernelEnv
    from recursa.protocol.events import EventRecord

Req = TypeVar("Req")
Rep = TypeVar("Rep")


class DaemonClient:
    """A client of the daemon serving ``home``. Use as ``async with``, or call :meth:`aclose`.

    ``socket`` overrides where to connect (tests put a proxy there; an
    in-process daemon has its own), ``token`` the home's token file;
    ``timeout`` bounds one call's reply."""

    def __init__(
        self,
        home: Path | str,
        *,
        socket: Path | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        reconnect_window: float = RECONNECT_WINDOW,
        stream_timeout: float = STREAM_TIMEOUT,
    ) -> None:
        self._paths = DaemonPaths.for_home(home)
        self._timeout = timeout
        self._reconnect_window = reconnect_window
        self._stream_timeout = stream_timeout
        self.client_id = secrets.token_hex(8)
        self._transport = Transport(
            self._paths,
            socket=socket,
            token=token,
            timeout=timeout,
            reconnect_window=reconnect_window,
            client_id=self.client_id,
        )

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    # -- the operations -------------------------------------------------------------------------

    async def call(self, op: Operation[Req, Rep], request: Req) -> Rep:
        """Run one operation of the table (:mod:`recursa.protocol.person_ops`) and
        return its reply; a ``command`` row carries this client's command key."""
        path, query, body = op.url(request)
        if query:
            path += f"?{urlencode(query)}"
        timeout = None if op.timeout is None else max(self._timeout, op.timeout)
        data = await self._transport.call(
            op.method, path, body=body, mutating=op.command, retry=op.retry, timeout=timeout
        )
        try:
            reply: Rep = decode(op.reply, data)
        except ValueError as exc:
            raise DaemonError(
                f"the daemon sent a malformed reply to {op.method} {path}: {_shortly(exc)}"
            ) from None
        return reply

    async def probe(self) -> DaemonStatus | None:
        """The status, or None when no daemon accepts a connection (or none ever
        ran here, or the connection broke: it is going away). Never retries."""
        try:
            response = await self._transport.send(Outgoing("GET", STATUS.path))
        except (NotRunning, Dropped):
            return None
        except DaemonError:
            if read_token(self._paths) is None:
                return None
            raise
        try:
            return from_plain(DaemonStatus, decode_reply(response, "GET", STATUS.path))
        except ValueError as exc:
            raise DaemonError(
                f"the daemon sent a malformed reply to GET {STATUS.path}: {_shortly(exc)}"
            ) from None

    # The most used rows, spelled out (everything else: :meth:`call`).

    async def status(self) -> DaemonStatus:
        return await self.call(STATUS, None)

    async def create_session(self, request: CreateSession) -> SessionInfo:
        return await self.call(CREATE_SESSION, request)

    async def sessions(self, ids: Collection[str] | None = None) -> list[SessionInfo]:
        """Every session, or only those of ``ids``."""
        query = SessionsQuery(None if ids is None else ",".join(ids))
        return await self.call(SESSIONS, query)

    async def session(self, ref: str) -> SessionInfo:
        return await self.call(SESSION, SessionRef(ref))

    async def send(self, ref: str, request: SendMessage) -> Receipt:
        return await self.call(SEND, SendTo(ref, request.text, request.mode, request.context_files))

    async def interrupt(self, ref: str) -> SessionInfo:
        return await self.call(INTERRUPT, SessionRef(ref))

    async def stop(self, ref: str) -> SessionInfo:
        return await self.call(STOP, SessionRef(ref))

    async def unload(self, ref: str) -> SessionInfo:
        return await self.call(UNLOAD, SessionRef(ref))

    async def usage(self, ref: str) -> UsageNode:
        return await self.call(USAGE, SessionRef(ref))

    async def shutdown(self, *, force: bool = False) -> None:
        """Ask the daemon to stop; returns once it has begun (it exits soon after)."""
        await self.call(SHUTDOWN, Shutdown(force=force))

    async def wait_quiet(self, ref: str, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until the session's whole tree is quiet (it and every descendant
        idle, nothing queued for it): True; False once ``timeout`` seconds have
        passed (None: no limit). The daemon is asked in pieces of at most
        :data:`QUIET_PIECE` seconds, so a long wait never meets the reply
        timeout, and a daemon restart in between is survived like any call's."""
        piece_max = min(QUIET_PIECE, self._timeout / 2)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = piece_max if deadline is None else deadline - time.monotonic()
            piece = max(0.0, min(piece_max, left))
            if (await self.call(WAIT_QUIET, QuietWait(ref, piece))).quiet:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    async def events(
        self,
        ref: str,
        *,
        after: int = 0,
        follow: bool = False,
        in_progress: bool = False,
        limit: int | None = None,
        before: int | None = None,
    ) -> AsyncIterator[EventRecord]:
        """The session's records with ``seq > after`` (with ``limit``, only the
        last ``limit`` of them below ``before``); with ``follow``, then each new
        one as it happens, until the consumer stops (close the iterator:
        ``contextlib.aclosing``). With ``in_progress`` too, the first connection
        also sends the streamed pieces of the reply or cell in progress (a
        reconnection does not: they were seen). See the module docstring for
        reconnection."""
        path = EVENTS.url(EventsQuery(ref))[0]
        stream = self._stream(
            path, f"the event stream of {ref}", after, follow,
            in_progress=in_progress and follow, limit=limit, before=before,
        )  # fmt: skip
        async for record in stream:
            yield record

    async def feed(self, *, after: int = 0, follow: bool = False) -> AsyncIterator[EventRecord]:
        """Every session's stored records with ``seq > after``, in seq order;
        with ``follow``, then each new one, reconnecting like :meth:`events`."""
        path = FEED.url(FeedQuery())[0]
        async for record in self._stream(path, "the event feed", after, follow):
            yield record

    async def _stream(
        self,
        path: str,
        what: str,
        after: int,
        follow: bool,
        *,
        in_progress: bool = False,
        limit: int | None = None,
        before: int | None = None,
    ) -> AsyncIterator[EventRecord]:
        """An NDJSON stream of records from ``path``. A reconnection resumes after
        the last seq yielded and keeps ``before``; it drops ``limit`` once a
        record came (the last N below ``before`` that are newer than the cursor
        are all the rest of them), and ``in_progress`` (those pieces were seen)."""
        cursor = after
        yielded = 0
        connected_once = False
        deadline: float | None = None
        delay = BACKOFF_FIRST
        while True:
            params = {"after": str(cursor), "follow": "1" if follow else "0"}
            if in_progress and not connected_once:
                params["in_progress"] = "1"
            if before is not None:
                params["before"] = str(before)
            if limit is not None and not yielded:
                params["limit"] = str(limit)
            try:
                async with self._transport.stream(
                    path, params, timeout=self._stream_timeout
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise error_of(response)
                    connected_once = True
                    async for line in response.aiter_lines():
                        record = parse_line(line)
                        if record is None:
                            continue
                        if 0 < record.seq <= cursor:
                            continue  # already yielded before a reconnect
                        if record.seq:
                            cursor = record.seq
                            yielded += 1
                        deadline, delay = None, BACKOFF_FIRST
                        yield record
                if not follow:
                    return
                # A followed stream ends only with a shutdown line; anything
                # else is a connection cut short: resume.
            except NotRunning as exc:
                if not connected_once:
                    raise self._transport.not_running() from exc
            except Dropped:
                pass
            now = time.monotonic()
            if deadline is None:
                deadline = now + self._reconnect_window
            if now >= deadline:
                raise DaemonError(
                    f"lost {what} and could not reconnect within "
                    f"{self._reconnect_window:g}s: is the daemon running? (recursa daemon status)"
                )
            await asyncio.sleep(min(delay, max(0.0, deadline - now)))
            delay = min(delay * 2, BACKOFF_MAX)


def _shortly(problem: Exception) -> str:
    """A reply's misfit, cut to an error line's length (a path through a deep
    tree is long)."""
    return one_line(str(problem), first_line=True, limit=MAX_MESSAGE_CHARS)


@contextlib.asynccontextmanager
async def connect(
    config: Config | None = None, *, in_process: bool = False
) -> AsyncIterator[DaemonClient]:
    """A client of the daemon serving ``config.home``, started when none runs.
    Without ``config``, the home is the environment's (``RECURSA_HOME``) and the
    configuration file is not read here: a running daemon has its own, and one
    started here reads it (a malformed file is its error then).

    With ``in_process`` (``recursa run --no-daemon``), the runtime is hosted in
    this process instead, on a private socket with a token of its own, and
    closed when the block ends (sessions stop; kernels are snapshotted). The
    front end then runs the one path it runs against a daemon."""
    if not in_process:
        from recursa.daemon import process

        home = home_dir() if config is None else config.home
        await process.start(home, env=environment(), reuse=True)
        async with DaemonClient(home) as client:
            yield client
        return
    from recursa.config import load_config
    from recursa.daemon.embedded import serve_local

    config = config or load_config()
    async with (
        serve_local(config) as (socket, token),
        DaemonClient(config.home, socket=socket, token=token) as client,
    ):
        yield client


async def daemon_status(home: Path | str) -> DaemonStatus | None:
    """The status of the daemon serving ``home``, or None when none runs."""
    from recursa.daemon import process

    return await process.status(home)


async def start_daemon(config: Config) -> int:
    """Start the daemon serving ``config.home`` when none runs; its pid."""
    from recursa.daemon import process

    return (await process.start(config.home, env=environment(), reuse=True)).pid


async def stop_daemon(home: Path | str, *, force: bool) -> int:
    """Stop the daemon serving ``home``; the pid it had."""
    from recursa.daemon import process

    return await process.stop(home, force=force)


# -- what a front end asks of this machine without a session ---------------------------------


def openapi_document() -> dict[str, Any]:
    """The people's API as OpenAPI (:mod:`recursa.daemon.openapi`)."""
    from recursa.daemon.openapi import openapi

    return openapi()


def model_rows(config: Config) -> list[ModelRow]:
    """Every provider and embedded model here, and what each lacks (``recursa models``)."""
    from recursa.daemon import machine

    return machine.rows(config)


def default_model(config: Config) -> str | None:
    from recursa.daemon import machine

    return machine.default_model(config)


def prepare_model(alias: str, config: Config, progress: Callable[[str], None]) -> Path:
    """Join and verify an embedded model's weights (done once); their path."""
    from recursa.daemon import machine

    return machine.prepare(alias, config, progress)


def kernel_env(config: Config) -> KernelEnv:
    """The managed kernel environment of ``config.home`` (``recursa kernel-env``),
    its pip run in the kernels' sandbox; it needs no daemon."""
    from recursa.kernel.venv import KernelEnv

    return KernelEnv.for_config(config)


def install_command(alias: str) -> list[str]:
    from recursa.daemon import machine

    return machine.install_command(alias)


__all__ = [
    "DEFAULT_TIMEOUT",
    "QUIET_PIECE",
    "RECONNECT_WINDOW",
    "STREAM_TIMEOUT",
    "DaemonClient",
    "connect",
    "daemon_status",
    "default_model",
    "harden_process",
    "install_command",
    "kernel_env",
    "model_rows",
    "openapi_document",
    "prepare_model",
    "start_daemon",
    "stop_daemon",
]

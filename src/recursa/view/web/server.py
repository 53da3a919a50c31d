"""``recursa web``: the Agents View served to a browser on this machine's loopback.

The page (``static/``: plain HTML, JS and CSS from the package, nothing from a
CDN) speaks to this server only; this server speaks to the daemon only through
:class:`~recursa.daemon.client.DaemonClient`, so the browser can do exactly
what the daemon's people's API allows, no more.

Routes (every one behind :class:`~recursa.view.web.access.Guard`):

``GET /``, ``GET /static/...``
    the page and its assets (no token: package files, no data; the page
    reads the token from the URL's fragment and sends it with every call).
``POST /api/op/{name}``
    the generic proxy: for every *person* row of the daemon's operation table
    but ``shutdown`` and the stream rows, the JSON body is the row's request
    (validated by :func:`~recursa.protocol.wire.from_json`), the reply is the
    row's reply as JSON. An error is ``{"kind", "message"}`` (one line) with
    its status: ``invalid`` 400, ``not_found`` 404, ``conflict`` and
    ``uncertain`` 409, ``unavailable`` 422, ``daemon`` 503 (the daemon cannot
    be reached or failed), ``internal`` 500.
``GET /api/feed?after=N``
    server-sent events (:mod:`recursa.view.web.sse`): every stored record of
    every session after ``N`` (or after ``Last-Event-ID``), then each new one.
    Without either, from now: the page reads the sessions themselves and wants
    only what changes them.
``GET /api/events/{session}?after=N``
    server-sent events of one session after ``N`` (or ``Last-Event-ID``), with
    the pieces of a reply or cell in progress on the first connection.
``GET /api/events/{session}/page?before=B&limit=L``
    JSON: the last ``L`` stored records of the session before ``B`` (none:
    the newest), oldest first. The page reads a long history backwards, a page
    at a time; nothing reads a whole log per update.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from recursa.daemon.client import DaemonClient
from recursa.errors import (
    WIRE_EXCEPTIONS,
    ConfigError,
    DaemonError,
    RecursaError,
    UsageError,
    one_line,
)
from recursa.protocol.events import record_to_dict
from recursa.protocol.operations import Operation, encode, operations
from recursa.protocol.person_ops import SESSION, SessionRef
from recursa.protocol.wire import ERROR_STATUS, ErrorKind, from_json
from recursa.view.web.access import Guard
from recursa.view.web.sse import sse

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 1 << 20
DEFAULT_PAGE = 200
MAX_PAGE = 2000
MAX_MESSAGE_CHARS = 1000
"""The longest error message the page is sent."""
REFUSED_OPS = frozenset({"shutdown"})

ClientFactory = Callable[[], contextlib.AbstractAsyncContextManager[DaemonClient]]


def proxied_ops() -> dict[str, Operation[Any, Any]]:
    """The daemon's rows the page may call by name: the people's, but not
    ``shutdown`` (the page never stops the daemon) nor the streams (served as
    server-sent events instead)."""
    return {
        op.name: op
        for op in operations()
        if op.audience == "person" and not op.stream and op.name not in REFUSED_OPS
    }


def describe(exc: RecursaError) -> tuple[str, str]:
    """The page's ``(kind, message)`` for an error of the daemon's client."""
    kind, _ = _kind_status(exc)
    return kind, one_line(exc, limit=MAX_MESSAGE_CHARS)


def _kind_status(exc: RecursaError) -> tuple[str, int]:
    """The daemon's own error kinds (what the client raised for them), with
    their statuses; a failure to reach or be let into the daemon is the
    server's, not the page's: ``daemon``, 503."""
    if isinstance(exc, DaemonError):  # AuthError too: this server's token was refused
        return "daemon", 503
    if isinstance(exc, ConfigError):
        return "invalid", ERROR_STATUS["invalid"]
    for kind, cls in WIRE_EXCEPTIONS.items():
        if isinstance(exc, cls):
            return kind, ERROR_STATUS.get(cast(ErrorKind, kind), 500)
    return "internal", 500


def error_reply(kind: str, message: str, status: int) -> JSONResponse:
    return JSONResponse(
        {"kind": kind, "message": one_line(message, limit=MAX_MESSAGE_CHARS)}, status_code=status
    )


def failed(exc: RecursaError) -> JSONResponse:
    """The reply for an error of the daemon's client: its kind, status and one line."""
    kind, status = _kind_status(exc)
    return error_reply(kind, one_line(exc), status)


class WebView:
    """The routes' state: one daemon client for the server's life."""

    def __init__(self, factory: ClientFactory, on_ready: Callable[[], None] | None = None) -> None:
        self._factory = factory
        self._on_ready = on_ready
        self._client: DaemonClient | None = None
        self.ops = proxied_ops()

    @property
    def client(self) -> DaemonClient:
        if self._client is None:
            raise DaemonError("the web view is not connected to the daemon")
        return self._client

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self._factory() as client:
            self._client = client
            if self._on_ready is not None:
                self._on_ready()
            try:
                yield
            finally:
                self._client = None

    # -- the page --------------------------------------------------------------------------

    async def index(self, _request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    # -- the proxy ---------------------------------------------------------------------------

    async def op(self, request: Request) -> Response:
        name = request.path_params["name"]
        op = self.ops.get(name)
        if op is None:
            return error_reply("not_found", f"no operation {name!r} for the page", 404)
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return error_reply("invalid", f"a request body has at most {MAX_BODY_BYTES} bytes", 413)
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return error_reply("invalid", f"{name}: the body is not JSON", 400)
        if not isinstance(body, dict):
            return error_reply("invalid", f"{name}: the body must be a JSON object", 400)
        try:
            value = None if op.request is None else from_json(op.request, body)
        except ValueError as exc:
            return error_reply("invalid", str(exc), 400)
        try:
            result = await self.client.call(op, value)
        except RecursaError as exc:
            return failed(exc)
        return JSONResponse(encode(result), status_code=200)

    # -- the streams ---------------------------------------------------------------------------

    async def feed(self, request: Request) -> Response:
        try:
            after = _cursor(request)
            if after is None:
                after = await self._now()
        except RecursaError as exc:
            return failed(exc)
        except ValueError as exc:
            return error_reply("invalid", str(exc), 400)
        records = self.client.feed(after=after, follow=True)
        return _stream(records)

    async def events(self, request: Request) -> Response:
        session = request.path_params["session"]
        try:
            after = _cursor(request) or 0
            info = await self.client.call(SESSION, SessionRef(session))
        except RecursaError as exc:
            return failed(exc)
        except ValueError as exc:
            return error_reply("invalid", str(exc), 400)
        # The pieces in progress only on a first connection: a reconnecting
        # browser (Last-Event-ID) saw them.
        first = "last-event-id" not in request.headers
        records = self.client.events(info.id, after=after, follow=True, in_progress=first)
        return _stream(records)

    async def page(self, request: Request) -> Response:
        session = request.path_params["session"]
        try:
            before = _number(request, "before")
            limit = min(_number(request, "limit") or DEFAULT_PAGE, MAX_PAGE)
            info = await self.client.call(SESSION, SessionRef(session))
            records = [
                record_to_dict(record)
                async for record in self.client.events(
                    info.id, before=before, limit=limit, follow=False
                )
            ]
        except ValueError as exc:
            return error_reply("invalid", str(exc), 400)
        except RecursaError as exc:
            return failed(exc)
        return JSONResponse(records)

    async def _now(self) -> int:
        """The seq of the newest stored record: the page reads the sessions
        after it asks for this, so nothing between is lost (a record in
        between is at worst shown again)."""
        return (await self.client.status()).last_seq

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.index, methods=["GET"]),
            Route("/api/op/{name}", self.op, methods=["POST"]),
            Route("/api/feed", self.feed, methods=["GET"]),
            Route("/api/events/{session}/page", self.page, methods=["GET"]),
            Route("/api/events/{session}", self.events, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]


def create_app(
    factory: ClientFactory, *, token: str, port: int, on_ready: Callable[[], None] | None = None
) -> ASGIApp:
    """The whole web view as one ASGI app: the routes behind the guard.
    ``factory`` opens the daemon's client for the app's life (its lifespan);
    ``on_ready`` is called once it is open."""
    view = WebView(factory, on_ready)
    app = Starlette(routes=view.routes(), lifespan=view.lifespan)
    return Guard(app, token=token, port=port)


def bind(port: int = 0) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (never another interface); ``port``
    0 takes a free one. A port in use is a one-line :class:`UsageError`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    return sock


async def serve(factory: ClientFactory, *, port: int = 0, on_ready: Callable[[str], None]) -> None:
    """Serve the web view on 127.0.0.1 until interrupted (Ctrl-C). ``on_ready``
    gets the URL to open, ``http://127.0.0.1:PORT/#token=TOKEN`` with a new
    random token in its fragment (never sent to a server), once the daemon's
    client is connected and the port accepts connections."""
    import uvicorn

    sock = bind(port)
    actual = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    url = f"http://127.0.0.1:{actual}/#token={token}"
    app = create_app(factory, token=token, port=actual, on_ready=lambda: on_ready(url))
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=2,
    )
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()


def _stream(records: AsyncIterator[Any]) -> StreamingResponse:
    return StreamingResponse(
        sse(records, describe=describe),
        media_type="text/event-stream",
        headers={"x-accel-buffering": "no"},
    )


def _cursor(request: Request) -> int | None:
    """Where a stream starts: ``Last-Event-ID`` (a reconnect) over ``after``."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after")
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"after must be a whole number, not {raw[:40]!r}")
    return int(raw)


def _number(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) == 0:
        raise ValueError(f"{name} must be a positive whole number, not {raw[:40]!r}")
    return int(raw)


__all__ = [
    "MAX_BODY_BYTES",
    "REFUSED_OPS",
    "STATIC",
    "WebView",
    "bind",
    "create_app",
    "proxied_ops",
    "serve",
]

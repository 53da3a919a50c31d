"""The daemon's HTTP API: a thin ASGI translation over a :class:`~recursa.daemon.host.Host`.

Client routes (all under :data:`~recursa.protocol.wire.API_PREFIX`, all need
the client token; bodies and replies are the wire values of
:mod:`recursa.protocol.wire` as JSON)::

    GET  /status                          → DaemonStatus
    POST /sessions          CreateSession → SessionInfo   201
    GET  /sessions                        → [SessionInfo]
    GET  /sessions/{ref}                  → SessionInfo
    POST /sessions/{ref}/messages  SendMessage → Receipt
    POST /sessions/{ref}/interrupt        → SessionInfo
    POST /sessions/{ref}/stop             → SessionInfo
    GET  /sessions/{ref}/events?after=SEQ&follow=0|1  → NDJSON stream of records
    GET  /sessions/{ref}/usage            → UsageNode
    POST /sessions/{ref}/wait-quiet  {"timeout": seconds|null} → {"quiet": bool}  (a long poll)
    GET  /sessions/{ref}/prompt           → HarnessPrompt
    POST /sessions/{ref}/refine    RefineRequest → RefineReply
    GET  /harness/entries?kind=K&scope=S&status=S        → [HarnessEntry]
    GET  /harness/entries/{entry}                        → HarnessDetail
    GET  /harness/entries/{entry}/diff?from=V&to=V       → {"diff": text}
    POST /harness/entries/{entry}/revert   HarnessRevert   → HarnessEntry
    POST /harness/entries/{entry}/approve  HarnessDecision → HarnessEntry
    POST /harness/entries/{entry}/reject   HarnessDecision → HarnessEntry
    GET  /harness/log?limit=N                            → [HarnessEntry]  (newest first)
    POST /shutdown          Shutdown      → {}            202, then the server stops

Goals and schedules (``/sessions/{ref}/goal``, ``/schedules``, ...) are the
routes of :mod:`recursa.daemon.control_routes`.

The kernels' routes, under ``/kernel/`` and for kernel tokens only, are
those of :mod:`recursa.daemon.kernel_routes`; they exist when the app is
given a :class:`~recursa.daemon.host.KernelHost`.

``ref`` is a session id, a unique id prefix or a name; ``entry`` a harness
entry's id, unique id prefix or title (it may hold slashes, so a title
ending in ``/diff`` is reached by its id). Mutating routes pass
the ``Recursa-Client`` and ``Recursa-Command`` headers on as a
:class:`~recursa.protocol.wire.CommandKey` (None when both are absent; one
without the other is a bad request).

Every failure is one JSON error body (:mod:`recursa.daemon.errormap`): a
malformed request is 400, a bug is logged with its traceback and answered 500
with the one line ``internal error: Type: message``. A long poll waits on the
host alone (:func:`~recursa.daemon.replies.long_poll`) and ends when the
client goes away or the server stops.

An event stream sends one :func:`~recursa.protocol.events.record_to_dict`
per line, and the control lines of :data:`~recursa.protocol.wire.StreamControl`:
a heartbeat after ``heartbeat`` seconds of silence, an error line if the
host's iterator fails, a shutdown line when the server stops. It ends when
the client disconnects, and the host's iterator is closed then, always.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from recursa.daemon.auth import KernelAuth, TokenAuth
from recursa.daemon.control_routes import (
    CONTROL_KERNEL_METHODS,
    control_kernel_routes,
    control_routes,
)
from recursa.daemon.errormap import one_line, wire_error
from recursa.daemon.host import Host, KernelHost
from recursa.daemon.kernel_routes import (
    entry_ref,
    harness_filters,
    instructions_of,
    kernel_routes,
    version_param,
)
from recursa.daemon.replies import (
    MAX_BODY_BYTES,
    StopSignal,
    error_response,
    guarded,
    json_object,
    json_reply,
    long_poll,
    read_json,
    seconds_field,
)
from recursa.protocol.events import EventRecord, json_text, record_to_dict
from recursa.protocol.wire import (
    API_PREFIX,
    HEADER_CLIENT,
    HEADER_COMMAND,
    HEARTBEAT_SECONDS,
    CommandKey,
    CreateSession,
    HarnessDecision,
    HarnessRevert,
    RefineRequest,
    SendMessage,
    Shutdown,
    error_body,
    from_json,
    to_json,
)

MAX_HEADER_ID_CHARS = 200
DEFAULT_LOG_LIMIT = 50
"""Versions ``GET /harness/log`` returns when no ``limit`` is given."""
NDJSON = "application/x-ndjson"
KERNEL_METHODS = (
    "session_of_token",
    "spawn",
    "subagents",
    "subagent",
    "wait",
    "delete_subagent",
    "message",
    "inbox",
    "stage_edit",
    "visible_entries",
    "visible_entry",
    "visible_history",
    "visible_diff",
    "refine_caller",
    *CONTROL_KERNEL_METHODS,
)
"""What a host must have to serve the kernels' routes (:class:`KernelHost`)."""

logger = logging.getLogger("recursa.daemon")


def kernel_host_of(host: object) -> KernelHost | None:
    """``host`` as a :class:`KernelHost` when it has the methods of one (the
    runtime's host serves both), else None."""
    if all(callable(getattr(host, name, None)) for name in KERNEL_METHODS):
        return cast(KernelHost, host)
    return None


def create_app(
    host: Host,
    *,
    token: str,
    stop: StopSignal,
    kernel_host: KernelHost | None = None,
    kernel_auth: KernelAuth | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> ASGIApp:
    """The daemon's ASGI app: the routes above, behind :class:`~recursa.daemon.auth.TokenAuth`.

    With ``kernel_host``, the kernels' routes too, and a kernel token is
    mapped to its session by ``kernel_host.session_of_token`` (unless
    ``kernel_auth`` is given: tests)."""
    api = _Api(host, stop, heartbeat)
    p = API_PREFIX
    routes = [
        Route(f"{p}/status", guarded(api.status), methods=["GET"]),
        Route(f"{p}/sessions", guarded(api.create_session), methods=["POST"]),
        Route(f"{p}/sessions", guarded(api.sessions), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}", guarded(api.session), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}/messages", guarded(api.send), methods=["POST"]),
        Route(f"{p}/sessions/{{ref}}/interrupt", guarded(api.interrupt), methods=["POST"]),
        Route(f"{p}/sessions/{{ref}}/stop", guarded(api.stop), methods=["POST"]),
        Route(f"{p}/sessions/{{ref}}/events", guarded(api.events), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}/usage", guarded(api.usage), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}/wait-quiet", guarded(api.wait_quiet), methods=["POST"]),
        Route(f"{p}/sessions/{{ref}}/prompt", guarded(api.harness_prompt), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}/refine", guarded(api.refine), methods=["POST"]),
        Route(f"{p}/harness/entries", guarded(api.harness_list), methods=["GET"]),
        Route(f"{p}/harness/log", guarded(api.harness_log), methods=["GET"]),
        # The entry may hold slashes (a title): the routes with an action first.
        Route(
            f"{p}/harness/entries/{{entry:path}}/diff", guarded(api.harness_diff), methods=["GET"]
        ),
        Route(
            f"{p}/harness/entries/{{entry:path}}/revert",
            guarded(api.harness_revert),
            methods=["POST"],
        ),
        Route(
            f"{p}/harness/entries/{{entry:path}}/approve",
            guarded(api.harness_approve),
            methods=["POST"],
        ),
        Route(
            f"{p}/harness/entries/{{entry:path}}/reject",
            guarded(api.harness_reject),
            methods=["POST"],
        ),
        Route(f"{p}/harness/entries/{{entry:path}}", guarded(api.harness_show), methods=["GET"]),
        Route(f"{p}/shutdown", guarded(api.shutdown), methods=["POST"]),
    ]
    routes += control_routes(host, _command_key)
    if kernel_host is not None:
        routes += kernel_routes(kernel_host, stop)
        routes += control_kernel_routes(kernel_host)
        if kernel_auth is None:
            kernel_auth = kernel_host.session_of_token
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    return TokenAuth(app, token=token, kernel_auth=kernel_auth)


class _Api:
    def __init__(self, host: Host, stop: StopSignal, heartbeat: float) -> None:
        self._host = host
        self._stop = stop
        self._heartbeat = heartbeat

    async def status(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.status()))

    async def create_session(self, request: Request) -> Response:
        body = from_json(CreateSession, await read_json(request))
        info = await self._host.create_session(body, _command_key(request))
        return json_reply(to_json(info), status=201)

    async def sessions(self, request: Request) -> Response:
        return json_reply([to_json(info) for info in await self._host.sessions()])

    async def session(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.session(_ref(request))))

    async def send(self, request: Request) -> Response:
        body = from_json(SendMessage, await read_json(request))
        receipt = await self._host.send(_ref(request), body, _command_key(request))
        return json_reply(to_json(receipt))

    async def interrupt(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.interrupt(_ref(request))))

    async def stop(self, request: Request) -> Response:
        info = await self._host.stop(_ref(request), _command_key(request))
        return json_reply(to_json(info))

    async def events(self, request: Request) -> Response:
        after = _int_param(request, "after", default=0)
        follow = _bool_param(request, "follow")
        # The iterator raises NotFound only once iterated, after the reply has
        # begun; resolve the session first so an unknown one is a plain 404.
        info = await self._host.session(_ref(request))
        records = self._host.events(info.id, after=after, follow=follow)
        return _EventStream(records, heartbeat=self._heartbeat, stop=self._stop)

    async def usage(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.usage(_ref(request))))

    async def wait_quiet(self, request: Request) -> Response:
        body = json_object(await read_json(request, empty_ok=True))
        timeout = seconds_field(body, "timeout", allow_null=True)
        ref = _ref(request)
        quiet = await long_poll(request, self._stop, self._host.wait_quiet(ref, timeout))
        return json_reply({"quiet": bool(quiet)})

    async def harness_prompt(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.harness_prompt(_ref(request))))

    async def refine(self, request: Request) -> Response:
        body = from_json(RefineRequest, json_object(await read_json(request, empty_ok=True)))
        reply = await self._host.refine(_ref(request), instructions_of(body), _command_key(request))
        return json_reply(to_json(reply))

    async def harness_list(self, request: Request) -> Response:
        kind, scope, status = harness_filters(request)
        entries = await self._host.harness_list(kind, scope, status)
        return json_reply([to_json(entry) for entry in entries])

    async def harness_show(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.harness_show(entry_ref(request))))

    async def harness_log(self, request: Request) -> Response:
        limit = _int_param(request, "limit", default=DEFAULT_LOG_LIMIT)
        entries = await self._host.harness_log(limit)
        return json_reply([to_json(entry) for entry in entries])

    async def harness_diff(self, request: Request) -> Response:
        old, new = version_param(request, "from"), version_param(request, "to")
        return json_reply({"diff": await self._host.harness_diff(entry_ref(request), old, new)})

    async def harness_revert(self, request: Request) -> Response:
        body = from_json(HarnessRevert, json_object(await read_json(request)))
        to = body.to
        if isinstance(to, bool) or not isinstance(to, int) or to < 0:
            raise ValueError("to must be a version number (0: before the entry existed)")
        entry = await self._host.harness_revert(entry_ref(request), to, _command_key(request))
        return json_reply(to_json(entry))

    async def harness_approve(self, request: Request) -> Response:
        reason = _decision(json_object(await read_json(request, empty_ok=True)))
        entry = await self._host.harness_approve(entry_ref(request), reason, _command_key(request))
        return json_reply(to_json(entry))

    async def harness_reject(self, request: Request) -> Response:
        reason = _decision(json_object(await read_json(request, empty_ok=True)))
        entry = await self._host.harness_reject(entry_ref(request), reason, _command_key(request))
        return json_reply(to_json(entry))

    async def shutdown(self, request: Request) -> Response:
        body = from_json(Shutdown, await read_json(request, empty_ok=True))
        if not isinstance(body.force, bool):
            raise ValueError("force must be true or false")
        await self._host.shutdown(force=body.force)
        logger.info("shutdown requested by a client (force=%s)", body.force)
        return json_reply({}, status=202, background=BackgroundTask(self._stop.request))


# -- requests and replies -------------------------------------------------------------------


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) as wire errors."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_response("not_found", f"no route {request.method} {request.url.path}")
    if status == 405:
        return error_response("invalid", f"{request.method} is not allowed on {request.url.path}")
    detail = one_line(getattr(exc, "detail", ""))
    return error_response("invalid", detail or f"bad request ({status})")


def _ref(request: Request) -> str:
    ref = request.path_params["ref"]
    if not isinstance(ref, str) or not ref:
        raise ValueError("a session id or name is required")
    return ref


def _decision(body: dict[str, Any]) -> str:
    reason = from_json(HarnessDecision, body).reason
    if not isinstance(reason, str):
        raise ValueError("reason must be a string")
    return reason


def _command_key(request: Request) -> CommandKey | None:
    client = request.headers.get(HEADER_CLIENT)
    command = request.headers.get(HEADER_COMMAND)
    if client is None and command is None:
        return None
    if not client or not command:
        raise ValueError(f"{HEADER_CLIENT} and {HEADER_COMMAND} must be sent together")
    for name, value in ((HEADER_CLIENT, client), (HEADER_COMMAND, command)):
        if len(value) > MAX_HEADER_ID_CHARS or not value.isprintable():
            raise ValueError(f"{name} must be printable and at most {MAX_HEADER_ID_CHARS} chars")
    return CommandKey(client, command)


def _int_param(request: Request, name: str, *, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    return value


def _bool_param(request: Request, name: str) -> bool:
    raw = (request.query_params.get(name) or "0").lower()
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no"):
        return False
    raise ValueError(f"{name} must be 0 or 1, not {raw!r}")


# -- the event stream -----------------------------------------------------------------------

_END = object()


class _EventStream(Response):
    """NDJSON over chunked HTTP from a host's event iterator.

    It watches three things at once: the next record, the client's
    disconnect, and the server's stop. Waiting for the next record is never
    cancelled by a heartbeat (cancelling an async generator mid-step would
    end it); it is cancelled only when the stream ends, and then the iterator
    is closed."""

    media_type = NDJSON

    def __init__(
        self, records: AsyncIterator[EventRecord], *, heartbeat: float, stop: StopSignal
    ) -> None:
        self._records = records
        self._heartbeat = heartbeat
        self._stop = stop
        self.status_code = 200
        self.background = None
        self.init_headers({"cache-control": "no-store", "content-type": NDJSON})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        disconnected: asyncio.Future[Any] = asyncio.ensure_future(_disconnect(receive))
        stopping: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(_next(self._records))
                done, _ = await asyncio.wait(
                    {pending, disconnected, stopping},
                    timeout=self._heartbeat,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if disconnected in done:
                    return
                if pending in done:
                    ready, pending = pending, None
                    line, last = _record_line(ready)
                    if line is not None:
                        await _send_line(send, line)
                    if last:
                        break
                    continue  # records that are ready go out before a stop
                if stopping in done:
                    await _send_line(send, {"type": "shutdown"})
                    break
                await _send_line(send, {"type": "heartbeat"})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self._close(disconnected, stopping, pending)

    async def _close(self, *tasks: asyncio.Future[Any] | None) -> None:
        live = [task for task in tasks if task is not None]
        for task in live:
            task.cancel()
        # The pending step must be finished before the iterator can be closed.
        await asyncio.wait(live, timeout=5.0)
        aclose = getattr(self._records, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.exception("closing an event iterator failed")


async def _next(records: AsyncIterator[EventRecord]) -> object:
    try:
        return await records.__anext__()
    except StopAsyncIteration:
        return _END


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _record_line(ready: asyncio.Future[Any]) -> tuple[dict[str, Any] | None, bool]:
    """The line for a finished step of the iterator, and whether it is the last."""
    try:
        value = ready.result()
    except Exception as exc:
        error, bug = wire_error(exc)
        if bug:
            logger.error("an event stream failed: %s", error.message, exc_info=exc)
        return {"type": "error", **error_body(error.kind, error.message)}, True
    if value is _END:
        return None, True
    if not isinstance(value, EventRecord):
        logger.error("an event iterator yielded %r, not an EventRecord", type(value).__name__)
        return {"type": "error", **error_body("internal", "internal error: bad event")}, True
    return record_to_dict(value), False


async def _send_line(send: Send, data: dict[str, Any]) -> None:
    body = (json_text(data) + "\n").encode()
    await send({"type": "http.response.body", "body": body, "more_body": True})


__all__ = [
    "DEFAULT_LOG_LIMIT",
    "KERNEL_METHODS",
    "MAX_BODY_BYTES",
    "NDJSON",
    "StopSignal",
    "create_app",
    "kernel_host_of",
]

"""The daemon's routes, derived from the operation table.

Each row of :func:`~recursa.protocol.operations.operations` becomes one
Starlette route under :data:`~recursa.protocol.wire.API_PREFIX` that:

1. checks the caller's channel: a person row only for a client on the
   people's channel (what such a row records is by ``human``), a kernel row
   only for a kernel on the kernel channel, whose caller it takes from the
   kernel token (never from the request);
2. builds the request value from the path parameters, and the query (``GET``,
   ``DELETE``) or the JSON body (other methods), with
   :func:`~recursa.protocol.wire.from_json`, which checks every field's type
   and bounds: a malformed or mistyped request is a 400 with one line (what
   the values mean is the host's to judge);
3. reads the command key of a ``command`` row from the ``Recursa-Client``
   and ``Recursa-Command`` headers (None when both are absent; one without
   the other is a 400);
4. for a kernel row, asks again whether the kernel's token is still valid
   (a stop revokes it while the body is read), then, with no await in
   between, calls the host's method of the row's name, under
   :func:`~recursa.daemon.replies.long_poll` for a long poll;
5. answers the reply as JSON with the row's status (a ``stream`` row: the
   NDJSON event stream of :mod:`recursa.daemon.stream`).

Every failure is one JSON error body (:func:`~recursa.daemon.replies.guarded`).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recursa.daemon.auth import Principal, principal_of
from recursa.daemon.replies import (
    Handler,
    StopSignal,
    guarded,
    json_object,
    json_reply,
    long_poll,
    read_json,
)
from recursa.daemon.stream import EventStream
from recursa.errors import AuthError
from recursa.protocol.operations import Operation, encode, operations, query_value, request_fields
from recursa.protocol.wire import (
    API_PREFIX,
    HEADER_CLIENT,
    HEADER_COMMAND,
    CommandKey,
    from_json,
)

MAX_HEADER_ID_CHARS = 200
"""Longest client or command id a request may carry."""

logger = logging.getLogger("recursa.daemon")


def operation_routes(
    host: object, kernel_host: object | None, stop: StopSignal, heartbeat: float
) -> list[Route]:
    """A route for every person row over ``host``, and for every kernel row over
    ``kernel_host`` (none without one), in the table's order."""
    routes = []
    for op in operations():
        target = host if op.audience == "person" else kernel_host
        if target is None:
            continue
        endpoint = _endpoint(op, target, stop, heartbeat)
        routes.append(Route(API_PREFIX + op.route, guarded(endpoint), methods=[op.method]))
    return routes


def _endpoint(
    op: Operation[Any, Any], target: object, stop: StopSignal, heartbeat: float
) -> Handler:
    method = getattr(target, op.name)

    async def endpoint(request: Request) -> Response:
        principal = _principal(request, op)
        args: list[Any] = [principal.session_id] if op.audience == "kernel" else []
        if op.request is not None:
            args.append(await request_value(op, request))
        if op.command:
            args.append(command_key(request))
        if not principal.still_admitted():
            raise AuthError("a valid token is required")  # revoked while the request was read
        if op.stream:
            return EventStream(await method(*args), heartbeat=heartbeat, stop=stop)
        if op.long_poll:
            result = await long_poll(request, stop, method(*args))
        else:
            result = await method(*args)
        background = None
        if op.stops:
            logger.info("%s requested by a client", op.name)
            background = BackgroundTask(stop.request)
        return json_reply(encode(result), status=op.status, background=background)

    endpoint.__name__ = op.name
    return endpoint


async def request_value(op: Operation[Any, Any], request: Request) -> Any:
    """The row's request value from the path, the query or the body (ValueError, one line)."""
    assert op.request is not None
    kinds = request_fields(op.request)
    data: dict[str, Any] = {}
    if op.in_query:
        for name, raw in request.query_params.items():
            if name in kinds and raw != "":
                data[name] = query_value(kinds[name], raw, name)
    else:
        data.update(json_object(await read_json(request, empty_ok=True)))
    for name, raw in request.path_params.items():
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"{name} is required")
        data[name] = query_value(kinds[name], raw, name)
    return from_json(op.request, data)


def command_key(request: Request) -> CommandKey | None:
    """The request's idempotency key, or None when it carries none."""
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


def _principal(request: Request, op: Operation[Any, Any]) -> Principal:
    """The caller, if its channel serves ``op``. Auth already admits no other;
    this is the defense behind it (a person row records ``human``)."""
    principal = principal_of(request.scope)
    if op.audience == "kernel":
        if principal.channel != "kernel" or principal.kind != "kernel" or not principal.session_id:
            raise AuthError("kernel routes need a kernel's token")
    elif principal.channel != "people" or principal.kind != "client":
        raise AuthError("this route is served on the people's socket only")
    return principal


__all__ = ["MAX_HEADER_ID_CHARS", "command_key", "operation_routes", "request_value"]

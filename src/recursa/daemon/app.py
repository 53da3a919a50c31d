"""The daemon's HTTP API: the routes of the operation table over a host.

Every route is a row of :func:`~recursa.protocol.operations.operations`,
derived by :mod:`recursa.daemon.routes`: the people's rows
(:mod:`recursa.protocol.person_ops`, client token) over a
:class:`~recursa.daemon.host.Host`, and the kernels' rows
(:mod:`recursa.protocol.kernel_ops`, under ``/kernel/``, kernel tokens
only) when the app is given a :class:`~recursa.daemon.host.KernelHost`.
The routes are served twice, once per channel (:mod:`recursa.daemon.auth`):
each socket gets its own :class:`~recursa.daemon.auth.TokenAuth` in front of
the one router, so a request reaches a route only with its channel's token.
``recursa daemon openapi`` prints the people's rows as an OpenAPI document.

Every failure is one JSON error body (:mod:`recursa.daemon.errormap`): a
malformed request is 400, a bug is logged with its traceback and answered 500
with the one line ``internal error: Type: message``; Starlette's own
refusals (no such route, a method not allowed) are wire errors too.
"""

from __future__ import annotations

from typing import NamedTuple

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from recursa.daemon.auth import KernelAuth, TokenAuth
from recursa.daemon.errormap import MAX_MESSAGE_CHARS
from recursa.daemon.host import Host, KernelHost, missing_methods
from recursa.daemon.replies import MAX_BODY_BYTES, StopSignal, error_response
from recursa.daemon.routes import operation_routes
from recursa.errors import one_line
from recursa.protocol.wire import HEARTBEAT_SECONDS


class ChannelApps(NamedTuple):
    """The daemon's app as each channel serves it."""

    people: ASGIApp
    """For the people's socket: the client token, the person rows."""
    kernel: ASGIApp
    """For the kernel socket: kernel tokens, the kernel rows."""


def create_apps(
    host: Host,
    *,
    token: str,
    stop: StopSignal,
    kernel_host: KernelHost | None = None,
    kernel_auth: KernelAuth | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> ChannelApps:
    """The daemon's ASGI app behind each channel's :class:`~recursa.daemon.auth.TokenAuth`.

    ``host`` must serve every person row (TypeError naming those it lacks).
    With ``kernel_host``, the kernels' routes too, and a kernel token is
    mapped to its session by ``kernel_host.session_of_token`` (unless
    ``kernel_auth`` is given: tests); without either, the kernel channel
    refuses everything. ``stop`` ends event streams and long polls;
    ``heartbeat`` is the longest silence on a followed stream."""
    for target, audience in ((host, "person"), (kernel_host, "kernel")):
        missing = [] if target is None else missing_methods(target, audience)  # type: ignore[arg-type]
        if missing:
            raise TypeError(f"{type(target).__name__} does not serve {', '.join(missing)}")
    routes = operation_routes(host, kernel_host, stop, heartbeat)
    if kernel_host is not None and kernel_auth is None:
        kernel_auth = kernel_host.session_of_token
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    return ChannelApps(
        people=TokenAuth(app, channel="people", token=token),
        kernel=TokenAuth(app, channel="kernel", kernel_auth=kernel_auth),
    )


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) as wire errors."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_response("not_found", f"no route {request.method} {request.url.path}")
    if status == 405:
        return error_response("invalid", f"{request.method} is not allowed on {request.url.path}")
    detail = one_line(str(getattr(exc, "detail", "")), first_line=True, limit=MAX_MESSAGE_CHARS)
    return error_response("invalid", detail or f"bad request ({status})")


__all__ = ["MAX_BODY_BYTES", "ChannelApps", "StopSignal", "create_apps"]

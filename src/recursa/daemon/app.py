"""The daemon's HTTP API: the routes of the operation table over a host.

Every route is a row of :func:`~recursa.protocol.operations.operations`,
derived by :mod:`recursa.daemon.routes`: the people's rows
(:mod:`recursa.protocol.person_ops`, client token) over a
:class:`~recursa.daemon.host.Host`, and the kernels' rows
(:mod:`recursa.protocol.kernel_ops`, under ``/kernel/``, kernel tokens
only) when the app is given a :class:`~recursa.daemon.host.KernelHost`.
``recursa daemon openapi`` prints the people's rows as an OpenAPI document.

Every failure is one JSON error body (:mod:`recursa.daemon.errormap`): a
malformed request is 400, a bug is logged with its traceback and answered 500
with the one line ``internal error: Type: message``; Starlette's own
refusals (no such route, a method not allowed) are wire errors too.
"""

from __future__ import annotations

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


def create_app(
    host: Host,
    *,
    token: str,
    stop: StopSignal,
    kernel_host: KernelHost | None = None,
    kernel_auth: KernelAuth | None = None,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> ASGIApp:
    """The daemon's ASGI app behind :class:`~recursa.daemon.auth.TokenAuth`.

    ``host`` must serve every person row (TypeError naming those it lacks).
    With ``kernel_host``, the kernels' routes too, and a kernel token is
    mapped to its session by ``kernel_host.session_of_token`` (unless
    ``kernel_auth`` is given: tests). ``stop`` ends event streams and long
    polls; ``heartbeat`` is the longest silence on a followed stream."""
    for target, audience in ((host, "person"), (kernel_host, "kernel")):
        missing = [] if target is None else missing_methods(target, audience)  # type: ignore[arg-type]
        if missing:
            raise TypeError(f"{type(target).__name__} does not serve {', '.join(missing)}")
    routes = operation_routes(host, kernel_host, stop, heartbeat)
    if kernel_host is not None and kernel_auth is None:
        kernel_auth = kernel_host.session_of_token
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    return TokenAuth(app, token=token, kernel_auth=kernel_auth)


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) as wire errors."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_response("not_found", f"no route {request.method} {request.url.path}")
    if status == 405:
        return error_response("invalid", f"{request.method} is not allowed on {request.url.path}")
    detail = one_line(str(getattr(exc, "detail", "")), first_line=True, limit=MAX_MESSAGE_CHARS)
    return error_response("invalid", detail or f"bad request ({status})")


__all__ = ["MAX_BODY_BYTES", "StopSignal", "create_app"]

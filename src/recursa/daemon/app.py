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
The kernel channel's app is also called in this process (:func:`in_process`),
for kernels whose requests come over their own Jupyter channels
(:mod:`recursa.kernel.relay`): the same routes and checks, with the
session's kernel token, and no socket.

Every failure is one JSON error body (:mod:`recursa.daemon.errormap`): a
malformed request is 400, a bug is logged with its traceback and answered 500
with the one line ``internal error: Type: message``; Starlette's own
refusals (no such route, a method not allowed) are wire errors too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from recursa.daemon.auth import KernelAuth, TokenAuth
from recursa.daemon.errormap import MAX_MESSAGE_CHARS
from recursa.daemon.host import Host, KernelHost, RelayingKernelHost, missing_methods
from recursa.daemon.replies import MAX_BODY_BYTES, StopSignal, error_response
from recursa.daemon.routes import operation_routes
from recursa.errors import one_line
from recursa.kernel import ApiCall
from recursa.protocol.common import json_text
from recursa.protocol.wire import API_PREFIX, HEARTBEAT_SECONDS, error_body


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
    ``heartbeat`` is the longest silence on a followed stream. A kernel host
    that relays (:class:`~recursa.daemon.host.RelayingKernelHost`) is given
    the kernel app :func:`in_process`."""
    for target, audience in ((host, "person"), (kernel_host, "kernel")):
        missing = [] if target is None else missing_methods(target, audience)  # type: ignore[arg-type]
        if missing:
            raise TypeError(f"{type(target).__name__} does not serve {', '.join(missing)}")
    routes = operation_routes(host, kernel_host, stop, heartbeat)
    if kernel_host is not None and kernel_auth is None:
        kernel_auth = kernel_host.session_of_token
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    apps = ChannelApps(
        people=TokenAuth(app, channel="people", token=token),
        kernel=TokenAuth(app, channel="kernel", kernel_auth=kernel_auth),
    )
    if isinstance(kernel_host, RelayingKernelHost):
        kernel_host.serve_in_process(in_process(apps.kernel))
    return apps


def in_process(app: ASGIApp) -> Callable[[str], ApiCall]:
    """``app`` (a channel's, behind its :class:`~recursa.daemon.auth.TokenAuth`)
    as a function of a token to an :data:`~recursa.kernel.relay.ApiCall`: each
    call is one HTTP request to it in this process, with that token, and
    returns the reply's status and JSON. A reply that is not JSON is an
    ``internal`` error; timeouts are the caller's (the relay's)."""

    def call_as(token: str) -> ApiCall:
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}

        async def call(
            method: str,
            path: str,
            body: dict[str, Any] | None,
            timeout: float | None,  # noqa: ASYNC109 -- the relay bounds the call
        ) -> tuple[int, Any]:
            import httpx2

            content = json_text(body).encode() if body is not None else None
            transport = httpx2.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx2.AsyncClient(
                transport=transport, base_url="http://recursa", trust_env=False
            ) as client:
                response = await client.request(
                    method, f"{API_PREFIX}{path}", content=content, headers=headers
                )
            try:
                return response.status_code, response.json()
            except ValueError:
                return 500, error_body("internal", f"the kernel API answered {path} with no JSON")

        return call

    return call_as


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) as wire errors."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_response("not_found", f"no route {request.method} {request.url.path}")
    if status == 405:
        return error_response("invalid", f"{request.method} is not allowed on {request.url.path}")
    detail = one_line(str(getattr(exc, "detail", "")), first_line=True, limit=MAX_MESSAGE_CHARS)
    return error_response("invalid", detail or f"bad request ({status})")


__all__ = ["MAX_BODY_BYTES", "ChannelApps", "StopSignal", "create_apps", "in_process"]

"""Who is calling: every request to the daemon carries ``Authorization: Bearer <token>``.

Two kinds of caller exist (DESIGN.md, Processes), and each has its own
*channel*: a unix socket of its own, served by its own :class:`TokenAuth`.

- a *client* (CLI, view, SDK) speaks on the people's channel
  (``daemon.sock``), presents the token in ``daemon.token`` (compared in
  constant time) and may use every route but the kernels';
- a *kernel* speaks on the kernel channel (``kernel-api/kernel.sock``) and
  presents its session's token. The daemon derives the sender's session from
  the token, so a kernel can never speak as another session. Only routes
  under :data:`KERNEL_PREFIX` are served there.

Each channel admits its own tokens only: a kernel token on the people's
channel, or the client token on the kernel channel, is refused like a wrong
one. The channel is part of the :class:`Principal`, so what is recorded as by
a person (``human``) can only come in through the people's socket, whatever
token a kernel's code got hold of.

The extension point for kernels is :data:`KernelAuth`: a function from a
presented token to the session id it belongs to, or None. The runtime
supplies it (``host.session_of_token``); without it no kernel token is
accepted. The function must not reveal by its timing which tokens exist
(hash the token, then look the hash up).

A missing, malformed or wrong token is answered with 401 and the wire error
body ``{"error": {"kind": "auth", "message": "a valid token is required"}}``;
nothing else (no route, no session) is revealed. Routes read the caller from
the scope with :func:`principal_of`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from starlette.types import ASGIApp, Receive, Scope, Send

from recursa.protocol.events import json_text
from recursa.protocol.wire import API_PREFIX, ERROR_STATUS, error_body

KernelAuth = Callable[[str], str | None]
"""Maps a presented token to the id of the session it was issued to, or None."""

Channel = Literal["people", "kernel"]
"""The socket a request came in on: the people's (client token) or the kernels'."""

KERNEL_PREFIX = f"{API_PREFIX}/kernel/"
"""The kernels' routes: only a kernel token reaches them, and nothing else."""

PRINCIPAL_KEY = "recursa.principal"
AUTH_MESSAGE = "a valid token is required"


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: a client on the people's channel, or the kernel
    of ``session_id`` on the kernel channel. ``recheck`` asks again whether the
    kernel's token is still valid (it is revoked when its session stops)."""

    kind: Literal["client", "kernel"]
    session_id: str | None = None
    channel: Channel = "people"
    recheck: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    def still_admitted(self) -> bool:
        """Whether the caller would be admitted now: a kernel's token may have been
        revoked while its request was read. Synchronous, so a route that checks
        it and then starts work without awaiting in between cannot be overtaken."""
        return self.recheck is None or self.recheck()


CLIENT = Principal("client")


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token of the (single) ``Authorization: Bearer`` header, as raw bytes."""
    found: bytes | None = None
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        if found is not None:
            return None  # two Authorization headers: refuse rather than pick one
        scheme, _, token = value.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return None
        found = token.strip()
    return found


def token_matches(presented: bytes, expected: bytes) -> bool:
    """Constant-time comparison (in the length of ``expected``)."""
    return hmac.compare_digest(presented, expected)


class TokenAuth:
    """ASGI middleware for one channel: admit a request only with a valid token
    of that channel, for a route of that channel, and record its
    :class:`Principal` in the scope for the routes. Non-HTTP scopes (lifespan)
    pass through.

    On the people's channel ``token`` (the client token) is required; on the
    kernel channel ``kernel_auth`` is (without it every request is refused)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        channel: Channel,
        token: str | None = None,
        kernel_auth: KernelAuth | None = None,
    ) -> None:
        if channel == "people" and not token:
            raise ValueError("the client token must not be empty")
        self._app = app
        self._channel = channel
        self._token = (token or "").encode("ascii")
        self._kernel_auth = kernel_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        principal = self._authenticate(scope)
        if principal is None:
            await _refuse(send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self._app(scope, receive, send)

    def _authenticate(self, scope: Scope) -> Principal | None:
        presented = bearer_token(scope.get("headers", []))
        if presented is None:
            return None
        kernel_route = scope.get("path", "").startswith(KERNEL_PREFIX)
        if self._channel == "people":
            if kernel_route or not token_matches(presented, self._token):
                return None
            return CLIENT
        kernel_auth = self._kernel_auth
        if not kernel_route or kernel_auth is None:
            return None
        try:
            text = presented.decode("ascii")
        except UnicodeDecodeError:
            return None
        session_id = kernel_auth(text)
        if not session_id:
            return None

        def recheck() -> bool:
            return kernel_auth(text) == session_id

        return Principal("kernel", session_id, channel="kernel", recheck=recheck)


def principal_of(scope: Scope) -> Principal:
    """The caller admitted by :class:`TokenAuth`; a route outside it is a bug."""
    principal = scope.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise RuntimeError("route reached without authentication")
    return principal


async def _refuse(send: Send) -> None:
    body = json_text(error_body("auth", AUTH_MESSAGE)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": ERROR_STATUS["auth"],
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


__all__ = [
    "AUTH_MESSAGE",
    "CLIENT",
    "KERNEL_PREFIX",
    "Channel",
    "KernelAuth",
    "Principal",
    "TokenAuth",
    "bearer_token",
    "principal_of",
    "token_matches",
]

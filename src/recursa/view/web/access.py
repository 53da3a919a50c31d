"""Who may talk to ``recursa web``: the holder of its token, from this machine's
loopback, on a page this server served.

The server listens on 127.0.0.1 only, but a loopback port is reachable by
every web page a browser shows and by every local user. Three checks stand in
front of every request, in this order (:class:`Guard`, plain ASGI):

1. **Host.** The ``Host`` header must be ``127.0.0.1:PORT`` or
   ``localhost:PORT``. A page on an attacker's domain that re-resolves its name
   to 127.0.0.1 (DNS rebinding) sends its own name, and is refused (421).
2. **Token.** The random token printed in the URL (as Jupyter does), given as
   the ``token`` query parameter (the first load), the cookie that load sets
   (HttpOnly, SameSite=Strict, named per port so two servers do not clash), or
   ``Authorization: token X`` (``Bearer X`` too) for scripts. Missing: 401;
   wrong: 403. Compared in constant time.
3. **Origin.** A request that changes something (any method but GET and HEAD)
   from a browser must come from this server's own origin: an ``Origin`` or a
   ``Sec-Fetch-Site`` naming another site is refused (403). A request without
   ``Origin`` must carry the token in its ``Authorization`` header: only a
   cookie can be sent by a page that does not know the token, so a cookie alone
   never authorises a change without an origin to check.

A GET of a page with a valid ``?token=`` is redirected to the same path
without it, with the cookie set: the token leaves the address bar and the
history. Every reply says ``Referrer-Policy: no-referrer`` and carries a
Content-Security-Policy that allows this origin's scripts, styles and
connections only; no CORS header is ever sent.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Literal
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD"})
COOKIE_PREFIX = "recursa_web_"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
Refusal = Literal["host", "missing", "wrong", "origin"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the guard decided: ``refusal`` None lets the request through;
    ``redirect`` is where a first load with ``?token=`` goes instead."""

    refusal: Refusal | None = None
    redirect: str | None = None
    by_header: bool = False


class Guard:
    """ASGI middleware that lets through only what the module docstring allows.

    ``port`` is the port the server listens on (known once it is bound: the
    origin and the host names include it)."""

    def __init__(self, app: ASGIApp, *, token: str, port: int) -> None:
        self.app = app
        self.token = token
        self.port = port

    @property
    def cookie_name(self) -> str:
        return f"{COOKIE_PREFIX}{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            # No websockets: nothing here speaks them (closed before the handshake: a 403).
            await send({"type": "websocket.close", "code": 1008})
            return
        verdict = self.judge(scope)
        if verdict.refusal is not None:
            await _refuse(send, verdict.refusal)
            return
        if verdict.redirect is not None:
            await self._redirect(send, verdict.redirect)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(_SECURITY_HEADERS)
                if not verdict.by_header:
                    headers.append((b"set-cookie", self._cookie().encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)

    def judge(self, scope: Scope) -> Verdict:
        """The verdict on one HTTP request (pure: headers, path and query only)."""
        headers = _headers(scope)
        if headers.get("host") not in self.hosts:
            return Verdict("host")
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given, by_header = self._given(headers, query)
        if given is None:
            return Verdict("missing")
        if not hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8")):
            return Verdict("wrong")
        method = scope["method"]
        if method not in SAFE_METHODS and not self._same_origin(headers, by_header):
            return Verdict("origin")
        if method == "GET" and "token" in query and not scope["path"].startswith("/api/"):
            rest = {k: v for k, v in query.items() if k != "token"}
            target = scope["path"] + (f"?{urlencode(rest)}" if rest else "")
            return Verdict(redirect=target)
        return Verdict(by_header=by_header)

    def _given(self, headers: dict[str, str], query: dict[str, str]) -> tuple[str | None, bool]:
        """The token the request offers and whether it came in a header."""
        authorization = headers.get("authorization", "")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() in ("token", "bearer") and value.strip():
            return value.strip(), True
        if "token" in query:
            return query["token"], False
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header offers nothing
            return None, False
        morsel = cookie.get(self.cookie_name)
        return (morsel.value if morsel is not None else None), False

    def _same_origin(self, headers: dict[str, str], by_header: bool) -> bool:
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = headers.get("origin")
        if origin is None:
            return by_header
        return origin in self.origins

    def _cookie(self) -> str:
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"

    async def _redirect(self, send: Send, target: str) -> None:
        headers = [
            (b"location", target.encode("latin-1")),
            (b"set-cookie", self._cookie().encode("latin-1")),
            (b"content-length", b"0"),
            *_SECURITY_HEADERS,
        ]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


_SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode("ascii")),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]

_REFUSALS: dict[Refusal, tuple[int, str, str]] = {
    "host": (421, "invalid", "this server answers only to 127.0.0.1 and localhost"),
    "missing": (401, "auth", "no token: open the URL that recursa web printed"),
    "wrong": (403, "auth", "wrong token: open the URL that recursa web printed"),
    "origin": (403, "auth", "a change must come from this server's own page"),
}


async def _refuse(send: Send, refusal: Refusal) -> None:
    status, kind, message = _REFUSALS[refusal]
    body = json.dumps({"kind": kind, "message": message}).encode("utf-8")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        *_SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the last of a repeated one)."""
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }


__all__ = ["COOKIE_PREFIX", "CSP", "Guard", "Verdict"]

"""Who may talk to ``recursa web``: the holder of its token, from this machine's
loopback, on a page this server served.

The server listens on 127.0.0.1 only, but a loopback port is reachable by
every web page a browser shows and by every local user. Checks stand in front
of every request, in this order (:class:`Guard`, plain ASGI):

1. **Host.** The ``Host`` header must be ``127.0.0.1:PORT`` or
   ``localhost:PORT``. A page on an attacker's domain that re-resolves its name
   to 127.0.0.1 (DNS rebinding) sends its own name, and is refused (421).
2. **Token.** The page itself (``GET /``) and its assets (``GET /static/...``)
   are files of the package with no data in them: they are served to anyone
   past the host check. Everything else (the API) needs the random token the
   command printed, as ``Authorization: token X`` (``Bearer X`` too; what the
   page's ``fetch`` sends) or as the ``token`` query parameter (what the page's
   ``EventSource`` sends: it cannot set headers). Missing: 401; wrong: 403.
   Compared in constant time. There is no cookie: a cookie for 127.0.0.1 goes
   to every port of it, so any other local server the person visits would get
   the token. The printed URL carries the token in its fragment
   (``#token=...``), which a browser never sends to a server; the page keeps
   it in ``sessionStorage``, which is per origin (per port).
3. **Origin.** A request that changes something (any method but GET and HEAD)
   from a browser must come from this server's own origin: an ``Origin`` or a
   ``Sec-Fetch-Site`` naming another site is refused (403). A request without
   ``Origin`` must carry the token in its ``Authorization`` header (a script).

No reply ever sets a cookie. Every reply says ``Referrer-Policy: no-referrer``
(a stream's URL with its token never leaves as a referrer) and carries a
Content-Security-Policy that allows this origin's scripts, styles and
connections only; no CORS header is ever sent.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
Refusal = Literal["host", "missing", "wrong", "origin"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the guard decided: ``refusal`` None lets the request through;
    ``public`` says it is the page or an asset (no token asked)."""

    refusal: Refusal | None = None
    public: bool = False
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

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                # Whatever the app said, no cookie leaves this server.
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() != b"set-cookie"
                ]
                headers.extend(_SECURITY_HEADERS)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)

    def judge(self, scope: Scope) -> Verdict:
        """The verdict on one HTTP request (pure: headers, path and query only)."""
        headers = _headers(scope)
        if headers.get("host") not in self.hosts:
            return Verdict("host")
        method = scope["method"]
        if method in SAFE_METHODS and _public(scope["path"]):
            return Verdict(public=True)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given, by_header = self._given(headers, query)
        if given is None:
            return Verdict("missing")
        if not hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8")):
            return Verdict("wrong")
        if method not in SAFE_METHODS and not self._same_origin(headers, by_header):
            return Verdict("origin")
        return Verdict(by_header=by_header)

    def _given(self, headers: dict[str, str], query: dict[str, str]) -> tuple[str | None, bool]:
        """The token the request offers and whether it came in a header."""
        authorization = headers.get("authorization", "")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() in ("token", "bearer") and value.strip():
            return value.strip(), True
        if "token" in query:
            return query["token"], False
        return None, False

    def _same_origin(self, headers: dict[str, str], by_header: bool) -> bool:
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = headers.get("origin")
        if origin is None:
            return by_header
        return origin in self.origins


def _public(path: str) -> bool:
    """Whether ``path`` is the page or one of its assets: package files, no data."""
    return path == "/" or path.startswith("/static/")


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


__all__ = ["CSP", "Guard", "Verdict"]

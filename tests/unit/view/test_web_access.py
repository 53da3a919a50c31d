"""The web view's guard decides on headers alone: host, token, origin
(recursa.view.web.access). Real requests over real HTTP are in
tests/integration/test_view_web_server.py; here every rule and its edge."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from recursa.view.web.access import Guard, Verdict
from recursa.view.web.server import proxied_ops

TOKEN = "s3cret-token"
PORT = 8123


def guard() -> Guard:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # never reached here
        raise AssertionError

    return Guard(app, token=TOKEN, port=PORT)


def scope(
    method: str = "GET",
    path: str = "/api/feed",
    query: str = "",
    host: str | None = f"127.0.0.1:{PORT}",
    **headers: str,
) -> dict[str, Any]:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    if host is not None:
        raw.append((b"host", host.encode()))
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query.encode(),
        "headers": raw,
    }


def test_the_token_in_a_header_or_the_query_lets_an_api_request_through() -> None:
    g = guard()
    assert g.judge(scope(authorization=f"token {TOKEN}")) == Verdict(by_header=True)
    assert g.judge(scope(authorization=f"Bearer {TOKEN}")) == Verdict(by_header=True)
    # An EventSource cannot set headers: the stream's URL carries the token.
    assert g.judge(scope(query=f"after=3&token={TOKEN}")) == Verdict()


def test_no_token_is_401_and_a_wrong_one_403() -> None:
    g = guard()
    assert g.judge(scope()).refusal == "missing"
    assert g.judge(scope(authorization="token nope")).refusal == "wrong"
    assert g.judge(scope(query="token=nope")).refusal == "wrong"
    assert g.judge(scope("POST", "/api/op/send", origin=f"http://127.0.0.1:{PORT}")).refusal == (
        "missing"
    )


def test_a_cookie_grants_nothing() -> None:
    # No cookie is read: one for 127.0.0.1 reaches every port of it.
    g = guard()
    for name in (f"recursa_web_{PORT}", "token", "recursa_web"):
        assert g.judge(scope(cookie=f"{name}={TOKEN}")).refusal == "missing"
        own = f"http://127.0.0.1:{PORT}"
        post = scope("POST", "/api/op/send", cookie=f"{name}={TOKEN}", origin=own)
        assert g.judge(post).refusal == "missing"


def test_the_page_and_its_assets_need_no_token_but_the_right_host() -> None:
    g = guard()
    for path in ("/", "/static/base.js", "/static/app.css"):
        assert g.judge(scope(path=path)) == Verdict(public=True)
        assert g.judge(scope("HEAD", path)) == Verdict(public=True)
        assert g.judge(scope(path=path, host=f"evil.example:{PORT}")).refusal == "host"
    # Only reading them: a change to them, or any other path, needs the token.
    assert g.judge(scope("POST", "/")).refusal == "missing"
    assert g.judge(scope(path="/api/op/status")).refusal == "missing"
    assert g.judge(scope(path="/index.html")).refusal == "missing"
    assert g.judge(scope(path="/staticx")).refusal == "missing"


@pytest.mark.parametrize(
    "host", ["evil.example:8123", "127.0.0.1", "127.0.0.1:1", "localhost", "[::1]:8123", None]
)
def test_any_host_but_loopback_with_the_port_is_refused(host: str | None) -> None:
    # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own name.
    verdict = guard().judge(scope(host=host, authorization=f"token {TOKEN}"))
    assert verdict.refusal == "host"


def test_localhost_is_as_good_as_the_address() -> None:
    verdict = guard().judge(scope(host=f"localhost:{PORT}", authorization=f"token {TOKEN}"))
    assert verdict.refusal is None


def test_a_change_must_come_from_this_origin() -> None:
    g = guard()
    own = f"http://127.0.0.1:{PORT}"
    header = f"token {TOKEN}"
    assert g.judge(scope("POST", "/api/op/send", authorization=header, origin=own)).refusal is None
    assert (
        g.judge(
            scope("POST", "/api/op/send", authorization=header, origin=f"http://localhost:{PORT}")
        ).refusal
        is None
    )
    # Another site's page, even one that somehow has the token.
    for origin in ("http://evil.example", f"http://127.0.0.1:{PORT + 1}", "null"):
        post = scope("POST", "/api/op/send", authorization=header, origin=origin)
        assert g.judge(post).refusal == "origin", origin
    assert (
        g.judge(
            scope(
                "POST",
                "/api/op/send",
                authorization=header,
                origin=own,
                sec_fetch_site="cross-site",
            )
        ).refusal
        == "origin"
    )
    # No origin at all: only with the token in a header (a script, not a page).
    assert g.judge(scope("POST", "/api/op/send", query=f"token={TOKEN}")).refusal == "origin"
    assert g.judge(scope("POST", "/api/op/send", authorization=header)).refusal is None


def test_the_page_may_call_every_person_row_but_shutdown_and_the_streams() -> None:
    ops = proxied_ops()
    assert {"sessions", "send", "interrupt", "unload", "harness_diff", "harness_revert"} <= set(ops)
    assert "shutdown" not in ops
    assert "events" not in ops and "feed" not in ops
    assert all(op.audience == "person" for op in ops.values())
    assert "spawn" not in ops  # a kernel's row


def test_no_reply_ever_sets_a_cookie() -> None:
    # Even an app behind the guard that tries to set one (none does) sends none.
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"Set-Cookie", b"x=1"),
                    (b"set-cookie", b"y=2"),
                    (b"content-type", b"text/plain"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    g = Guard(app, token=TOKEN, port=PORT)
    asyncio.run(g(scope(path="/"), receive, send))
    asyncio.run(g(scope(authorization=f"token {TOKEN}"), receive, send))
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 2
    for start in starts:
        names = [name.lower() for name, _ in start["headers"]]
        assert b"set-cookie" not in names
        assert b"content-type" in names and b"referrer-policy" in names

"""The web view's guard decides on headers alone: host, token, origin
(recursa.view.web.access). Real requests over real HTTP are in
tests/integration/test_view_web_server.py; here every rule and its edge."""

from __future__ import annotations

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


def test_the_token_in_a_header_or_the_cookie_lets_a_request_through() -> None:
    g = guard()
    assert g.judge(scope(authorization=f"token {TOKEN}")) == Verdict(by_header=True)
    assert g.judge(scope(authorization=f"Bearer {TOKEN}")) == Verdict(by_header=True)
    assert g.judge(scope(cookie=f"other=1; recursa_web_{PORT}={TOKEN}")) == Verdict()
    assert g.judge(scope(query=f"token={TOKEN}")) == Verdict()


def test_no_token_is_401_and_a_wrong_one_403() -> None:
    g = guard()
    assert g.judge(scope()).refusal == "missing"
    assert g.judge(scope(authorization="token nope")).refusal == "wrong"
    assert g.judge(scope(query="token=nope")).refusal == "wrong"
    # The cookie of another recursa web (another port) is not this one's.
    assert g.judge(scope(cookie=f"recursa_web_9999={TOKEN}")).refusal == "missing"
    assert g.judge(scope(cookie='bad"cookie')).refusal == "missing"


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
    cookie = f"recursa_web_{PORT}={TOKEN}"
    own = f"http://127.0.0.1:{PORT}"
    assert g.judge(scope("POST", "/api/op/send", cookie=cookie, origin=own)).refusal is None
    assert (
        g.judge(
            scope("POST", "/api/op/send", cookie=cookie, origin=f"http://localhost:{PORT}")
        ).refusal
        is None
    )
    # Another site's page that the browser sends the cookie with.
    assert (
        g.judge(scope("POST", "/api/op/send", cookie=cookie, origin="http://evil.example")).refusal
        == "origin"
    )
    assert g.judge(scope("POST", "/api/op/send", cookie=cookie, origin="null")).refusal == "origin"
    assert (
        g.judge(
            scope("POST", "/api/op/send", cookie=cookie, origin=own, sec_fetch_site="cross-site")
        ).refusal
        == "origin"
    )
    # No origin at all: only with the token in a header (a script, not a page).
    assert g.judge(scope("POST", "/api/op/send", cookie=cookie)).refusal == "origin"
    assert g.judge(scope("POST", "/api/op/send", authorization=f"token {TOKEN}")).refusal is None


def test_a_first_load_with_the_token_is_sent_on_without_it() -> None:
    g = guard()
    assert g.judge(scope(path="/", query=f"token={TOKEN}")) == Verdict(redirect="/")
    assert g.judge(scope(path="/", query=f"token={TOKEN}&session=abc")) == Verdict(
        redirect="/?session=abc"
    )
    # The API takes a token in the query as it is (a script's stream URL).
    assert g.judge(scope(path="/api/feed", query=f"token={TOKEN}")) == Verdict()


def test_the_page_may_call_every_person_row_but_shutdown_and_the_streams() -> None:
    ops = proxied_ops()
    assert {"sessions", "send", "interrupt", "unload", "harness_diff", "harness_revert"} <= set(ops)
    assert "shutdown" not in ops
    assert "events" not in ops and "feed" not in ops
    assert all(op.audience == "person" for op in ops.values())
    assert "spawn" not in ops  # a kernel's row

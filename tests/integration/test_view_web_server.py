"""``recursa web`` over real HTTP: the real command in a subprocess, the real
daemon it starts, a real kernel; only the model is scripted.

Who may come in (the token, the host, the origin), what the proxy of the
daemon's operations lets through, and the streams (server-sent events that
resume from Last-Event-ID, and pages of a session's history)."""

from __future__ import annotations

import html
import json
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx2
import pytest

from daemon_kit import daemon_env, fails, kill_everything, ok
from recursa.testing import FakeModelServer, Reply, ToolCallSpec
from web_kit import WebServer, web_server

SCRIPT = [
    Reply(text="computing", tool_calls=[ToolCallSpec("python", {"code": "print(6 * 7)"})]),
    Reply(text="It is 42."),
]


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebServer, str]]:
    """One web server and daemon for the module, with one session that has answered."""
    root = tmp_path_factory.mktemp("web")
    home = root / "home"
    with FakeModelServer.in_thread(SCRIPT) as fake:
        env = daemon_env(home, fake)
        env["RECURSA_KERNEL_PYTHON"] = "project"  # as the autouse fixtures set, module-wide
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        try:
            with web_server(env, root) as server:
                info = server.op(
                    "create_session",
                    {"task": "six times seven", "model": "openai/m", "cwd": str(root)},
                )
                assert server.op("wait_quiet", {"session": info["id"], "timeout": 60})["quiet"]
                yield server, info["id"]
        finally:
            kill_everything(home)


def sse_records(server: WebServer, path: str, count: int, **headers: str) -> list[dict[str, Any]]:
    """The first ``count`` records of a server-sent event stream, each with its ``id:``."""
    records: list[dict[str, Any]] = []
    event_id: str | None = None
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    with server.client() as http, http.stream("GET", path, headers=sent) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                records.append({**json.loads(line[6:]), "_id": event_id})
                event_id = None
                if len(records) == count:
                    break
    return records


def test_the_url_carries_the_token_in_its_fragment(web: tuple[WebServer, str]) -> None:
    server, _ = web
    parts = urlsplit(server.url)
    assert (parts.scheme, parts.hostname, parts.path, parts.query) == ("http", "127.0.0.1", "/", "")
    assert parts.fragment == f"token={server.token}"
    assert len(server.token) >= 40


def test_the_page_is_public_and_the_api_needs_the_token(web: tuple[WebServer, str]) -> None:
    server, _ = web
    with httpx2.Client(base_url=server.base, timeout=30) as anonymous:
        # The page and its assets: package files, no data, no token needed.
        page = anonymous.get("/")
        assert page.status_code == 200
        assert '<script src="/static/base.js"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "access-control-allow-origin" not in page.headers
        script = anonymous.get("/static/base.js")
        assert script.status_code == 200 and "textContent" in script.text
        # The API: nothing without the token.
        refused = anonymous.post("/api/op/sessions", json={})
        assert refused.status_code == 401
        assert refused.json() == {
            "kind": "auth",
            "message": "no token: open the URL that recursa web printed",
        }
        assert anonymous.get("/api/feed").status_code == 401
        assert anonymous.get("/api/feed?token=not-it").status_code == 403
        # The stream's way in: the token in the query (EventSource sets no header).
        with anonymous.stream("GET", f"/api/feed?token={server.token}") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
    with server.client(token="wrong") as wrong:
        assert wrong.post("/api/op/sessions", json={}).status_code == 403


def test_no_cookie_is_ever_set_and_one_grants_nothing(web: tuple[WebServer, str]) -> None:
    server, session = web
    cookie = {"cookie": f"recursa_web_{server.port}={server.token}; token={server.token}"}
    with httpx2.Client(base_url=server.base, timeout=30) as anonymous:
        replies = [
            anonymous.get("/"),
            anonymous.get("/static/app.css"),
            anonymous.get(f"/?token={server.token}"),
            anonymous.post("/api/op/sessions", json={}),
            anonymous.post("/api/op/sessions", json={}, headers=cookie),
            anonymous.get("/api/feed", headers=cookie),
        ]
    with server.client() as http:
        replies += [
            http.post("/api/op/sessions", json={}),
            http.get(f"/api/events/{session}/page?limit=5"),
            http.get("/missing"),
        ]
    for reply in replies:
        assert "set-cookie" not in reply.headers, reply.request.url
    # The cookie alone: refused as if nothing were offered.
    assert [r.status_code for r in replies[3:6]] == [401, 401, 401]
    assert replies[6].status_code == 200


def test_another_host_or_origin_is_refused(web: tuple[WebServer, str]) -> None:
    server, _ = web
    with server.client() as http:
        rebound = http.get("/", headers={"host": f"evil.example:{server.port}"})
        assert rebound.status_code == 421
        # A page elsewhere, even one that has the token, cannot change anything.
        forged = http.post("/api/op/sessions", json={}, headers={"origin": "http://evil.example"})
        assert forged.status_code == 403
        other_port = f"http://127.0.0.1:{server.port + 1}"
        assert (
            http.post("/api/op/sessions", json={}, headers={"origin": other_port}).status_code
            == 403
        )
        own = http.post("/api/op/sessions", json={}, headers={"origin": server.base})
        assert own.status_code == 200


def test_the_proxy_serves_person_operations_only(web: tuple[WebServer, str]) -> None:
    server, session = web
    with server.client() as http:
        listed = http.post("/api/op/sessions", json={"ids": session})
        assert [info["id"] for info in listed.json()] == [session]
        assert listed.json()[0]["depth"] == 0
        shutdown = http.post("/api/op/shutdown", json={"force": True})
        assert shutdown.status_code == 404
        assert shutdown.json()["message"] == "no operation 'shutdown' for the page"
        assert http.post("/api/op/spawn", json={"task": "x"}).status_code == 404  # a kernel's
        assert http.post("/api/op/events", json={"session": session}).status_code == 404
        malformed = http.post("/api/op/send", content=b"{not json")
        assert malformed.status_code == 400
        assert malformed.json() == {"kind": "invalid", "message": "send: the body is not JSON"}
        mistyped = http.post("/api/op/send", json={"session": session, "text": 5})
        assert mistyped.status_code == 400
        assert mistyped.json()["kind"] == "invalid"
        assert "text" in mistyped.json()["message"] and "\n" not in mistyped.json()["message"]
        missing = http.post("/api/op/session", json={"session": "no-such-session"})
        assert missing.status_code == 404 and missing.json()["kind"] == "not_found"
        # The daemon is still there after all that.
        assert http.post("/api/op/status", json={}).json()["sessions"] == 1


def test_history_is_read_backwards_a_page_at_a_time(web: tuple[WebServer, str]) -> None:
    server, session = web
    with server.client() as http:
        newest = http.get(f"/api/events/{session}/page", params={"limit": 3}).json()
        assert len(newest) == 3
        seqs = [r["seq"] for r in newest]
        assert seqs == sorted(seqs)
        assert newest[-1]["type"] == "status_changed" and newest[-1]["status"] == "idle"
        before = http.get(
            f"/api/events/{session}/page", params={"before": seqs[0], "limit": 1000}
        ).json()
        assert before[-1]["seq"] < seqs[0]
        assert before[0]["type"] == "session_created"
        types = [r["type"] for r in before + newest]
        assert "cell_finished" in types and "turn_ended" in types
        bad = http.get(f"/api/events/{session}/page", params={"limit": "many"})
        assert bad.status_code == 400 and bad.json()["kind"] == "invalid"
        gone = http.get("/api/events/no-such-session/page")
        assert gone.status_code == 404


def test_streams_carry_the_seq_and_resume_after_the_last_event_id(
    web: tuple[WebServer, str],
) -> None:
    server, session = web
    first = sse_records(server, f"/api/events/{session}?after=0", 3)
    assert [r["_id"] for r in first] == [str(r["seq"]) for r in first]
    assert first[0]["type"] == "session_created"
    # A browser reconnecting sends the last id it saw: the stream goes on after it.
    resumed = sse_records(
        server, f"/api/events/{session}?after=0", 1, last_event_id=first[1]["_id"]
    )
    assert resumed[0]["seq"] == first[2]["seq"]
    # The feed: every session's records in seq order.
    feed = sse_records(server, "/api/feed?after=0", 2)
    assert [r["seq"] for r in feed] == [first[0]["seq"], first[1]["seq"]]
    assert {r["session_id"] for r in feed} == {session}


def test_a_stream_of_an_unknown_session_is_404(web: tuple[WebServer, str]) -> None:
    server, _ = web
    with server.client() as http:
        response = http.get("/api/events/no-such-session")
        assert response.status_code == 404
        assert response.json()["kind"] == "not_found"


def test_a_dead_daemon_is_one_line_and_its_return_is_picked_up(
    env: dict[str, str], tmp_path: Path
) -> None:
    with web_server(env, tmp_path) as server:
        assert server.op("status", {})["sessions"] == 0
        ok(["daemon", "stop"], env, tmp_path)
        with server.client() as http:
            down = http.post("/api/op/status", json={})
            assert down.status_code == 503
            assert down.json()["kind"] == "daemon"
            assert "no daemon is running" in down.json()["message"]
            with http.stream("GET", "/api/feed?after=0") as stream:
                lines = list(stream.iter_lines())
            assert "event: failure" in lines
            assert http.get("/").status_code == 200  # the page itself is still served
        ok(["daemon", "start"], env, tmp_path)
        assert server.op("status", {})["sessions"] == 0
        assert server.process.poll() is None


def test_a_port_in_use_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = fails(["web", "--no-browser", "--port", str(port)], env, tmp_path, 2)
    assert line.startswith(f"recursa: cannot listen on 127.0.0.1:{port}: ")


def test_the_browser_is_opened_on_a_private_file_not_on_the_token(tmp_path: Path) -> None:
    """A browser's arguments are readable by every local user (/proc): it gets
    a file:// launcher, readable by this user only and gone when the server stops."""
    home = tmp_path / "home"
    seen = tmp_path / "browser-argv"
    browser = tmp_path / "browser"
    browser.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > "{seen}.part" && mv "{seen}.part" "{seen}"\n'
    )
    browser.chmod(0o755)
    with FakeModelServer.in_thread() as fake:
        env = {**daemon_env(home, fake), "DISPLAY": ":99", "BROWSER": str(browser)}
        try:
            with web_server(env, tmp_path, browser=True) as server:
                deadline = time.monotonic() + 30
                while not seen.exists():
                    assert time.monotonic() < deadline, "no browser was started"
                    time.sleep(0.05)
                args = seen.read_text().split()
                assert len(args) == 1 and args[0].startswith("file:///"), args
                assert server.token not in args[0]
                launcher = Path(unquote(urlsplit(args[0]).path))
                assert launcher.parent == home / "web"
                assert stat.S_IMODE(launcher.parent.stat().st_mode) == 0o700
                assert stat.S_IMODE(launcher.stat().st_mode) == 0o600
                text = html.unescape(launcher.read_text())
                assert f'content="0;url={server.url}"' in text
                assert f'location.replace("{server.url}")' in text
            assert not launcher.exists()
        finally:
            kill_everything(home)

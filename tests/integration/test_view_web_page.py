"""Races in the page's own state, in headless chromium: the page and its
server are the real ones; what the daemon answers is made up with
Playwright's request routing, so a reply can fail or lag on cue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from web_kit import WebServer, browser_page, web_on_a_fresh_home

NOW = 1_800_000_000.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[WebServer]:
    with web_on_a_fresh_home(tmp_path) as server:
        yield server


def info(ident: str, name: str) -> dict[str, Any]:
    return {
        "id": ident, "name": name, "parent_id": None, "depth": 0, "status": "idle",
        "model": "openai/m", "cwd": "/w", "created_at": NOW, "last_activity": NOW,
        "usage": {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
                  "cost": 0.0, "unknown_cost_calls": 0},
        "last_answer": None, "pending": 0, "cell_started_at": None,
    }  # fmt: skip


class Daemon:
    """Two sessions, ``s-a`` and ``s-b``, with empty logs and quiet streams.
    ``fail_rereads`` rereads of some sessions (``ids``) fail before they work;
    ``names`` is what a reread says the sessions are called."""

    def __init__(self, page: Page, fail_rereads: int = 0) -> None:
        self.fail_rereads = fail_rereads
        self.rereads: list[str] = []
        self.names = {"s-a": "alpha", "s-b": "beta"}
        page.route("**/api/op/*", self.op)
        page.route("**/api/events/*/page*", self.empty)
        page.route("**/api/events/*?*", self.quiet)
        page.route("**/api/feed*", self.quiet)

    def op(self, route: Route) -> None:
        name = route.request.url.rsplit("/", 1)[-1]
        body = json.loads(route.request.post_data or "{}")
        data: Any = None
        if name == "sessions":
            if body.get("ids"):
                self.rereads.append(body["ids"])
                if len(self.rereads) <= self.fail_rereads:
                    message = {"kind": "daemon", "message": "the daemon is gone"}
                    route.fulfill(
                        status=503, content_type="application/json", body=json.dumps(message)
                    )
                    return
            data = [info(ident, name) for ident, name in self.names.items()]
        elif name == "schedules":
            data = []
        elif name == "status":
            data = {"pid": 1, "version": "0", "protocol": 1, "started_at": NOW, "sessions": 2,
                    "loaded": 0, "running": 0, "recovering": False, "last_seq": 0}  # fmt: skip
        elif name == "harness_list":
            data = []
        route.fulfill(status=200, content_type="application/json", body=json.dumps(data))

    def empty(self, route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body="[]")

    def quiet(self, route: Route) -> None:
        route.fulfill(status=200, content_type="text/event-stream", body="retry: 600000\n\n")


def opened(page: Page, served: WebServer) -> None:
    page.goto(served.url)
    expect(page.locator("#tree tbody tr")).to_have_count(2)


def test_a_record_queued_for_one_session_is_never_drawn_into_the_next(served: WebServer) -> None:
    with browser_page() as (page, errors):
        Daemon(page)
        opened(page, served)
        page.evaluate("async () => { await select('s-a'); }")
        shown = page.evaluate(
            """async () => {
                const delta = (id, text) => ({seq: 0, session_id: id, ts: 0, type: "text_delta", text});
                queueLive("s-a", delta("s-a", "from A"));   // drawn on the next frame, were it kept
                const opening = select("s-b");
                queueLive("s-a", delta("s-a", "late from A"));  // A's stream, closing
                await opening;
                await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
                const before = [view.id, document.querySelector("#event-list").textContent, view.streaming];
                queueLive("s-b", delta("s-b", "from B"));
                await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
                return [...before, document.querySelector("#event-list").textContent];
            }"""
        )
        assert shown[:3] == ["s-b", "", None]
        # B's own records still come through (and stream into B's block).
        assert "from B" in shown[3] and "A" not in shown[3].replace("assistant", "")
        assert errors == []


def test_a_failed_reread_keeps_its_sessions_to_read(served: WebServer) -> None:
    with browser_page() as (page, errors):
        daemon = Daemon(page, fail_rereads=1)
        opened(page, served)
        daemon.names["s-b"] = "beta renamed"
        page.evaluate("markDirty('s-b')")
        # The first reread fails; the page says so and reads the session again.
        expect(page.locator("#notice")).to_have_text("the daemon is gone")
        row = page.locator('#tree tr[data-id="s-b"]')
        expect(row).to_contain_text("beta renamed", timeout=10_000)
        assert daemon.rereads[:2] == ["s-b", "s-b"]
        assert [e for e in errors if "503" not in e] == []

"""The page keeps up at the issue's scale (a 500-session tree and a
20,000-event session), and draws every kind of event as text, in headless
chromium.

The page and its server are the real ones; what the daemon would answer is
made up here with Playwright's request routing (500 sessions and 20,000
events are cheap to describe and slow to produce for real). What is measured
is the page's own work: rendering the tree, opening the session (only its
last page), paging all the way back, and appending live records. The bounds
are loose (a shared two-core machine runs these) and still well below
what a page that lays out every block per record costs (70 ms a record)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, Route

from recursa.protocol.events import (
    TRANSIENT_TYPES,
    AssistantReply,
    AutonomousEnded,
    CellFinished,
    CellOutput,
    CellStarted,
    Compacted,
    Event,
    EventRecord,
    GateChecked,
    InboxRead,
    InputPlaced,
    KernelStatus,
    ModelRetry,
    ModelUsage,
    Notice,
    ReadMessage,
    SessionCreated,
    StatusChanged,
    TextDelta,
    TurnEnded,
    TurnStarted,
    UserInput,
    record_to_dict,
)
from web_kit import WebServer, browser_page, shots_dir, web_on_a_fresh_home

SESSIONS = 500
EVENTS = 20_000
NOW = 1_800_000_000.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[WebServer]:
    with web_on_a_fresh_home(tmp_path) as server:
        yield server


def sessions() -> list[dict[str, Any]]:
    """10 roots, each with 7 children, each with 6 grandchildren: 500."""
    infos: list[dict[str, Any]] = []

    def add(parent: str | None, depth: int, name: str) -> str:
        ident = f"s-{len(infos):05d}"
        infos.append({
            "id": ident, "name": name, "parent_id": parent, "depth": depth,
            "status": ["running", "idle", "inactive"][len(infos) % 3], "model": "openai/m",
            "cwd": "/w", "created_at": NOW + len(infos), "last_activity": NOW + len(infos),
            "usage": {"calls": 1, "input_tokens": 100, "output_tokens": 10, "cached_tokens": 0,
                      "cost": 0.001, "unknown_cost_calls": 0},
            "last_answer": None, "pending": len(infos) % 2,
            "cell_started_at": NOW if len(infos) % 3 == 0 else None,
        })  # fmt: skip
        return ident

    for r in range(10):
        root = add(None, 0, f"root-{r}")
        for c in range(7):
            child = add(root, 1, f"child-{r}-{c}")
            for g in range(6):
                add(child, 2, f"grandchild-{r}-{c}-{g}")
    assert len(infos) == SESSIONS
    return infos


def record(seq: int) -> dict[str, Any]:
    base = {"seq": seq, "session_id": "s-00000", "ts": NOW + seq}
    match seq % 4:
        case 0:
            return {
                **base,
                "type": "cell_started",
                "cell": seq,
                "call_id": "c",
                "code": "x = 1\n" * 3,
            }
        case 1:
            return {**base, "type": "cell_finished", "cell": seq - 1, "call_id": "c",
                    "status": "ok", "output": "line\n" * (40 if seq % 40 == 1 else 2),
                    "chars": 100, "truncated": False, "duration": 0.1}  # fmt: skip
        case 2:
            return {**base, "type": "assistant_reply", "text": f"reply {seq} " * 8,
                    "tool_calls": [], "step": 1, "fenced": False, "cut_off": False}  # fmt: skip
        case _:
            return {**base, "type": "user_input", "text": f"<i>message</i> {seq}",
                    "source": "child", "sender": "s-00001", "mode": "turn"}  # fmt: skip


def route_daemon(page: Page, events: int = EVENTS) -> None:
    infos = sessions()

    def ops(route: Route) -> None:
        name = route.request.url.rsplit("/", 1)[-1]
        body = json.loads(route.request.post_data or "{}")
        if name == "sessions":
            wanted = set(body["ids"].split(",")) if body.get("ids") else None
            data: Any = [i for i in infos if wanted is None or i["id"] in wanted]
        else:
            data = {"goal": None, "schedules": [], "harness_list": []}.get(name)
            if name == "status":
                data = {"pid": 1, "version": "0", "protocol": 1, "started_at": NOW,
                        "sessions": SESSIONS, "loaded": 0, "running": 0, "recovering": False}  # fmt: skip
        route.fulfill(status=200, content_type="application/json", body=json.dumps(data))

    def page_of_events(route: Route) -> None:
        query = parse_qs(urlsplit(route.request.url).query)
        before = int(query.get("before", [events + 1])[0])
        limit = int(query["limit"][0])
        seqs = range(max(1, before - limit), min(before, events + 1))
        body = json.dumps([record(seq) for seq in seqs])
        route.fulfill(status=200, content_type="application/json", body=body)

    def quiet_stream(route: Route) -> None:
        route.fulfill(status=200, content_type="text/event-stream", body="retry: 600000\n\n")

    page.route("**/api/op/*", ops)
    page.route(re.compile(r".*/api/events/[^/]+/page\?.*"), page_of_events)
    page.route(re.compile(r".*/api/events/[^/?]+\?.*"), quiet_stream)
    page.route("**/api/feed*", quiet_stream)


@pytest.mark.slow  # ~10 s: a 500-session tree and a 20,000-event session in the browser
def test_a_500_session_tree_and_a_20000_event_session_render_without_lag(
    served: WebServer, tmp_path: Path
) -> None:
    with browser_page() as (page, errors):
        route_daemon(page)
        page.goto(served.url)
        page.wait_for_function(
            f"() => document.querySelectorAll('#tree tbody tr').length === {SESSIONS}"
        )
        # A full redraw of the tree (what a burst of updates costs at most, 4 times a second).
        redraw = page.evaluate(
            "() => { const t = performance.now(); renderTree(); return performance.now() - t; }"
        )
        assert redraw < 500, f"the 500-session tree took {redraw:.0f} ms to draw"
        # The filter narrows it at once: a grandchild, with its parent and root as context.
        page.fill("#filter", "grandchild-9-6-5")
        page.wait_for_function("() => document.querySelectorAll('#tree tbody tr').length === 3")
        page.fill("#filter", "")

        # The 20,000-event session opens on its last page only.
        opened = page.evaluate(
            """async () => { const t = performance.now(); await select("s-00000");
                return [performance.now() - t, document.querySelectorAll('#event-list .ev').length]; }"""
        )
        assert opened[1] == 300
        assert opened[0] < 3000, f"opening took {opened[0]:.0f} ms"
        # Scrolling back to its first event reads the pages before, one at a time.
        back = page.evaluate(
            """async () => { const t = performance.now(); await jumpToSeq("s-00000", 1);
                return [performance.now() - t, document.querySelectorAll('#event-list .ev').length]; }"""
        )
        assert back[1] == EVENTS
        assert back[0] < 30_000, f"paging back through 20,000 events took {back[0]:.0f} ms"
        assert page.locator("#ev-1.flash").is_visible()
        # Markup in model text stays text, all 5,000 messages of it.
        assert page.locator("#event-list i").count() == 0
        # Live records keep coming in at the end of all that: 1,000 of them.
        live = page.evaluate(
            """() => { const t = performance.now();
                for (let s = 20001; s <= 21000; s += 10) {  // batches of 10, as frames gather them
                  const batch = [];
                  for (let n = s; n < s + 10; n++) batch.push({seq: n, session_id: "s-00000",
                    ts: 0, type: "notice", text: `live ${n}`, level: "info"});
                  liveRecords(batch);
                }
                return (performance.now() - t) / 1000; }"""
        )
        assert live < 10, f"a live record took {live:.1f} ms"
        assert page.locator("#ev-21000").is_visible() or page.locator("#ev-21000").count() == 1
        print(
            f"tree redraw {redraw:.0f} ms; open {opened[0]:.0f} ms; "
            f"page back {back[0]:.0f} ms; live {live:.2f} ms/record"
        )
        page.screenshot(path=shots_dir(tmp_path / "shots") / "web-scale.png")
        assert errors == []


def every_event() -> list[dict[str, Any]]:
    """One record of each kind of event (the transient ones with seq 0), in a
    plausible order, with markup in the model's and agents' text."""
    events: list[Event] = [
        SessionCreated(model="openai/m", cwd="/w", name="worker", parent_id="s-00001"),
        InputPlaced(name="context", origin="file", chars=1200, lines=30, label="notes.txt"),
        UserInput(
            text="from the parent: <script>alert(1)</script>", source="parent", sender="s-00001"
        ),
        TurnStarted(turn=3),
        TextDelta(text="Let me "),
        TextDelta(text="check."),
        AssistantReply(text="Let me check.", step=1),
        ModelUsage(
            model="openai/m", input_tokens=1200, output_tokens=40, cost=0.0012, latency=0.8, step=1
        ),
        ModelRetry(kind="rate_limit", message="slow down", attempt=1, delay=2.0),
        CellStarted(cell=5, call_id="c5", code="import os\nprint(os.getcwd())  # where"),
        CellOutput(cell=5, stream="stdout", text="/w\n"),
        CellFinished(
            cell=5,
            call_id="c5",
            status="error",
            output="NameError: <b>x</b>",
            chars=19,
            duration=0.2,
        ),
        UserInput(text="also look at the tests", source="user", mode="steer"),
        KernelStatus(state="restarted", detail="after a crash"),
        Notice(text="harness: memory 'deploy notes' v2: active (h-1234567890)"),
        Notice(text="the budget is nearly spent", level="warning"),
        Compacted(
            summary="Earlier the agent read notes.txt.",
            through=10,
            tokens_before=90_000,
            tokens_after=4_000,
        ),
        InboxRead(messages=(ReadMessage(id=1, sender="s-00002", source="child", text="42"),)),
        UserInput(text="tick: check the queue", source="schedule"),
        UserInput(text="continue toward the goal", source="goal"),
        GateChecked(
            gate="pytest -q", status="failed", turn=3, exit_code=1, output="1 failed", chars=8
        ),
        AutonomousEnded(
            outcome="max_turns", detail="autonomous: 10 turns, gates failing", turns=10
        ),
        TurnEnded(turn=3, reason="answered", answer="All <b>done</b>."),
        StatusChanged(status="idle"),
    ]
    records, seq = [], 0
    for event in events:
        transient = event.type in TRANSIENT_TYPES
        seq += 0 if transient else 1
        records.append(record_to_dict(EventRecord(0 if transient else seq, "s-00000",
                                                  NOW + seq, event)))  # fmt: skip
    return records


def test_every_kind_of_event_is_drawn_as_text(served: WebServer, tmp_path: Path) -> None:
    records = every_event()
    with browser_page() as (page, errors):
        route_daemon(page, events=0)
        page.goto(served.url)
        page.wait_for_function("() => document.querySelectorAll('#tree tbody tr').length > 0")
        page.evaluate('() => select("s-00000")')
        page.evaluate("records => liveRecords(records)", records)
        stored = {r["type"] for r in records if r["seq"]}
        for kind in stored:
            assert page.locator(f'#event-list .ev[data-type="{kind}"]').count() >= 1, kind
        assert page.locator("#event-list .streaming").count() == 0  # the reply replaced it
        events = page.locator("#event-list")
        assert events.locator("script, b").count() == 0
        assert "<script>alert(1)</script>" in events.inner_text()
        assert page.locator("#event-list .ev.input.steer").count() == 1
        expect_texts = ["from parent", "90,000 → 4,000 tokens", "schedule tick", "goal continuation",
                        "gate after turn 3", "autonomous run ended", "cell 5", "model retry 1"]  # fmt: skip
        text = events.inner_text()
        for wanted in expect_texts:
            assert wanted in text, wanted
        link = page.locator('#event-list a.entry-link[data-entry="h-1234567890"]')
        assert link.count() == 1
        page.screenshot(path=shots_dir(tmp_path / "shots") / "web-events.png", full_page=True)
        assert errors == []

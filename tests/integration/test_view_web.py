"""The acceptance of ``recursa web``, clicked through in a real browser.

Debian's chromium, driven headless by Playwright (its sync API: the demo
tree and the web server run in threads and processes of their own), against the real
``recursa web`` command and a real daemon running a three-level tree with a
scripted model (:func:`recursa.testing.demo_tree`). A person, without the
CLI: finds the grandchild and reads its last cell and output; sends it a
message that it answers in its next turn; sees the proposed skill with its
trigger events, diffs it against nothing and approves it; reverts a memory to
its previous version; all while the root's cell runs on, not interrupted.

Screenshots of each pane go to ``$RECURSA_SHOTS`` (default: the test's
temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from recursa.testing.demo_tree import demo_tree
from web_kit import WebServer, browser_page, shots_dir, web_server

HOSTILE = "<b>ping</b> from the browser"


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    return shots_dir(tmp_path / "shots")


def test_a_person_audits_and_steers_the_tree_in_a_browser(tmp_path: Path, shots: Path) -> None:
    with (
        demo_tree(tmp_path / "home") as demo,
        web_server(demo.env, tmp_path) as server,
        browser_page() as (page, errors),
    ):
        page.goto(server.url)
        # The tree: all three, the grandchild two levels down, the root's cell running.
        for session in (demo.root_id, demo.child_id, demo.grandchild_id):
            expect(page.locator(f'#tree tr[data-id="{session}"]')).to_be_visible()
        root_row = page.locator(f'#tree tr[data-id="{demo.root_id}"]')
        expect(root_row.locator(".badge")).to_have_text("running")
        grandchild_row = page.locator(f'#tree tr[data-id="{demo.grandchild_id}"]')
        expect(grandchild_row.locator("td").nth(3)).to_have_text("2")

        # 1. Find the grandchild by (a prefix of) its id and read its last cell and output.
        page.fill("#jump", demo.grandchild_id[:12])
        page.press("#jump", "Enter")
        expect(grandchild_row).to_have_class(re.compile(r"\bselected\b"))
        code, output = last_cell(server, demo.grandchild_id)
        expect(page.locator("#event-list .ev.cell pre.code").last).to_have_text(code)
        expect(page.locator("#event-list .ev.output pre.out").last).to_have_text(output)
        page.screenshot(path=shots / "web-session.png")

        # 2. Send it a message (text, never markup) that it answers in its next turn.
        page.fill("#message", HOSTILE)
        page.select_option("#mode", "follow_up")
        page.click("#send")
        answer = page.locator("#event-list .ev.ended .answer", has_text=f"pong: {HOSTILE}")
        expect(answer).to_be_visible(timeout=60_000)
        assert page.locator("#event-list b").count() == 0
        mine = page.locator("#event-list .ev.src-user .text", has_text=HOSTILE)
        expect(mine).to_be_visible()
        page.screenshot(path=shots / "web-message-answered.png")

        # 3. The proposal, first in the harness pane, with its trigger events.
        page.click('#tabs button[data-tab="harness"]')
        first = page.locator("#entries tbody tr").first
        expect(first).to_have_attribute("data-entry", demo.skill_id)
        expect(first.locator(".badge")).to_have_text("proposed")
        first.click()
        expect(page.locator("#entry-title")).to_be_visible()
        triggers = page.locator("#versions .seq-link")
        assert triggers.count() >= 1
        # The diff of v1 against nothing: every line added, none removed.
        diff = page.locator("#diff")
        expect(diff.locator("tr.head th").first).to_have_text("nothing")
        expect(diff.locator("tr.head th").last).to_have_text("v1")
        assert diff.locator("td.add").count() > 0
        assert diff.locator("td.del").count() == 0
        page.screenshot(path=shots / "web-harness-proposal.png")
        # A trigger event opens the session pane at that event.
        seq = triggers.first.get_attribute("data-seq")
        triggers.first.click()
        expect(page.locator(f"#ev-{seq}.flash")).to_be_in_viewport()
        page.screenshot(path=shots / "web-trigger-event.png")
        # Approve it.
        page.click('#tabs button[data-tab="harness"]')
        page.locator(f'#entries tr[data-entry="{demo.skill_id}"]').click()
        page.fill("#decision-reason", "a plain helper, fine for everyone")
        page.click("#approve")
        expect(page.locator("#entry-meta")).to_contain_text("active")
        skill = server.op("harness_show", {"entry": demo.skill_id})
        assert skill["entry"]["status"] == "active"
        assert skill["history"][-1]["actor"] == "human"
        assert skill["history"][-1]["reason"] == "a plain helper, fine for everyone"

        # 4. Revert the memory to its previous version with one click.
        page.locator(f'#entries tr[data-entry="{demo.memory_id}"]').click()
        revert = page.locator("#revert-prev")
        expect(revert).to_have_text("Revert to v1")
        revert.click()
        expect(page.locator("#entry-meta")).to_contain_text("v3")
        memory = server.op("harness_show", {"entry": demo.memory_id})
        versions = {v["version"]: v for v in memory["history"]}
        assert memory["entry"]["content"] == versions[1]["content"] != versions[2]["content"]
        assert memory["entry"]["actor"] == "human"
        page.screenshot(path=shots / "web-harness-reverted.png")

        # The usage pane of the root: its subtree, each child's share.
        page.locator(f'#tree tr[data-id="{demo.root_id}"]').click()
        page.click('#tabs button[data-tab="usage"]')
        expect(page.locator(f'#usage tr[data-id="{demo.grandchild_id}"]')).to_be_visible()
        expect(page.locator("#usage .share-cell").first).to_contain_text("%")
        page.screenshot(path=shots / "web-usage.png")
        page.click('#tabs button[data-tab="session"]')
        expect(page.locator("#event-list .ev.cell .running").last).to_be_visible()
        page.screenshot(path=shots / "web-root-running.png")

        # All the while the root's turn ran on: its cell was not interrupted.
        assert server.op("session", {"session": demo.root_id})["status"] == "running"
        assert demo.release_root() == "ok"
        assert errors == []


def last_cell(server: WebServer, session: str) -> tuple[str, str]:
    """The code and output of the session's last finished cell, as the daemon has them."""
    with server.client() as http:
        records = http.get(f"/api/events/{session}/page", params={"limit": 500}).json()
    started = {r["cell"]: r["code"] for r in records if r["type"] == "cell_started"}
    finished = [r for r in records if r["type"] == "cell_finished"]
    assert finished, "the grandchild ran no cell"
    return started[finished[-1]["cell"]], finished[-1]["output"]


def test_the_session_actions_work_from_the_page(tmp_path: Path, shots: Path) -> None:
    """Goal, schedules, unload, the filters, the keys and interrupt, by clicking."""
    with (
        demo_tree(tmp_path / "home") as demo,
        web_server(demo.env, tmp_path, ["child"]) as server,
        browser_page() as (page, errors),
    ):
        assert server.url.endswith("&session=child")
        page.goto(server.url)
        # `recursa web child` opens on that session.
        child = page.locator(f'#tree tr[data-id="{demo.child_id}"]')
        expect(child).to_have_class(re.compile(r"\bselected\b"))
        expect(page.locator("#session-title")).to_contain_text(demo.child_id)
        # The token left the address bar at once; the page keeps it for its own
        # origin (port) only; no cookie was set.
        assert page.url == f"{server.base}/"
        assert page.evaluate("sessionStorage.getItem('recursa-web-token')") == server.token
        assert page.context.cookies() == []
        page.reload()  # the same tab goes on without the fragment
        expect(child).to_be_visible()
        child.click()
        expect(child).to_have_class(re.compile(r"\bselected\b"))
        # Keys: up to the root, 2 for the harness pane, 1 back.
        page.keyboard.press("ArrowUp")
        root = page.locator(f'#tree tr[data-id="{demo.root_id}"]')
        expect(root).to_have_class(re.compile(r"\bselected\b"))
        page.keyboard.press("2")
        expect(page.locator("#harness-pane")).to_be_visible()
        page.select_option("#h-status", "proposed")
        expect(page.locator("#entries tbody tr")).to_have_count(1)
        expect(page.locator("#entries tbody tr")).to_have_attribute("data-entry", demo.skill_id)
        page.select_option("#h-status", "")
        page.select_option("#h-kind", "memory")
        expect(page.locator("#entries tbody tr")).to_have_count(1)
        expect(page.locator("#entries tbody tr")).to_have_attribute("data-entry", demo.memory_id)
        page.keyboard.press("1")
        expect(page.locator("#session-pane")).to_be_visible()
        page.keyboard.press("/")
        expect(page.locator("#filter")).to_be_focused()
        page.keyboard.press("Escape")
        # A goal for the running root: its prompt waits in the queue, so nothing races.
        page.click("#controls summary")
        page.fill("#goal-objective", "keep the demo tidy")
        page.fill("#goal-budget", "5000")
        page.click("#goal-form button[type=submit]")
        goal_line = page.locator("#goal-line")
        expect(goal_line).to_contain_text("goal (active): keep the demo tidy")
        expect(goal_line).to_contain_text("of 5,000 tokens")
        page.click('[data-goal="pause"]')
        expect(goal_line).to_contain_text("goal (paused)")
        page.click('[data-goal="resume"]')
        expect(goal_line).to_contain_text("goal (active)")
        page.click('[data-goal="clear"]')
        expect(goal_line).not_to_contain_text("(active)")
        # A schedule is listed and cancelled.
        job = server.op(
            "add_schedule", {"session": demo.root_id, "spec": "every 1h", "prompt": "check in"}
        )
        page.click("#controls summary")  # closed, then open again: read anew
        page.click("#controls summary")
        row = page.locator("#schedules tr", has_text=f"#{job['id']}")
        expect(row).to_contain_text("every 1h")
        page.screenshot(path=shots / "web-controls.png")
        row.get_by_role("button", name="Cancel").click()
        expect(page.locator("#schedules")).to_contain_text("no schedules")
        assert server.op("schedules", {"session": demo.root_id}) == []

        # Unload the idle grandchild; the status filter then finds it among the inactive.
        page.locator(f'#tree tr[data-id="{demo.grandchild_id}"]').click()
        page.click("#act-unload")
        grandchild = page.locator(f'#tree tr[data-id="{demo.grandchild_id}"]')
        expect(grandchild.locator(".badge")).to_have_text("inactive")
        page.select_option("#status-filter", "running")
        expect(page.locator("#tree tbody tr")).to_have_count(1)
        expect(root).to_be_visible()
        page.select_option("#status-filter", "all")
        page.fill("#filter", "grandchild")  # its ancestors stay, as its context
        expect(page.locator("#tree tbody tr")).to_have_count(3)

        # Interrupt the root: its cell ends interrupted, and it is idle.
        root.click()
        page.click("#act-interrupt")
        expect(root.locator(".badge")).to_have_text("idle", timeout=30_000)
        outcome = page.locator("#event-list .ev.output .badge", has_text="interrupted")
        expect(outcome).to_be_visible()
        page.screenshot(path=shots / "web-interrupted.png")
        assert errors == []

        # A page opened without the token (a fresh profile) says in one line how to get in.
        browser = page.context.browser
        assert browser is not None
        stranger = browser.new_page()
        stranger.goto(f"{server.base}/")
        expect(stranger.locator("#no-token")).to_be_visible()
        expect(stranger.locator("#no-token")).to_contain_text(
            "open the URL that recursa web printed"
        )
        expect(stranger.locator("#tree tbody tr")).to_have_count(0)
        expect(stranger.locator("#live")).to_have_text("no token")
        assert stranger.context.cookies() == []
        stranger.screenshot(path=shots / "web-no-token.png")


def test_attached_the_message_box_writes_to_one_session_whatever_is_shown(
    tmp_path: Path, shots: Path
) -> None:
    """Attach to the grandchild, read the root, message the grandchild; detach."""
    with (
        demo_tree(tmp_path / "home") as demo,
        web_server(demo.env, tmp_path) as server,
        browser_page() as (page, errors),
    ):
        page.goto(server.url)
        root = page.locator(f'#tree tr[data-id="{demo.root_id}"]')
        grandchild = page.locator(f'#tree tr[data-id="{demo.grandchild_id}"]')
        attach, badge = page.locator("#act-attach"), page.locator("#attached")
        message, send = page.locator("#message"), page.locator("#send")
        expect(badge).to_be_hidden()
        grandchild.click()
        expect(page.locator("#session-title")).to_contain_text(demo.grandchild_id)
        expect(attach).to_have_text("Attach")
        attach.click()
        expect(attach).to_have_text("Detach")
        expect(badge).to_have_text("attached to grandchild · detach")
        expect(grandchild).to_have_class(re.compile(r"\battached\b"))

        # The root shown: the message box still writes to the grandchild, and says so.
        root.click()
        expect(page.locator("#session-title")).to_contain_text(demo.root_id)
        expect(root).to_have_class(re.compile(r"\bselected\b"))
        expect(attach).to_have_text("Attach")
        expect(badge).to_be_visible()
        expect(message).to_have_attribute(
            "placeholder", re.compile(r"^message attached grandchild")
        )
        expect(send).to_have_text("Send to grandchild")
        message.fill("ping attached")
        send.click()
        expect(page.locator("#notice")).to_contain_text("to grandchild")
        page.screenshot(path=shots / "web-attached.png")

        # The grandchild answers it; the root never got it.
        grandchild.click()
        answer = page.locator("#event-list .ev.ended .answer", has_text="pong: ping attached")
        expect(answer).to_be_visible(timeout=60_000)
        expect(
            page.locator("#event-list .ev.src-user .text", has_text="ping attached")
        ).to_be_visible()

        # Detach from the header: the message box writes to the session shown again.
        page.click("#detach")
        expect(badge).to_be_hidden()
        expect(attach).to_have_text("Attach")
        expect(grandchild).not_to_have_class(re.compile(r"\battached\b"))
        root.click()
        expect(page.locator("#session-title")).to_contain_text(demo.root_id)
        expect(message).to_have_attribute("placeholder", re.compile(r"^message the session shown"))
        expect(send).to_have_text("Send")
        assert page.locator("#event-list .ev.src-user", has_text="ping attached").count() == 0
        before = server.op("session", {"session": demo.root_id})["pending"]
        page.select_option("#mode", "follow_up")  # the root's cell runs: it waits in its inbox
        message.fill("for the root")
        send.click()
        expect(page.locator("#notice")).to_contain_text("to demo-root")
        assert server.op("session", {"session": demo.root_id})["pending"] == before + 1
        assert server.op("session", {"session": demo.grandchild_id})["pending"] == 0
        # The key a attaches to the session shown, and on it again detaches.
        page.keyboard.press("a")
        expect(badge).to_have_text("attached to demo-root · detach")
        expect(attach).to_have_text("Detach")
        page.keyboard.press("a")
        expect(badge).to_be_hidden()
        assert demo.release_root() == "ok"
        assert errors == []

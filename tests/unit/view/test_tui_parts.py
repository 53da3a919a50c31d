"""The terminal app's pure parts: blocks drawn as text (never markup), the
side-by-side diff, usage shares, the tree's cells."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rich.console import Console
from textual.widgets import Static

from recursa.daemon.client import DaemonClient
from recursa.protocol.events import CellFinished, CellStarted, EventRecord, UserInput
from recursa.protocol.wire import HarnessEntry, SessionInfo, Usage, UsageNode
from recursa.view.blocks import Blocks
from recursa.view.tree import build_rows
from recursa.view.tui.app import ViewApp
from recursa.view.tui.diff import diff_table, side_by_side
from recursa.view.tui.render import ago, block_renderable, count, money_short
from recursa.view.tui.tree_pane import COLUMNS, row_cells
from recursa.view.tui.usage_pane import per_model, share, walk

HOSTILE = "[bold red]not markup[/] [link=http://x]click[/link] \x1b[31m"


def drawn(renderable: object, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def test_model_text_is_drawn_as_text_never_as_markup() -> None:
    blocks = Blocks()
    blocks.add(EventRecord(1, "s", 0.0, UserInput(text=HOSTILE, sender="[b]x[/b]", source="child")))
    blocks.add(
        EventRecord(2, "s", 0.0, CellStarted(cell=1, call_id="c", code=f"print({HOSTILE!r})"))
    )
    output = HOSTILE + "\n"
    blocks.add(
        EventRecord(
            3, "s", 0.0, CellFinished(cell=1, call_id="c", status="ok", output=output, chars=9)
        )
    )
    text = "".join(drawn(block_renderable(b)) for b in blocks.items)
    assert text.count("[bold red]not markup[/]") == 3
    assert "[link=http://x]click[/link]" in text
    assert "▶ child [b]x[/b] · turn" in text


def test_a_long_output_folds_until_expanded() -> None:
    blocks = Blocks()
    blocks.add(EventRecord(1, "s", 0.0, CellStarted(cell=1, call_id="c", code="x")))
    long = "\n".join(f"line {i}" for i in range(45))
    blocks.add(
        EventRecord(
            2, "s", 0.0, CellFinished(cell=1, call_id="c", status="ok", output=long, chars=1)
        )
    )
    [block] = blocks.items
    assert "… 25 more lines" in drawn(block_renderable(block))
    assert "line 44" not in drawn(block_renderable(block))
    assert "line 44" in drawn(block_renderable(block, expanded=True))


def entry(version: int, content: str, code: str | None = None) -> HarnessEntry:
    return HarnessEntry(
        id="h-1", version=version, kind="skill", title="double", scope="global",
        status="proposed", content=content, code=code, meta={}, reason="", effect="",
        review=None, created_at=0.0, session_id="s", action="create", actor="model",
    )  # fmt: skip


def test_side_by_side_pairs_changed_lines_and_pads_the_rest() -> None:
    rows = side_by_side("a\nb\nc", "a\nB\nc\nd")
    assert rows == [
        ("a", "a", "same"),
        ("b", "B", "changed"),
        ("c", "c", "same"),
        ("", "d", "added"),
    ]
    assert side_by_side("x", "") == [("x", "", "removed")]


def test_a_first_version_is_diffed_against_nothing() -> None:
    text = drawn(diff_table(None, entry(1, "Double it.", "def double(x):\n    return 2 * x")))
    assert "nothing (v0)" in text and "v1" in text
    assert "+ def double(x):" in text
    assert "- " not in text


def node(sid: str, spent: int, *children: UsageNode) -> UsageNode:
    own = Usage(calls=1, input_tokens=spent, output_tokens=0, cost=spent / 100)
    total = own
    for child in children:
        total = Usage(
            calls=total.calls + child.total.calls,
            input_tokens=total.input_tokens + child.total.input_tokens,
            cost=total.cost + child.total.cost,
        )
    return UsageNode(sid, sid, own, total, children)


def test_usage_shares_and_per_model_sums() -> None:
    root = node("r", 50, node("a", 30, node("g", 10)), node("b", 10))
    walked = [(n.id, depth, parent.id if parent else None) for n, depth, parent in walk(root)]
    assert walked == [("r", 0, None), ("a", 1, "r"), ("g", 2, "a"), ("b", 1, "r")]
    assert share(root.children[0].total, root.total) == "40%"
    assert share(Usage(), Usage()) == "-"
    models = per_model(root, {"r": "big", "a": "small", "g": "small", "b": "small"})
    assert (models["big"].input_tokens, models["small"].input_tokens) == (50, 50)
    assert models["small"].calls == 3


def test_figures_fit_their_columns() -> None:
    assert (count(950), count(12_345), count(4_500_000)) == ("950", "12.3k", "4.5M")
    assert money_short(Usage(cost=0.00042)) == "$.0004"
    assert money_short(Usage(cost=0.042)) == "$.042"
    assert money_short(Usage(cost=12.5, unknown_cost_calls=1)) == "$12.50?"
    assert (ago(100.0, 105.0), ago(0, 5), ago(100.0, 100.0 + 7300)) == ("5s", "-", "2h")


def test_a_tree_row_fits_eighty_columns_and_cuts_a_long_name() -> None:
    info = SessionInfo(
        id="s-0123456789abcd", name="a-very-long-session-name-indeed", parent_id=None,
        status="running", model="openai/gpt-4o-mini", cwd="/", created_at=0.0,
        last_activity=0.0, pending=3, cell_started_at=1.0,
    )  # fmt: skip
    [row] = build_rows([info])
    cells = row_cells(row, now=61.0)
    assert sum(width for _, _, width in COLUMNS) <= 78
    assert [len(c.plain) for c in cells] == [width for _, _, width in COLUMNS]
    assert cells[0].plain.startswith("a-very-long-ses") and "…" in cells[0].plain
    assert cells[1].plain.strip() == "89abcd"
    assert (cells[7].plain.strip(), cells[9].plain.strip()) == ("3", "1m")


def test_recursa_view_is_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "recursa", "view", "--help"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Watch, steer and audit" in done.stdout


async def test_status_lines_and_notifications_quote_text_never_parse_it(tmp_path: Path) -> None:
    """An error may quote a model's or a daemon's text: ``[/bold]`` in it is not a
    closing tag (which would end the app with a MarkupError), and ``[link=...]``
    is not a link."""
    async with DaemonClient(tmp_path / "no-daemon-here") as client:
        app = ViewApp(client)
        async with app.run_test(size=(80, 24)) as pilot:
            app.status(f"daemon: {HOSTILE} [/bold] ended")
            app.notify(f"{HOSTILE} [/x] is v2, active (approve)")
            app.screen.notify("[/y] from a widget")
            await pilot.pause()
            shown = str(app.query_one("#status", Static).render())
            assert "[/bold] ended" in shown and "[bold red]not markup[/]" in shown
            assert [n.markup for n in app._notifications] == [False, False]

"""The tree pane: every session as a table row, live, with a status and name filter."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from recursa.view.tree import TreeRow, filter_rows, short_id, tokens
from recursa.view.tui.render import ago, count, money_short

STATUS_CYCLE: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({"running", "admitted"}),
    frozenset({"idle"}),
    frozenset({"inactive"}),
)
"""What ``t`` steps through: all, running (follow the running ones), idle, inactive."""

STATUS_STYLE = {"running": "bold green", "admitted": "yellow", "idle": "", "inactive": "dim"}
COLUMNS = (
    ("name", "name", 17),
    ("id", "id", 7),
    ("status", "status", 9),
    ("model", "model", 6),
    ("d", "depth", 2),
    ("tokens", "tokens", 10),
    ("cost", "cost", 15),
    ("in", "pending", 3),
    ("ago", "last", 4),
    ("run", "cell", 4),
)
"""Label, key and width; each cell is cut to one less and ends in a space (the
table pads nothing, so that every column fits in 80)."""


def _cell(text: str, width: int, style: str = "") -> Text:
    if len(text) >= width:
        text = text[: width - 2] + "…"
    return Text(text.ljust(width), style=style)


def row_cells(row: TreeRow, now: float) -> tuple[Text, ...]:
    """The cells of one row: plain texts (a name is the model's to choose)."""
    info = row.info
    started = info.cell_started_at
    unknown = "?" if row.subtree.unknown_cost_calls else ""
    values = (
        ("  " * row.depth + ("└ " if row.depth else "") + row.label, "" if row.matched else "dim"),
        (short_id(info.id), "dim"),
        (info.status, STATUS_STYLE.get(info.status, "")),
        (info.model.split("/")[-1], ""),
        (str(row.depth), ""),
        (f"{count(tokens(info.usage))}/{count(tokens(row.subtree))}", ""),
        (
            f"{money_short(info.usage, mark=False)}/{money_short(row.subtree, mark=False)}{unknown}",
            "",
        ),
        (str(info.pending) if info.pending else "", "bold"),
        (ago(info.last_activity, now), ""),
        (ago(started, now) if started else "", "green"),
    )
    return tuple(
        _cell(text, width, style)
        for (text, style), (_, _, width) in zip(values, COLUMNS, strict=True)
    )


class TreePane(Vertical):
    """The session table. Posts :class:`TreePane.Chosen` when a row is picked (enter)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "filter"),
        Binding("t", "cycle_status", "status"),
    ]

    class Chosen(Message):
        def __init__(self, session_id: str) -> None:
            super().__init__()
            self.session_id = session_id

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.all_rows: list[TreeRow] = []
        self.shown: list[TreeRow] = []
        self.status_index = 0
        self.needle = ""

    def compose(self) -> ComposeResult:
        yield Static(id="tree-head")
        yield Input(placeholder="/ filter by name or id (enter: done, esc: clear)", id="filter")
        table: DataTable[Text] = DataTable(
            id="sessions", cursor_type="row", zebra_stripes=True, cell_padding=0
        )
        yield table

    def on_mount(self) -> None:
        table = self.table
        for label, key, width in COLUMNS:
            table.add_column(_cell(label, width, "bold"), key=key, width=width)
        self._title()

    @property
    def table(self) -> DataTable[Text]:
        return self.query_one("#sessions", DataTable)

    @property
    def highlighted(self) -> str | None:
        """The id of the session under the cursor."""
        table = self.table
        if not self.shown or table.cursor_row < 0 or table.cursor_row >= len(self.shown):
            return None
        return self.shown[table.cursor_row].id

    def show(self, rows: list[TreeRow], changed: set[str] | None = None) -> None:
        """Show ``rows`` (filtered here). With ``changed`` and the same rows in the
        same order, only those rows' cells are rewritten; else the table is redrawn."""
        self.all_rows = rows
        shown = filter_rows(rows, set(STATUS_CYCLE[self.status_index]), self.needle)
        table, now = self.table, time.time()
        same = [r.id for r in shown] == [r.id for r in self.shown]
        self.shown = shown
        if same and changed is not None:
            for row in shown:
                if row.id in changed:
                    for (_, key, _), cell in zip(COLUMNS, row_cells(row, now), strict=True):
                        table.update_cell(row.id, key, cell)
            return
        keep = self.highlighted if table.row_count else None
        table.clear()
        for row in shown:
            table.add_row(*row_cells(row, now), key=row.id)
        if keep is not None:
            self.select(keep)
        self._title()

    def tick(self) -> None:
        """Rewrite the clocks (last activity, running cell) of the running rows."""
        now = time.time()
        for row in self.shown:
            if row.info.status == "running":
                cells = row_cells(row, now)
                self.table.update_cell(row.id, "last", cells[-2])
                self.table.update_cell(row.id, "cell", cells[-1])

    def select(self, session_id: str) -> bool:
        """Move the cursor to ``session_id``; False when it is not shown."""
        for index, row in enumerate(self.shown):
            if row.id == session_id:
                self.table.move_cursor(row=index)
                return True
        return False

    def _title(self) -> None:
        statuses = "/".join(sorted(STATUS_CYCLE[self.status_index])) or "all"
        needle = f" · name ~ {self.needle!r}" if self.needle else ""
        head = (
            f"{len(self.shown)} shown · status (t): {statuses}{needle} · tokens, cost: own/tree"
            " · in: unread · ago: last active · run: cell running for"
        )
        self.query_one("#tree-head", Static).update(Text(head, style="dim"))

    def action_filter(self) -> None:
        # At once, not after the keys already queued: a name typed fast goes in the box.
        self.screen.set_focus(self.query_one("#filter", Input))

    def action_cycle_status(self) -> None:
        self.status_index = (self.status_index + 1) % len(STATUS_CYCLE)
        self.show(self.all_rows)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.needle = event.value
        self.show(self.all_rows)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        """Back to the table, its cursor on the first row that matched."""
        self.table.focus()
        first = next((row for row in self.shown if row.matched), None)
        if first is not None:
            self.select(first.id)

    def key_escape(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_focus:
            box.value = ""
            self.table.focus()

    @on(DataTable.RowSelected, "#sessions")
    def _chosen(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.post_message(self.Chosen(event.row_key.value))


__all__ = ["TreePane"]

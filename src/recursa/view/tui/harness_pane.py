"""The harness pane: entries (proposals waiting for a person first), each one's
version history with its trigger events, a side-by-side diff, and one-key
approve, reject and revert."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, OptionList, Static
from textual.widgets.option_list import Option

from recursa.daemon.client import DaemonClient
from recursa.errors import RecursaError
from recursa.protocol.harness import KINDS, SCOPES, STATUSES
from recursa.protocol.person_ops import (
    HARNESS_APPROVE,
    HARNESS_LIST,
    HARNESS_REJECT,
    HARNESS_REVERT,
    HARNESS_SHOW,
    Decision,
    EntryRef,
    HarnessQuery,
    Revert,
)
from recursa.protocol.wire import HarnessDetail, HarnessEntry
from recursa.view.blocks import Blocks, NameOf
from recursa.view.tui.diff import diff_table
from recursa.view.tui.live import closing
from recursa.view.tui.render import ago

TRIGGERS_SHOWN = 6
CHOICES: dict[str, tuple[str, ...]] = {"kind": KINDS, "scope": SCOPES, "status": STATUSES}
DECIDED_BY = "decided in recursa view"


def entry_order(entry: HarnessEntry) -> tuple[int, str, str, str, str]:
    """Proposals waiting for a person first, then by kind, scope, status and title."""
    return (entry.status != "proposed", entry.kind, entry.scope, entry.status, entry.title)


class HarnessPane(Vertical):
    """Posts :class:`HarnessPane.Jump` when a trigger event is picked."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "approve", "approve"),
        Binding("r", "reject", "reject"),
        Binding("v", "revert", "revert"),
        Binding("d", "diff", "diff"),
        Binding("space", "mark", "mark from", show=False),
        Binding("j", "jump", "jump to event"),
        Binding("k", "cycle('kind')", "kind", show=False),
        Binding("s", "cycle('scope')", "scope", show=False),
        Binding("t", "cycle('status')", "status", show=False),
    ]

    class Jump(Message):
        def __init__(self, session_id: str, seq: int) -> None:
            super().__init__()
            self.session_id = session_id
            self.seq = seq

    def __init__(self, client: DaemonClient, name_of: NameOf, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.client = client
        self.name_of = name_of
        self.entries: list[HarnessEntry] = []
        self.detail: HarnessDetail | None = None
        self.marked: int | None = None
        self.triggers: list[tuple[str, int]] = []
        self.filters: dict[str, str | None] = {"kind": None, "scope": None, "status": None}

    def compose(self) -> ComposeResult:
        yield Static(id="harness-head")
        yield DataTable(id="entries", cursor_type="row")
        with VerticalScroll(id="entry-detail"):
            yield Static(id="entry-head")
            yield DataTable(id="history", cursor_type="row")
            yield OptionList(id="triggers")
            yield Static(id="diff")

    def on_mount(self) -> None:
        entries = self.query_one("#entries", DataTable)
        for label, width in (("status", 9), ("kind", 12), ("scope", 6), ("title", 22)):
            entries.add_column(label, width=width)
        entries.add_columns("v", "by", "age")
        history = self.query_one("#history", DataTable)
        history.add_columns("v", "action", "actor", "status", "events", "reason")
        self.query_one("#triggers", OptionList).border_title = "trigger events (enter: open)"

    # -- loading -------------------------------------------------------------------------------

    @work(exclusive=True, group="harness-list")
    async def reload(self) -> None:
        """Read the entries again (newest versions) and redraw the table."""
        try:
            entries = await self.client.call(HARNESS_LIST, HarnessQuery(**self.filters))
        except RecursaError as exc:
            self.app.notify(f"harness: {exc}", severity="error")
            return
        # Read the cursor's entry only now: the table and self.entries change
        # together, after the await, so they agree here.
        shown = self.entry
        keep = shown.id if shown is not None else None
        self.entries = sorted(entries, key=entry_order)
        table = self.query_one("#entries", DataTable)
        table.clear()
        for entry in self.entries:
            waiting = entry.status == "proposed"
            table.add_row(
                Text(entry.status, style="bold yellow" if waiting else ""),
                Text(entry.kind),
                Text(entry.scope),
                Text(entry.title),
                Text(f"v{entry.version}"),
                Text(entry.actor),
                Text(ago(entry.created_at)),
                key=entry.id,
            )
        asked = sum(e.status == "proposed" for e in self.entries)
        wanted = " · ".join(f"{name} {value or 'any'}" for name, value in self.filters.items())
        head = Text(f"{len(self.entries)} entries, {asked} waiting for you", style="bold")
        head.append(f" · {wanted} (k, s, t)", style="dim")
        self.query_one("#harness-head", Static).update(head)
        if self.entries:
            # The entry under the cursor stays under it, wherever the new order puts it.
            ids = [entry.id for entry in self.entries]
            table.move_cursor(row=ids.index(keep) if keep in ids else 0)
            self.show_entry(self.entries[table.cursor_row].id)
        else:
            self.detail = None
            self.query_one("#entry-head", Static).update(Text("no entry matches", style="dim"))
            self.query_one("#history", DataTable).clear()
            self.query_one("#diff", Static).update("")
            self.show_triggers(None)

    @property
    def entry(self) -> HarnessEntry | None:
        table = self.query_one("#entries", DataTable)
        if not self.entries or not 0 <= table.cursor_row < len(self.entries):
            return None
        return self.entries[table.cursor_row]

    @on(DataTable.RowHighlighted, "#entries")
    def _entry_highlighted(self) -> None:
        # The entry under the cursor now, not the event's row: a redraw's
        # highlight may arrive after the cursor moved on.
        entry = self.entry
        if entry is None:
            return
        if self.detail is None or self.detail.entry.id != entry.id:
            self.marked = None
        self.show_entry(entry.id)

    @work(exclusive=True, group="harness-show")
    async def show_entry(self, entry_id: str) -> None:
        try:
            detail = await self.client.call(HARNESS_SHOW, EntryRef(entry_id))
        except RecursaError as exc:
            self.app.notify(f"harness: {exc}", severity="error")
            return
        self.detail = detail
        entry = detail.entry
        head = Text()
        head.append(f"{entry.title}", style="bold")
        head.append(f"  {entry.kind} · {entry.scope} · {entry.status} · id {entry.id[:8]}")
        effective = f"v{detail.effective}" if detail.effective else "none"
        head.append(f" · in force: {effective}\n", style="dim")
        head.append(f"reason: {entry.reason or '-'}\neffect: {entry.effect or '-'}")
        self.query_one("#entry-head", Static).update(head)
        history = self.query_one("#history", DataTable)
        history.clear()
        for version in detail.history:
            events = ",".join(f"#{seq}" for seq in version.source_events) or "-"
            history.add_row(
                Text(f"v{version.version}"),
                Text(version.action),
                Text(version.actor),
                Text(version.status),
                Text(events),
                Text(version.reason),
                key=str(version.version),
            )
        history.move_cursor(row=len(detail.history) - 1)
        self.query_one("#diff", Static).update("")
        self.show_triggers(detail.history[-1] if detail.history else None)

    @property
    def version(self) -> HarnessEntry | None:
        """The version under the history cursor."""
        if self.detail is None or not self.detail.history:
            return None
        row = self.query_one("#history", DataTable).cursor_row
        return self.detail.history[min(max(row, 0), len(self.detail.history) - 1)]

    @on(DataTable.RowHighlighted, "#history")
    def _version_highlighted(self) -> None:
        self.show_triggers(self.version)

    @work(exclusive=True, group="harness-triggers")
    async def show_triggers(self, version: HarnessEntry | None) -> None:
        """List the events that led to ``version``, each with what it says. The
        lines are read first and shown at once; a newer call cancels this one."""
        found: list[tuple[str, int, Text]] = []
        if version is not None and version.session_id is not None:
            for seq in version.source_events[:TRIGGERS_SHOWN]:
                line = Text(f"#{seq} ", style="bold")
                line.append(await self._event_line(version.session_id, seq))
                found.append((version.session_id, seq, line))
        box = self.query_one("#triggers", OptionList)
        box.clear_options()
        self.triggers = [(session_id, seq) for session_id, seq, _ in found]
        if version is not None and not found:
            box.add_option(Option(Text("no trigger events recorded"), disabled=True))
        box.add_options([Option(line) for _, _, line in found])

    async def _event_line(self, session_id: str, seq: int) -> str:
        """One line saying what event ``seq`` of the session was."""
        stream = self.client.events(session_id, after=seq - 1, before=seq + 1, limit=1)
        blocks = Blocks(self.name_of)
        try:
            async with closing(stream) as records:
                blocks.extend([record async for record in records])
        except RecursaError as exc:
            return f"({exc})"
        if not blocks.items:
            return "(not found)"
        block = blocks.items[0]
        said = (block.code or block.body or block.output).strip().splitlines()
        return f"{block.title}: {said[0][:60]}" if said else block.title

    # -- actions -------------------------------------------------------------------------------

    @on(OptionList.OptionSelected, "#triggers")
    def _trigger_picked(self, event: OptionList.OptionSelected) -> None:
        if 0 <= event.option_index < len(self.triggers):
            self.post_message(self.Jump(*self.triggers[event.option_index]))

    def action_jump(self) -> None:
        box = self.query_one("#triggers", OptionList)
        index = box.highlighted if box.highlighted is not None else 0
        if 0 <= index < len(self.triggers):
            self.post_message(self.Jump(*self.triggers[index]))

    def action_cycle(self, field: str) -> None:
        """Step the ``field`` filter (kind, scope or status) to its next value (then any)."""
        choices: tuple[str | None, ...] = (None, *CHOICES[field])
        now = choices.index(self.filters[field])
        self.filters[field] = choices[(now + 1) % len(choices)]
        self.reload()

    def action_mark(self) -> None:
        version = self.version
        if version is not None:
            self.marked = version.version
            self.app.notify(f"diff from v{version.version}: pick another version, press d")

    def action_diff(self) -> None:
        """The selected version against the marked one, else against the one before
        (v1 against nothing)."""
        version, detail = self.version, self.detail
        if version is None or detail is None:
            return
        older_number = self.marked if self.marked is not None else version.version - 1
        older = next((v for v in detail.history if v.version == older_number), None)
        self.marked = None
        panel = self.query_one("#diff", Static)
        panel.update(diff_table(older, version))
        panel.border_title = (
            f"diff {'v' + str(older_number) if older else 'nothing'} → v{version.version}"
        )
        self.call_after_refresh(panel.scroll_visible, animate=False)

    async def _decide(self, what: str) -> None:
        entry = self.entry
        if entry is None:
            return
        try:
            if what == "approve":
                done = await self.client.call(HARNESS_APPROVE, Decision(entry.id, DECIDED_BY))
            elif what == "reject":
                done = await self.client.call(HARNESS_REJECT, Decision(entry.id, DECIDED_BY))
            else:
                version = self.version
                newest = self.detail.entry.version if self.detail else entry.version
                to = version.version if version and version.version < newest else newest - 1
                done = await self.client.call(HARNESS_REVERT, Revert(entry.id, to))
        except RecursaError as exc:
            self.app.notify(f"{what}: {exc}", severity="error")
            return
        self.app.notify(f"{done.title} is v{done.version}, {done.status} ({what})")
        self.reload()

    async def action_approve(self) -> None:
        await self._decide("approve")

    async def action_reject(self) -> None:
        await self._decide("reject")

    async def action_revert(self) -> None:
        await self._decide("revert")


__all__ = ["HarnessPane", "entry_order"]

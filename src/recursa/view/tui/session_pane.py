"""The session pane: one session's events as blocks, live, and the message box.

On :meth:`SessionPane.open` it reads the tail of the session's log
(``events(limit=TAIL)``; earlier pages back to a seq it must show), then
follows from the last seq it holds with the streamed pieces of the reply or
cell in progress. ``[`` reads one page earlier (``before=`` the oldest seq
held). Records are drawn in batches: a burst of streamed pieces is one redraw.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from recursa.daemon.client import DaemonClient
from recursa.errors import RecursaError
from recursa.protocol.events import EventRecord
from recursa.protocol.wire import SendMode
from recursa.view.blocks import Block, Blocks, NameOf
from recursa.view.tui.live import closing
from recursa.view.tui.render import block_renderable

TAIL = 400
"""Stored events read when a session is opened."""
PAGE = 400
"""Stored events read per ``[`` (earlier)."""
RETRY = 3.0
"""Seconds between attempts to follow again after the daemon went away."""
FLUSH = 0.05
"""Seconds records wait to be drawn together."""


class BlockView(Static):
    """One block; a click folds or unfolds it."""

    def __init__(self, block: Block, pane: SessionPane) -> None:
        super().__init__(classes=f"block {block.kind}")
        self.block = block
        self.pane = pane
        self.expanded = False

    def redraw(self) -> None:
        expanded = self.expanded or self.pane.expanded
        self.update(block_renderable(self.block, expanded=expanded, seq_mark=self.pane.mark))

    def on_click(self) -> None:
        self.expanded = not self.expanded
        self.redraw()


class SessionPane(Vertical):
    """Events of the session :meth:`open` was given; posts :class:`SessionPane.Send`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "last_cell", "last cell"),
        Binding("f", "fold", "fold/unfold"),
        Binding("left_square_bracket", "earlier", "earlier"),
        Binding("ctrl+t", "mode", "steer/follow-up"),
    ]

    class Send(Message):
        def __init__(self, text: str, mode: SendMode) -> None:
            super().__init__()
            self.text = text
            self.mode = mode

    def __init__(self, client: DaemonClient, name_of: NameOf, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.client = client
        self.name_of = name_of
        self.session_id: str | None = None
        self.records: list[EventRecord] = []
        self.blocks = Blocks(self.name_of)
        self.views: list[BlockView] = []
        self.expanded = False
        self.mark = 0
        self.mode: SendMode = "follow_up"
        self.target = ""
        self._pending: list[EventRecord] = []
        self._flushing = False
        self._loaded = False

    def compose(self) -> ComposeResult:
        yield Static(id="session-head")
        yield VerticalScroll(id="log")
        yield Static(id="send-to")
        yield Input(placeholder="m: write here · enter: send", id="message")

    def on_mount(self) -> None:
        self._head("no session yet: pick one in the tree (1), enter")
        self._label_input()

    @property
    def log_view(self) -> VerticalScroll:
        return self.query_one("#log", VerticalScroll)

    @property
    def loaded(self) -> bool:
        """Whether the open session's stored tail has been read and shown."""
        return self._loaded

    def open(self, session_id: str, *, title: str, seq: int = 0) -> None:
        """Show ``session_id`` (from its tail, or back to ``seq``, which is marked)."""
        self._head(title)
        if session_id == self.session_id and seq and self._holds(seq):
            self.mark = seq
            self._redraw_all()
            self.call_after_refresh(self._scroll_to_mark)
            return
        self.session_id, self.mark = session_id, seq
        self.records, self.blocks, self._pending = [], Blocks(self.name_of), []
        self._loaded = False
        self.log_view.remove_children()
        self.views = []
        self._follow(session_id, seq)

    def _head(self, title: str) -> None:
        self.query_one("#session-head", Static).update(Text(title, style="bold"))

    def _holds(self, seq: int) -> bool:
        return bool(self.records) and self.records[0].seq <= seq

    @work(exclusive=True, group="session-follow")
    async def _follow(self, session_id: str, seq: int) -> None:
        """Read the tail (back to ``seq``), then follow; when the daemon goes
        away, say so once and resume from the last seq held every :data:`RETRY`
        seconds (the pieces streamed meanwhile are lost: they are never stored)."""
        try:
            held = await self._read(session_id, None, TAIL)
            while seq and held and held[0].seq > seq:
                earlier = await self._read(session_id, held[0].seq, PAGE)
                if not earlier:
                    break
                held = earlier + held
        except RecursaError as exc:
            self.app.notify(f"events of {self.name_of(session_id)}: {exc}", severity="error")
            return
        self._take(held)
        self._loaded = True
        after = held[-1].seq if held else 0
        in_progress, told = True, False
        while True:
            stream = self.client.events(
                session_id, after=after, follow=True, in_progress=in_progress
            )
            try:
                async with closing(stream) as records:
                    async for record in records:
                        after, told = max(after, record.seq), False
                        self._take([record])
            except RecursaError as exc:
                if not told:  # once per outage: the status bar keeps saying it
                    self.app.notify(
                        f"events of {self.name_of(session_id)}: {exc}", severity="error"
                    )
                told = True
            in_progress = False
            await asyncio.sleep(RETRY)

    async def _read(self, session_id: str, before: int | None, limit: int) -> list[EventRecord]:
        stream = self.client.events(session_id, before=before, limit=limit)
        async with closing(stream) as records:
            return [record async for record in records]

    def _take(self, records: list[EventRecord]) -> None:
        self._pending.extend(records)
        if not self._flushing:
            self._flushing = True
            self.set_timer(FLUSH, self._flush)

    def _flush(self) -> None:
        self._flushing = False
        pending, self._pending = self._pending, []
        stored = [r for r in pending if r.seq]
        self.records.extend(stored)
        log = self.log_view
        at_end = log.scroll_y >= log.max_scroll_y - 1
        changed = self.blocks.extend(pending)
        items = self.blocks.items
        while len(self.views) > len(items):
            self.views.pop().remove()
        fresh: list[BlockView] = []
        for index in sorted(changed):
            if index < len(self.views):
                self.views[index].block = items[index]
                self.views[index].redraw()
        for block in items[len(self.views) :]:
            view = BlockView(block, self)
            self.views.append(view)
            fresh.append(view)
        if fresh:
            log.mount_all(fresh)
            for view in fresh:
                view.redraw()
        if self.mark and self._loaded and any(self.mark in v.block.seqs for v in fresh):
            self.call_after_refresh(self._scroll_to_mark)
        elif at_end:
            self.call_after_refresh(log.scroll_end, animate=False)

    def _redraw_all(self) -> None:
        for view in self.views:
            view.redraw()

    def _scroll_to_mark(self) -> None:
        for view in self.views:
            if self.mark in view.block.seqs:
                # Centred: what led to the marked event is above it.
                self.log_view.scroll_to_widget(view, animate=False, center=True)
                return

    @work(exclusive=True, group="session-earlier")
    async def action_earlier(self) -> None:
        """Read one page before the oldest event held and redraw with it."""
        session_id = self.session_id
        if session_id is None or not self.records:
            return
        try:
            earlier = await self._read(session_id, self.records[0].seq, PAGE)
        except RecursaError as exc:
            self.app.notify(str(exc), severity="error")
            return
        if self.session_id != session_id:
            return  # another session was opened while the page was read
        if not earlier:
            self.app.notify("this is the start of the session")
            return
        self.records = earlier + self.records
        held = self.blocks.items
        self.blocks = Blocks(self.name_of)
        self.blocks.extend(self.records)
        items = self.blocks.items
        new = len(items) - len(held)
        if self.views and new >= 0 and items[new:] == held:
            # The page split no block: mount only its blocks, above the ones shown.
            for view, block in zip(self.views, items[new:], strict=True):
                view.block = block
            fresh = [BlockView(block, self) for block in items[:new]]
            if fresh:
                await self.log_view.mount_all(fresh, before=0)
            for view in fresh:
                view.redraw()
            self.views = fresh + self.views
        else:
            self.log_view.remove_children()
            self.views = [BlockView(block, self) for block in items]
            await self.log_view.mount_all(self.views)
            self._redraw_all()
        self.log_view.scroll_home(animate=False)

    def action_last_cell(self) -> None:
        """Scroll to the newest cell (its code at the top)."""
        for view in reversed(self.views):
            if view.block.kind == "cell":
                self.log_view.scroll_to_widget(view, animate=False, top=True)
                return

    def action_fold(self) -> None:
        self.expanded = not self.expanded
        self._redraw_all()

    def action_mode(self) -> None:
        self.mode = "steer" if self.mode == "follow_up" else "follow_up"
        self._label_input()

    def set_target(self, target: str) -> None:
        """Name where the message box sends (the attached or the shown session)."""
        self.target = target
        self._label_input()

    def _label_input(self) -> None:
        mode = "steer" if self.mode == "steer" else "follow-up"
        other = "follow-up" if self.mode == "steer" else "steer"
        line = Text(f"message → {self.target or '-'} as a {mode}", style="bold")
        line.append(f" (ctrl+t: as a {other})", style="dim")
        self.query_one("#send-to", Static).update(line)

    def key_escape(self) -> None:
        """Leave the message box (the app's keys work again)."""
        if self.query_one("#message", Input).has_focus:
            self.log_view.focus()

    @on(Input.Submitted, "#message")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text:
            self.post_message(self.Send(text, self.mode))
            event.input.value = ""


__all__ = ["PAGE", "TAIL", "BlockView", "SessionPane"]

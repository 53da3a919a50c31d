"""The Agents View app: tabs for the tree, a session, the harness and usage.

Data flow: :class:`~recursa.view.tui.live.Live` follows the daemon's global
feed and marks sessions dirty; soon after a record arrives (:data:`COALESCE`,
so a burst is one call), and on a timer (:data:`REFRESH`) for what a failed
call left, the dirty ones are fetched in one call and the tree redraws only
their rows. The session pane
follows its own session's events; the harness pane rereads entries when a
harness notice arrives and it is shown. Every call that fails (a daemon that
died, a refused action) becomes one line (a notification and the status bar),
never a traceback.

Actions act on the *current* session: the one the session pane shows while it
is the active tab, else the one under the tree's cursor. The message box
writes to the attached session when one is attached (``a``), else to the
current one.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from recursa.daemon.client import DaemonClient
from recursa.errors import RecursaError
from recursa.protocol.person_ops import INTERRUPT, SEND, STOP, UNLOAD, SendTo, SessionRef
from recursa.protocol.wire import SessionInfo
from recursa.view.tree import find_row
from recursa.view.tui.control import ControlScreen
from recursa.view.tui.harness_pane import HarnessPane
from recursa.view.tui.live import Live
from recursa.view.tui.palette import SessionCommands
from recursa.view.tui.session_pane import SessionPane
from recursa.view.tui.tree_pane import STATUS_CYCLE, TreePane
from recursa.view.tui.usage_pane import UsagePane

REFRESH = 0.25
"""Seconds between fetches of sessions left dirty (a failed fetch is retried so)."""
COALESCE = 0.05
"""Seconds from a feed record to the fetch of its session: the records of a burst
share one fetch, and an update reaches the tree within about this much."""
RETRY = 3.0
"""Seconds between attempts to reach a daemon that went away."""
PROBE = 2.0
"""Seconds between checks that the daemon still answers (a dead one is said at once,
not after the event stream's reconnection window)."""
FOCUS = {"tree": "#sessions", "session": "#log", "harness": "#entries", "usage": "#usage-tree"}
"""What takes the focus on each tab (a focused widget in a hidden tab would pull it back)."""
SESSION_ACTIONS = frozenset({"message", "interrupt", "stop", "unload", "attach", "control"})

CSS = """
TabbedContent, TabPane { height: 1fr; padding: 0; }
TreePane, SessionPane, HarnessPane, UsagePane { height: 1fr; }
#sessions { height: 1fr; }
#filter, #message { height: 1; border: none; padding: 0 1; background: $boost; }
#session-head, #tree-head, #harness-head { height: auto; max-height: 2; }
#log { height: 1fr; }
.block { margin: 0 0 1 0; }
.block.meta { margin: 0; }
#entries { height: auto; max-height: 7; }
#entry-detail { height: 1fr; }
#history { height: auto; max-height: 7; }
#triggers { height: auto; max-height: 6; }
#diff { height: auto; }
#usage-tree { height: 1fr; }
#usage-models { height: auto; max-height: 6; }
#status { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
ControlScreen { align: center middle; }
#control { width: 76; height: 20; border: round $accent; background: $surface; }
#goal { height: auto; }
#jobs { height: 1fr; }
"""


class ViewApp(App[None]):
    """``recursa view``: a client of the daemon (``client``), opening ``start``
    (a session id, id prefix or name) when given."""

    TITLE = "recursa view"
    CSS = CSS
    AUTO_FOCUS = "#sessions"
    """The tree's table, not the first focusable widget (the filter box): keys typed
    before the first tab switch settles are commands, not a filter."""
    COMMANDS = App.COMMANDS | {SessionCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "show('tree')", "tree", show=False),
        Binding("2", "show('session')", "session", show=False),
        Binding("3", "show('harness')", "harness", show=False),
        Binding("4", "show('usage')", "usage", show=False),
        Binding("m", "message", "message"),
        Binding("i", "interrupt", "interrupt"),
        Binding("x", "stop", "stop"),
        Binding("u", "unload", "unload"),
        Binding("a", "attach", "attach"),
        Binding("o", "control", "goal/sched"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, client: DaemonClient, start: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.live = Live(client)
        self.start = start
        self.attached: str | None = None
        self._refreshing = False
        self._nudged = False
        self._harness_stale = True
        self.daemon_lost = False
        """The last probe found no daemon (the status line says so)."""

    def compose(self) -> ComposeResult:
        with TabbedContent(initial="tree", id="tabs"):
            with TabPane("1 tree", id="tree"):
                yield TreePane(id="tree-pane")
            with TabPane("2 session", id="session"):
                yield SessionPane(self.client, self.live.name_of, id="session-pane")
            with TabPane("3 harness", id="harness"):
                yield HarnessPane(self.client, self.live.name_of, id="harness-pane")
            with TabPane("4 usage", id="usage"):
                yield UsagePane(self.client, id="usage-pane")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self._follow_feed()
        self.set_interval(REFRESH, self._refresh)
        self.set_interval(1.0, self.tree_pane.tick)
        self.set_interval(PROBE, self._probe)

    # -- parts --------------------------------------------------------------------------------

    @property
    def tree_pane(self) -> TreePane:
        return self.query_one(TreePane)

    @property
    def pane(self) -> SessionPane:
        return self.query_one(SessionPane)

    @property
    def tabs(self) -> TabbedContent:
        return self.query_one("#tabs", TabbedContent)

    def status(self, line: str) -> None:
        """Show ``line`` in the status bar; nothing once the app is closing (a
        call that was out when it closed ends here with its widgets gone)."""
        try:
            bar = self.query_one("#status", Static)
        except NoMatches:
            return
        # As text: the line may quote a daemon's error or a model's words.
        bar.update(Text(line))

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification is plain text, whoever asks (widgets pass
        ``markup=True``): they quote errors, titles and names that a model chose."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def current(self) -> str | None:
        """The session actions act on (see the module docstring)."""
        if self.tabs.active == "session" and self.pane.session_id:
            return self.pane.session_id
        return self.tree_pane.highlighted or self.pane.session_id

    # -- keeping live -------------------------------------------------------------------------

    @work(exclusive=True, group="feed")
    async def _follow_feed(self) -> None:
        """Load the sessions, then follow the feed; when the daemon goes away, say
        so in one line and try again every :data:`RETRY` seconds."""
        first = True
        while True:
            try:
                await self.live.load()
                self._redraw_tree()
                self.status(self._summary())
                if first and self.start:
                    self._open_start()
                first = False
                async for _ in self.live.follow():
                    self._nudge()
            except RecursaError as exc:
                self.status(f"daemon: {exc} (retrying)")
            await asyncio.sleep(RETRY)

    async def _probe(self) -> None:
        try:
            alive = await self.client.probe()
        except RecursaError as exc:
            self.status(f"daemon: {exc}")
            self.daemon_lost = True
            return
        if alive is None:
            self.status("daemon: not running (it stopped or died); retrying")
            self.daemon_lost = True
        elif self.daemon_lost:
            self.daemon_lost = False
            self.status(self._summary())

    def _open_start(self) -> None:
        row = find_row(self.live.rows, self.start or "")
        if row is None:
            self.notify(f"no single session is named {self.start!r}", severity="warning")
            return
        self.open_session(row.id)

    def _nudge(self) -> None:
        """Fetch the dirty sessions :data:`COALESCE` seconds from now (once)."""
        if not self._nudged:
            self._nudged = True
            self.set_timer(COALESCE, self._nudged_refresh)

    async def _nudged_refresh(self) -> None:
        self._nudged = False
        await self._refresh()
        if self.live.dirty and not self.daemon_lost:
            self._nudge()  # records that came during the fetch

    async def _refresh(self) -> None:
        if self._refreshing:
            return
        self._refreshing = True
        try:
            changed = await self.live.refresh()
        except RecursaError as exc:
            self.status(f"daemon: {exc}")
            return
        finally:
            self._refreshing = False
        try:
            if changed or self.live.shape_changed:
                self._redraw_tree(changed)
                self.status(self._summary())
        except NoMatches:
            return  # the app closed while the call was out: its widgets are gone
        if self.live.harness_changed:
            self.live.harness_changed = False
            self._harness_stale = True
        if self._harness_stale and self.tabs.active == "harness":
            self._harness_stale = False
            self.query_one(HarnessPane).reload()

    def _redraw_tree(self, changed: set[str] | None = None) -> None:
        shape, self.live.shape_changed = self.live.shape_changed, False
        self.tree_pane.show(self.live.rows, None if shape else changed)
        self._label_target()

    def _summary(self) -> str:
        infos = self.live.sessions.values()
        running = sum(info.status == "running" for info in infos)
        attached = f" · attached to {self.live.name_of(self.attached)}" if self.attached else ""
        return f"{len(self.live.sessions)} sessions, {running} running{attached}"

    # -- navigation ---------------------------------------------------------------------------

    def open_session(self, session_id: str, seq: int = 0) -> None:
        """Show ``session_id`` in the session pane (back to ``seq``, marked)."""
        info = self.live.sessions.get(session_id)
        self.tree_pane.select(session_id)
        self.pane.open(session_id, title=self._title_of(info, session_id), seq=seq)
        self.action_show("session")
        self._label_target()

    def _title_of(self, info: SessionInfo | None, session_id: str) -> str:
        if info is None:
            return f"session {session_id[:8]}"
        name = info.name or "(no name)"
        return f"{name} · {info.id} · {info.status} · {info.model} · depth {info.depth}"

    def _label_target(self) -> None:
        target = self.attached or self.pane.session_id
        self.pane.set_target(self.live.name_of(target) + (" (attached)" if self.attached else ""))

    @on(TreePane.Chosen)
    def _chosen(self, event: TreePane.Chosen) -> None:
        self.open_session(event.session_id)

    @on(HarnessPane.Jump)
    def _jump(self, event: HarnessPane.Jump) -> None:
        self.open_session(event.session_id, event.seq)

    @on(TabbedContent.TabActivated)
    def _tab(self, event: TabbedContent.TabActivated) -> None:
        tab = self.tabs.active
        focused = self.focused
        if focused is None or self.query_one(f"#{tab}") not in focused.ancestors:
            self.query_one(FOCUS[tab]).focus()
        if tab == "harness":
            self._harness_stale = False
            self.query_one(HarnessPane).reload()
        elif tab == "usage":
            session_id = self.tree_pane.highlighted or self.pane.session_id
            if session_id:
                self.query_one(UsagePane).show(session_id, self.live.sessions)

    def action_show(self, tab: str) -> None:
        """Switch to ``tab`` and focus what it holds, at once: keys already queued
        go to that tab, not to the widget that had the focus."""
        self.tabs.active = tab
        self.screen.set_focus(self.query_one(FOCUS[tab]))

    def action_follow_running(self) -> None:
        self.tree_pane.status_index = STATUS_CYCLE.index(frozenset({"running", "admitted"}))
        self.tree_pane.show(self.live.rows)
        self.action_show("tree")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The session's keys mean nothing on the harness and usage tabs (their
        # own keys, like ``a`` approve, take those letters there).
        return not (action in SESSION_ACTIONS and self.tabs.active in ("harness", "usage"))

    # -- actions ------------------------------------------------------------------------------

    def action_message(self) -> None:
        session_id = self.current()
        if session_id is None:
            self.notify("pick a session first", severity="warning")
            return
        if self.pane.session_id != session_id:
            self.open_session(session_id)
        self.tabs.active = "session"
        self.query_one("#message", Input).focus()

    @on(SessionPane.Send)
    async def _send(self, event: SessionPane.Send) -> None:
        target = self.attached or self.pane.session_id
        if target is None:
            return
        try:
            receipt = await self.client.call(SEND, SendTo(target, event.text, event.mode))
        except RecursaError as exc:
            self.notify(f"send: {exc}", severity="error")
            return
        mode = event.mode.replace("_", "-")
        self.notify(f"{mode} to {self.live.name_of(target)}: {receipt.status}")

    async def _on_session(self, what: str) -> None:
        session_id = self.current()
        if session_id is None:
            self.notify("pick a session first", severity="warning")
            return
        op = {"interrupt": INTERRUPT, "stop": STOP, "unload": UNLOAD}[what]
        try:
            info = await self.client.call(op, SessionRef(session_id))
        except RecursaError as exc:
            self.notify(f"{what}: {exc}", severity="error")
            self.status(f"{what}: {exc}")
            return
        self.live.update(info)
        self._redraw_tree({info.id})
        self.notify(f"{what}: {info.name or info.id[:8]} is {info.status}")

    async def action_interrupt(self) -> None:
        await self._on_session("interrupt")

    async def action_stop(self) -> None:
        await self._on_session("stop")

    async def action_unload(self) -> None:
        await self._on_session("unload")

    def action_attach(self) -> None:
        if self.attached is not None:
            self.notify(f"detached from {self.live.name_of(self.attached)}")
            self.attached = None
        else:
            self.attached = self.current()
            if self.attached is None:
                return
            self.notify(f"attached to {self.live.name_of(self.attached)}: messages go there")
        self._label_target()
        self.status(self._summary())

    def action_control(self) -> None:
        session_id = self.current()
        if session_id is not None:
            screen = ControlScreen(self.client, session_id, self.live.name_of(session_id))
            self.push_screen(screen)


__all__ = ["ViewApp"]

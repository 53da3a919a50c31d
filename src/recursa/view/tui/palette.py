"""The command palette (ctrl+p): jump to a session, and every action by name."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from recursa.view.tui.app import ViewApp

ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("tree", "show('tree')", "the session tree"),
    ("session pane", "show('session')", "the selected session's events"),
    ("harness", "show('harness')", "entries, versions, diffs, approve/reject/revert"),
    ("usage", "show('usage')", "the selected session's subtree usage"),
    ("message", "message", "write to the selected (or attached) session"),
    ("interrupt", "interrupt", "stop the selected session's running turn"),
    ("stop", "stop", "interrupt and unload the selected session"),
    ("unload", "unload", "unload the selected idle session"),
    ("attach / detach", "attach", "the message box keeps going to this session"),
    ("goal and schedules", "control", "set, pause, resume, clear; cancel schedules"),
    ("follow running", "follow_running", "show only running sessions in the tree"),
)


class SessionCommands(Provider):
    """Sessions by name or id (open one's pane), and the app's actions."""

    @property
    def view(self) -> ViewApp:
        return cast("ViewApp", self.app)

    def _sessions(self) -> list[tuple[str, str]]:
        return [
            (f"session {row.label} · {row.id} · {row.info.status}", row.id)
            for row in self.view.live.rows
        ]

    async def discover(self) -> Hits:
        for name, action, help_text in ACTIONS:
            yield DiscoveryHit(name, partial(self.view.run_action, action), help=help_text)
        for text, session_id in self._sessions()[:20]:
            yield DiscoveryHit(text, partial(self.view.open_session, session_id), help="open")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, session_id in self._sessions():
            score = matcher.match(text)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(text),
                    partial(self.view.open_session, session_id),
                    help="open its session pane",
                )
        for name, action, help_text in ACTIONS:
            score = matcher.match(name)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(name),
                    partial(self.view.run_action, action),
                    help=help_text,
                )


__all__ = ["ACTIONS", "SessionCommands"]

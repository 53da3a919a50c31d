"""The usage pane: a session's subtree, its tokens and cost, per model, and the
share each child has of its parent's subtree."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from recursa.daemon.client import DaemonClient
from recursa.errors import RecursaError
from recursa.protocol.person_ops import USAGE, SessionRef
from recursa.protocol.wire import SessionInfo, Usage, UsageNode
from recursa.view.tree import add_usage, tokens
from recursa.view.tui.render import count, money, money_short

TREE_COLUMNS = (
    ("session", 20), ("own tok", 7), ("tree tok", 8), ("own $", 8), ("tree $", 8),
    ("calls", 5), ("share", 5),
)  # fmt: skip
MODEL_COLUMNS = (("model", 22), ("calls", 5), ("in", 7), ("out", 7), ("cached", 7), ("cost", 9))


def walk(node: UsageNode, depth: int = 0) -> Iterator[tuple[UsageNode, int, UsageNode | None]]:
    """Every node of the tree with its depth and parent, parents first."""
    stack: list[tuple[UsageNode, int, UsageNode | None]] = [(node, depth, None)]
    while stack:
        here, level, parent = stack.pop()
        yield here, level, parent
        stack.extend((child, level + 1, here) for child in reversed(here.children))


def share(part: Usage, whole: Usage) -> str:
    """``part``'s share of ``whole`` by tokens, as a percentage."""
    total = tokens(whole)
    return f"{100 * tokens(part) / total:.0f}%" if total else "-"


def per_model(node: UsageNode, models: Mapping[str, str]) -> dict[str, Usage]:
    """Own usage summed by each session's model (``models``: session id → model)."""
    by_model: dict[str, Usage] = {}
    for here, _, _ in walk(node):
        model = models.get(here.id, "?")
        by_model[model] = add_usage(by_model.get(model, Usage()), here.own)
    return by_model


class UsagePane(Vertical):
    def __init__(self, client: DaemonClient, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.client = client

    def compose(self) -> ComposeResult:
        yield Static(id="usage-head")
        yield DataTable(id="usage-tree", cursor_type="row")
        yield DataTable(id="usage-models", cursor_type="row")

    def on_mount(self) -> None:
        self.border_title = "usage"
        tree = self.query_one("#usage-tree", DataTable)
        for label, width in TREE_COLUMNS:
            tree.add_column(label, width=width)
        models = self.query_one("#usage-models", DataTable)
        for label, width in MODEL_COLUMNS:
            models.add_column(label, width=width)

    @work(exclusive=True, group="usage")
    async def show(self, session_id: str, sessions: Mapping[str, SessionInfo]) -> None:
        """Read ``session_id``'s usage tree and draw it."""
        try:
            root = await self.client.call(USAGE, SessionRef(session_id))
        except RecursaError as exc:
            self.app.notify(f"usage: {exc}", severity="error")
            return
        name = root.name or root.id[:8]
        self.border_title = f"usage of {name}'s subtree"
        head = Text(f"{name}: {count(tokens(root.total))} tokens, {money(root.total)}")
        head.append(f" in {root.total.calls} calls (share: of the parent's subtree)", style="dim")
        self.query_one("#usage-head", Static).update(head)
        tree = self.query_one("#usage-tree", DataTable)
        tree.clear()
        for node, depth, parent in walk(root):
            label = Text("  " * depth + ("└ " if depth else "") + (node.name or node.id[:8]))
            tree.add_row(
                label,
                count(tokens(node.own)),
                count(tokens(node.total)),
                money_short(node.own),
                money_short(node.total),
                str(node.total.calls),
                share(node.total, parent.total) if parent else "100%",
            )
        models = self.query_one("#usage-models", DataTable)
        models.clear()
        known = {sid: info.model for sid, info in sessions.items()}
        for model, usage in sorted(per_model(root, known).items()):
            models.add_row(
                Text(model),
                str(usage.calls),
                count(usage.input_tokens),
                count(usage.output_tokens),
                count(usage.cached_tokens),
                money(usage),
            )


__all__ = ["UsagePane", "per_model", "share", "walk"]

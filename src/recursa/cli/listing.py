"""``recursa agents``'s listing: the session tree as rows of a table.

Apart from :mod:`recursa.cli.sessions` (the command), because the quick path
(:mod:`recursa.cli.quick`) prints the same rows from the daemon's JSON without
building the wire types: rows are made from anything with a session's fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from recursa.cli.spend import cost_text
from recursa.cli.tables import Col

if TYPE_CHECKING:
    from recursa.protocol.wire import SessionInfo

NO_SESSIONS = "no sessions yet: recursa run TASK"
AGENT_COLUMNS = (
    Col("SESSION"),
    Col("NAME", flex=True),
    Col("STATUS"),
    Col("MODEL", flex=True),
    Col("TOKENS IN/OUT", right=True),
    Col("COST"),
    Col("ACTIVE"),
)


def agent_rows(infos: Sequence[SessionInfo], now: float) -> Iterator[tuple[str, ...]]:
    """One row per session, each root followed by its sub-agents, indented."""
    for depth, info in _tree(infos):
        yield (
            branch(depth) + info.id,
            info.name or "",
            info.status,
            info.model,
            f"{info.usage.input_tokens:,}/{info.usage.output_tokens:,}",
            cost_text(info.usage),
            _ago(now - info.last_activity),
        )


def branch(depth: int) -> str:
    """The tree's indent before a session's id: a child sits under its parent."""
    return "  " * (depth - 1) + "└ " if depth else ""


def _tree(infos: Sequence[SessionInfo]) -> list[tuple[int, SessionInfo]]:
    """Roots oldest first, each followed by its descendants, with their depth."""
    children: dict[str | None, list[SessionInfo]] = {}
    known = {i.id for i in infos}
    for info in sorted(infos, key=lambda i: i.created_at):
        parent = info.parent_id if info.parent_id in known else None
        children.setdefault(parent, []).append(info)
    out: list[tuple[int, SessionInfo]] = []

    def walk(parent: str | None, depth: int) -> None:
        for info in children.get(parent, []):
            out.append((depth, info))
            walk(info.id, depth + 1)

    walk(None, 0)
    return out


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{max(0, int(seconds))}s ago"


__all__ = ["AGENT_COLUMNS", "NO_SESSIONS", "agent_rows", "branch"]

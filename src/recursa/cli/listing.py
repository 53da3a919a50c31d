"""The listings of ``recursa agents`` (the session tree) and ``recursa usage``
(a session's usage tree), as tables and JSON.

Apart from :mod:`recursa.cli.sessions` (the commands), because the quick path
(:mod:`recursa.cli.quick`) prints the same from the daemon's JSON without
building the wire types: rows are made from anything with the fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from recursa.cli.spend import cost_text, usage_dict
from recursa.cli.tables import Col, Row, print_table

if TYPE_CHECKING:
    from recursa.protocol.wire import SessionInfo, Usage, UsageNode

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


USAGE_COLUMNS = (
    Col("SESSION"),
    Col("NAME", flex=True),
    Col("CALLS", right=True),
    Col("IN", right=True),
    Col("CACHED", right=True),
    Col("OUT", right=True),
    Col("COST"),
)


def print_usage(node: UsageNode, json_out: bool) -> None:
    """A session's usage tree: a table, or one JSON object with ``json_out``."""
    if json_out:
        print(json.dumps({"session": usage_json(node)}, ensure_ascii=False))
    else:
        print_table(USAGE_COLUMNS, usage_rows(node, 0))


def _usage_cells(totals: Usage) -> tuple[str, ...]:
    return (
        str(totals.calls),
        f"{totals.input_tokens:,}",
        f"{totals.cached_tokens:,}",
        f"{totals.output_tokens:,}",
        cost_text(totals),
    )


def usage_rows(node: UsageNode, depth: int) -> list[Row]:
    """The node's own usage, its descendants', then (when it has sub-agents) a
    subtotal row: the node and its whole subtree."""
    rows = [Row((branch(depth) + node.id, node.name or "", *_usage_cells(node.own)))]
    for child in node.children:
        rows.extend(usage_rows(child, depth + 1))
    if node.children:
        label = "  " * depth + "= with sub-agents"
        rows.append(Row((label, "", *_usage_cells(node.total)), quiet=True))
    return rows


def usage_json(node: UsageNode) -> dict[str, object]:
    return {
        "id": node.id,
        "name": node.name,
        "own": usage_dict(node.own),
        "total": usage_dict(node.total),
        "children": [usage_json(child) for child in node.children],
    }


__all__ = [
    "AGENT_COLUMNS",
    "NO_SESSIONS",
    "USAGE_COLUMNS",
    "agent_rows",
    "branch",
    "print_usage",
    "usage_json",
    "usage_rows",
]

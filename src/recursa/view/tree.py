"""The session tree as rows: a flat, ordered list a table can show.

Pure: :func:`build_rows` takes the daemon's :class:`~recursa.protocol.wire.SessionInfo`
list (any order) and returns one :class:`TreeRow` per session, every parent
before its children and siblings oldest first, each with its depth and its
subtree's usage. A session whose parent is not in the list (deleted, or not
fetched) is shown as a root. :func:`filter_rows` keeps the rows that match a
status set and a name substring, and the ancestors of each match (so a match
is always seen under its parents); :func:`find_row` finds one session by id,
unique id prefix or name.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from recursa.protocol.wire import SessionInfo, Usage

ZERO = Usage()


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One session in tree order. ``depth`` is 0 for a shown root; ``subtree`` is
    the usage of the session and all its descendants in the list; ``matched`` is
    False for an ancestor kept only to show where a filtered match sits."""

    info: SessionInfo
    depth: int
    subtree: Usage
    children: int
    matched: bool = True

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def label(self) -> str:
        """The session's name, or its short id when it has none."""
        return self.info.name or short_id(self.info.id)


def short_id(session_id: str) -> str:
    """The last 6 characters of an id: ids begin with their creation time, so
    sessions made together share a prefix and differ at the end."""
    return session_id[-6:]


def add_usage(a: Usage, b: Usage) -> Usage:
    return Usage(
        calls=a.calls + b.calls,
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        cost=a.cost + b.cost,
        unknown_cost_calls=a.unknown_cost_calls + b.unknown_cost_calls,
    )


def tokens(usage: Usage) -> int:
    """Input plus output tokens: the figure a person compares."""
    return usage.input_tokens + usage.output_tokens


def build_rows(sessions: Iterable[SessionInfo]) -> list[TreeRow]:
    """Every session once, parents before children, siblings by creation time
    (then id, so the order is stable)."""
    by_id = {info.id: info for info in sessions}
    kids: dict[str | None, list[SessionInfo]] = {}
    for info in by_id.values():
        parent = info.parent_id if info.parent_id in by_id else None
        kids.setdefault(parent, []).append(info)
    for group in kids.values():
        group.sort(key=lambda s: (s.created_at, s.id))
    subtree: dict[str, Usage] = {}

    def total(info: SessionInfo) -> Usage:
        # Iterative post-order: a deep chain of sub-agents must not hit the recursion limit.
        stack: list[tuple[SessionInfo, bool]] = [(info, False)]
        while stack:
            node, done = stack.pop()
            if node.id in subtree:
                continue
            children = kids.get(node.id, [])
            if done:
                acc = node.usage
                for child in children:
                    acc = add_usage(acc, subtree[child.id])
                subtree[node.id] = acc
            else:
                stack.append((node, True))
                stack.extend((child, False) for child in children)
        return subtree[info.id]

    rows: list[TreeRow] = []
    stack: list[tuple[SessionInfo, int]] = [(root, 0) for root in reversed(kids.get(None, []))]
    while stack:
        info, depth = stack.pop()
        children = kids.get(info.id, [])
        rows.append(TreeRow(info, depth, total(info), len(children)))
        stack.extend((child, depth + 1) for child in reversed(children))
    return rows


def filter_rows(
    rows: Sequence[TreeRow], statuses: Collection[str] | None = None, name: str = ""
) -> list[TreeRow]:
    """The rows whose status is in ``statuses`` (None or empty: any) and whose
    name or id contains ``name`` (case-insensitive; empty: any), in tree order,
    with each match's ancestors kept and marked ``matched=False``."""
    needle = name.strip().lower()
    if not statuses and not needle:
        return list(rows)
    parents = {row.id: row.info.parent_id for row in rows}
    keep: dict[str, bool] = {}
    for row in rows:
        if statuses and row.info.status not in statuses:
            continue
        if needle and needle not in (row.info.name or "").lower() and needle not in row.id:
            continue
        keep[row.id] = True
        parent = parents.get(row.id)
        while parent is not None and parent in parents and parent not in keep:
            keep[parent] = False
            parent = parents.get(parent)
    return [
        TreeRow(row.info, row.depth, row.subtree, row.children, keep[row.id])
        for row in rows
        if row.id in keep
    ]


def find_row(rows: Sequence[TreeRow], query: str) -> TreeRow | None:
    """The session ``query`` names, by the first rule that picks exactly one:
    its id; its name (case-insensitive); a unique id prefix; a unique name
    prefix; a unique name substring. None when nothing, or more than one, matches."""
    wanted = query.strip()
    if not wanted:
        return None
    low = wanted.lower()
    rules: tuple[Callable[[TreeRow], bool], ...] = (
        lambda r: r.id == wanted,
        lambda r: (r.info.name or "").lower() == low,
        lambda r: r.id.startswith(wanted),
        lambda r: (r.info.name or "").lower().startswith(low),
        lambda r: low in (r.info.name or "").lower(),
    )
    for rule in rules:
        found = [row for row in rows if rule(row)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            return None
    return None


__all__ = [
    "TreeRow",
    "add_usage",
    "build_rows",
    "filter_rows",
    "find_row",
    "short_id",
    "tokens",
]

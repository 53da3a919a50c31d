"""Two versions of a harness entry side by side: pure rows, then a Rich table."""

from __future__ import annotations

import difflib
from typing import Literal

from rich.table import Table
from rich.text import Text

from recursa.protocol.wire import HarnessEntry

Tag = Literal["same", "changed", "removed", "added"]
STYLE: dict[Tag, tuple[str, str]] = {
    "same": ("", ""),
    "changed": ("red", "green"),
    "removed": ("red", ""),
    "added": ("", "green"),
}


def entry_text(entry: HarnessEntry | None) -> str:
    """What a version says: its title, content and (for a skill) code; empty
    for None (before the entry existed)."""
    if entry is None:
        return ""
    parts = [f"# {entry.title} ({entry.kind}, {entry.scope}, {entry.status})", entry.content]
    if entry.code:
        parts += ["", entry.code]
    return "\n".join(parts)


def side_by_side(old: str, new: str) -> list[tuple[str, str, Tag]]:
    """Line pairs (left from ``old``, right from ``new``) and how they differ;
    an empty side is a line that is not there."""
    a, b = old.splitlines(), new.splitlines()
    rows: list[tuple[str, str, Tag]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            rows += [(x, x, "same") for x in a[i1:i2]]
            continue
        left, right = a[i1:i2], b[j1:j2]
        for k in range(max(len(left), len(right))):
            x = left[k] if k < len(left) else ""
            y = right[k] if k < len(right) else ""
            tag: Tag = (
                "changed"
                if k < len(left) and k < len(right)
                else ("removed" if k < len(left) else "added")
            )
            rows.append((x, y, tag))
    return rows


def diff_table(old: HarnessEntry | None, new: HarnessEntry) -> Table:
    """The two versions as a two-column table (text, never markup)."""
    left = f"v{old.version}" if old is not None else "nothing (v0)"
    table = Table(expand=True, show_lines=False, pad_edge=False, box=None)
    table.add_column(Text(left, style="bold red"), ratio=1, overflow="fold")
    table.add_column(Text(f"v{new.version}", style="bold green"), ratio=1, overflow="fold")
    for x, y, tag in side_by_side(entry_text(old), entry_text(new)):
        lstyle, rstyle = STYLE[tag]
        mark_l = "- " if tag in ("changed", "removed") else "  "
        mark_r = "+ " if tag in ("changed", "added") else "  "
        table.add_row(
            Text(mark_l + x if x or tag != "added" else "", style=lstyle),
            Text(mark_r + y if y or tag != "removed" else "", style=rstyle),
        )
    return table


__all__ = ["diff_table", "entry_text", "side_by_side"]

"""Tables for a person: every listing the CLI prints (sessions, usage, harness
entries and their log, scheduled jobs, models) goes through :func:`print_table`.

A table is rendered by rich on stdout at the terminal's width (``COLUMNS``
when set, 80 when there is no terminal), with one line per row: when a row is
wider than that, the columns marked ``flex`` (titles, prompts, reasons) shrink
first and end in "…"; identifiers never wrap. Colour only when
:func:`recursa.config.color_enabled` allows it on stdout. ``--json`` is for
programs; these tables are for eyes and may change.

rich is imported here, on first use, so that ``recursa --help`` and the
commands that print no table do not pay for it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recursa.cli.render import printable
from recursa.config import color_enabled

_SPACES = str.maketrans({"\n": " ", "\r": " ", "\t": " "})


@dataclass(frozen=True)
class Col:
    """One column: its header, whether it shrinks before the others when the
    table is too wide (``flex``), and whether its cells are numbers (``right``)."""

    header: str
    flex: bool = False
    right: bool = False


@dataclass(frozen=True)
class Row:
    """One row's cells (as text, one per column); a ``quiet`` row (a subtotal)
    is dimmed when colour is on."""

    cells: Sequence[str]
    quiet: bool = False


def cell_text(value: str) -> str:
    """A cell's text on one line, with no escape or control sequence (cells
    often hold model-written text)."""
    return printable(value).translate(_SPACES)


def print_table(columns: Sequence[Col], rows: Iterable[Row | Sequence[str]]) -> None:
    """Print a table with a header line to stdout, one line per row."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    color = color_enabled(sys.stdout)
    console = Console(
        file=sys.stdout,
        color_system="auto" if color else None,
        no_color=not color,
        markup=False,
        emoji=False,
        highlight=False,
    )
    lines = [line if isinstance(line, Row) else Row(line) for line in rows]
    cells = [[cell_text(c) for c in line.cells] for line in lines]
    natural = [
        max([cell_len(col.header), *(cell_len(row[i]) for row in cells)])
        for i, col in enumerate(columns)
    ]
    caps = flex_widths(columns, natural, console.width - GAP * (len(columns) - 1))
    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, GAP // 2),
        show_edge=False,
        header_style="bold" if color else "",
    )
    for col, cap in zip(columns, caps, strict=True):
        table.add_column(
            col.header,
            justify="right" if col.right else "left",
            no_wrap=True,
            overflow="ellipsis",
            max_width=cap,
        )
    for line, row in zip(lines, cells, strict=True):
        table.add_row(
            *(Text(c, no_wrap=True, overflow="ellipsis") for c in row),
            style="dim" if line.quiet and color else None,
        )
    with console.capture() as captured:
        console.print(table)
    # rich pads every line to the table's width; the trailing blanks are noise
    # in a pipe and in a narrower terminal.
    for text in captured.get().splitlines():
        sys.stdout.write(text.rstrip(" ") + "\n")


GAP = 2
"""Spaces between two columns."""


def flex_widths(columns: Sequence[Col], natural: Sequence[int], room: int) -> list[int | None]:
    """The widest each column may be when the cells take ``room`` characters:
    ``None`` (its natural width) for every column when they fit; else each flex
    column keeps its header's width and they share what the others leave, the
    one needing least getting it whole first."""
    fixed = sum(w for col, w in zip(columns, natural, strict=True) if not col.flex)
    flex = [i for i, col in enumerate(columns) if col.flex]
    if fixed + sum(natural[i] for i in flex) <= room:
        return [None] * len(columns)
    caps: list[int | None] = [None] * len(columns)
    floor = {i: min(natural[i], max(len(columns[i].header), 1)) for i in flex}
    left = max(0, room - fixed - sum(floor.values()))
    by_need = sorted(flex, key=lambda i: natural[i] - floor[i])
    for count, index in enumerate(by_need):
        extra = min(natural[index] - floor[index], left // (len(by_need) - count))
        caps[index] = floor[index] + extra
        left -= extra
    return caps


__all__ = ["Col", "Row", "cell_text", "flex_widths", "print_table"]

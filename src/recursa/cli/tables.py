"""Tables for a person: every listing the CLI prints (sessions, usage, harness
entries and their log, scheduled jobs, models) goes through :func:`print_table`.
A table is printed on stdout at the terminal's width (``COLUMNS`` when set,
else the size of the terminal on stdin, stdout or stderr, else 80), with one
line per row: when a row is wider than that, the columns marked ``flex``
(titles, prompts, reasons) shrink first and end in "…"; identifiers are never
cut (a table whose fixed columns alone are wider than the terminal runs past
its edge). Widths are terminal cells (a wide character takes two). Colour
(a bold header, dim quiet rows) only when :func:`recursa.environ.color_enabled`
allows it on stdout. ``--json`` is for programs; these tables are for eyes
and may change.

No rich here: a table is columns of plain text, and importing rich's console
would cost every listing command more than the rest of its work.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recursa.cli.terminal import printable
from recursa.environ import color_enabled

_SPACES = str.maketrans({"\n": " ", "\r": " ", "\t": " "})
_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"
DEFAULT_WIDTH = 80
ELLIPSIS = "…"


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


def cell_len(text: str) -> int:
    """How many terminal cells ``text`` takes: wide (East Asian) characters two,
    combining marks and format characters none, the rest one."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(char) for char in text)


def _char_cells(char: str) -> int:
    if unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def fit(text: str, cells: int) -> str:
    """``text`` cut to at most ``cells`` cells, ending in "…" when it was cut."""
    if cell_len(text) <= cells:
        return text
    room = max(0, cells - 1)
    kept, used = [], 0
    for char in text:
        width = _char_cells(char)
        if used + width > room:
            break
        kept.append(char)
        used += width
    return "".join(kept) + ELLIPSIS if cells else ""


def terminal_width() -> int:
    """``COLUMNS`` when it is a number, else the width of the terminal on
    stdin, stdout or stderr (a table piped to a pager is as wide as the
    terminal the person reads it on), else :data:`DEFAULT_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
        except (OSError, ValueError):
            continue
        if width > 0:
            return width
    return DEFAULT_WIDTH


def print_table(columns: Sequence[Col], rows: Iterable[Row | Sequence[str]]) -> None:
    """Print a table with a header line to stdout, one line per row."""
    color = color_enabled(sys.stdout)
    lines = [line if isinstance(line, Row) else Row(line) for line in rows]
    cells = [[cell_text(c) for c in line.cells] for line in lines]
    natural = [
        max([cell_len(col.header), *(cell_len(row[i]) for row in cells)])
        for i, col in enumerate(columns)
    ]
    caps = flex_widths(columns, natural, terminal_width() - GAP * (len(columns) - 1))
    widths = [w if cap is None else min(w, cap) for w, cap in zip(natural, caps, strict=True)]

    def line_of(texts: Sequence[str]) -> str:
        out = []
        for col, width, text in zip(columns, widths, texts, strict=True):
            shown = fit(text, width)
            pad = " " * (width - cell_len(shown))
            out.append(pad + shown if col.right else shown + pad)
        return (" " * GAP).join(out).rstrip(" ")

    header = line_of([col.header for col in columns])
    out = [f"{_BOLD}{header}{_RESET}" if color else header]
    for line, row in zip(lines, cells, strict=True):
        text = line_of(row)
        out.append(f"{_DIM}{text}{_RESET}" if line.quiet and color and text else text)
    sys.stdout.write("\n".join(out) + "\n")


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


def dump(value: object) -> None:
    """One JSON document on stdout."""
    print(json.dumps(value, ensure_ascii=False))


def print_listing(
    items: Sequence[object],
    json_out: bool,
    empty: str,
    columns: Sequence[Col],
    rows: Iterable[Row | Sequence[str]],
) -> None:
    """A listing: the items as a JSON list with ``json_out`` (wire values, or
    the daemon's JSON objects as they came), else ``empty`` on stderr when
    there are none, else the table of ``rows`` (read only then)."""
    if json_out:
        dump([item if isinstance(item, dict) else _to_json(item) for item in items])
    elif not items:
        print(empty, file=sys.stderr)
    else:
        print_table(columns, rows)


def _to_json(value: object) -> object:
    from recursa.protocol.wire import to_json

    return to_json(value)


__all__ = [
    "Col",
    "Row",
    "cell_len",
    "cell_text",
    "dump",
    "fit",
    "flex_widths",
    "print_listing",
    "print_table",
    "terminal_width",
]

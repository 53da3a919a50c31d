"""What the kernel hands back: a cell's outcome, a snapshot's and a restore's
reports. Pure values the session turns into events."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

ExecStatus = Literal["ok", "error", "timeout", "interrupted", "kernel_died"]
PartKind = Literal["stdout", "stderr", "result", "display", "error"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def clean_text(text: str) -> str:
    """Text safe to store and send to any provider: no ANSI codes, no lone
    surrogates (non-UTF-8 bytes decoded by the kernel arrive as those), no NULs."""
    text = strip_ansi(text)
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", "\\x00")


@dataclass(frozen=True, slots=True)
class OutputPart:
    kind: PartKind
    text: str


@dataclass(frozen=True, slots=True)
class CellOutput:
    """The outcome of one cell, in arrival order.

    ``status``: ``ok``; ``error`` (the code raised: the traceback is an
    ``error`` part); ``timeout`` (the cell outran its limit and was
    interrupted, or the kernel restarted when the interrupt failed);
    ``interrupted`` (stopped on request); ``kernel_died`` (the process died;
    the kernel was restarted and its namespace is gone). ``note`` says in one
    line what the harness did, for the model. ``restarted`` is true when the
    kernel process was replaced while this cell ran (it died, ignored an
    interrupt, or was restarted on request) or before it, since the previous
    cell's outcome was returned, other than by an explicit restart between
    cells (it died, or a cancelled cell needed a restart): the namespace is
    not the one earlier cells built, and ``note`` says why.
    """

    status: ExecStatus
    parts: tuple[OutputPart, ...] = ()
    execution_count: int | None = None
    duration: float = 0.0
    note: str = ""
    restarted: bool = False

    def text(self) -> str:
        """The full output as one text, in order, as a terminal would show it:
        adjacent stream pieces joined, and each line redrawn with a carriage
        return (a progress bar) reduced to its last drawing
        (:func:`collapse_redraws`)."""
        chunks: list[str] = []
        for part in self.parts:
            piece = clean_text(part.text)
            if (
                part.kind in ("result", "display", "error")
                and chunks
                and not chunks[-1].endswith("\n")
            ):
                chunks.append("\n")
            chunks.append(piece)
            if part.kind in ("result", "display", "error") and not piece.endswith("\n"):
                chunks.append("\n")
        # On the whole text: a redraw often arrives in another piece (or part)
        # than the line it redraws.
        text = collapse_redraws("".join(chunks))
        if self.note:
            if text and not text.endswith("\n"):
                text += "\n"
            text += f"[{self.note}]\n"
        return text


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    """What a snapshot of the namespace kept.

    ``names``: the variables written, in the namespace's order. ``skipped``:
    each variable left out, with why in one line (``"TextIOWrapper: cannot
    pickle an open file"``, or that it did not fit in the size cap); a
    restore hook that could not be kept appears as ``on_restore(NAME)``.
    ``size``: the file's size in bytes.
    """

    names: tuple[str, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)
    size: int = 0


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a restore put back.

    ``names``: the variables restored. ``failed``: each variable of the
    snapshot that could not be unpickled, with why in one line (a module
    no longer importable, or a value that refers to one that failed).
    ``hook_errors``: one line for each restore hook that raised (the others
    still ran). ``note``: one line when the snapshot was torn or damaged
    and the one before it (``<path>.prev``) was restored instead; else ``""``.
    """

    names: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    hook_errors: tuple[str, ...] = ()
    note: str = ""


def collapse_redraws(text: str) -> str:
    """Each line as a terminal would leave it after carriage returns: the text
    after its last ``\r`` (``\r\n`` is a plain line break, and a ``\r`` at
    the end of a line overwrites nothing). A progress bar that redraws itself
    thousands of times becomes its last state.

    A redraw shorter than what it covers is shown alone, not over the rest
    of the older text: progress bars redraw whole lines, and what matters is
    the last state, not the leftover characters a terminal would still show.
    """
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line:
            line = line.rstrip("\r")
            lines[i] = line[line.rfind("\r") + 1 :]
    return "\n".join(lines)


def bound_text(text: str, limit: int, *, ref: str | None = None) -> tuple[str, bool]:
    """Keep the head and tail of ``text`` within about ``limit`` characters.

    Returns ``(shown, truncated)``. The cut is marked with the total size and,
    when given, where the full text lives (``ref``, e.g. ``_out[3]``). Cuts
    fall on line breaks when one is near, so lines are rarely split.
    """
    if len(text) <= limit:
        return text, False
    head_budget = limit * 2 // 3
    tail_budget = limit - head_budget
    head = text[:head_budget]
    cut = head.rfind("\n")
    if cut > head_budget * 3 // 4:
        head = head[: cut + 1]
    tail = text[-tail_budget:]
    cut = tail.find("\n")
    if 0 <= cut < tail_budget // 4:
        tail = tail[cut + 1 :]
    omitted = len(text) - len(head) - len(tail)
    lines = text.count("\n") + 1
    where = f"; the full text is in {ref}" if ref else ""
    marker = (
        f"\n[... {omitted:,} characters omitted of {len(text):,} ({lines:,} lines){where} ...]\n"
    )
    return head + marker + tail, True


__all__ = [
    "CellOutput",
    "ExecStatus",
    "OutputPart",
    "PartKind",
    "RestoreReport",
    "SnapshotReport",
    "bound_text",
    "clean_text",
    "collapse_redraws",
    "strip_ansi",
]

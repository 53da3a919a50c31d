"""Blocks and figures as Rich renderables for the terminal.

Every text that came from a model, a kernel or a session name is put in a
:class:`rich.text.Text` (or a :class:`rich.syntax.Syntax`) as plain text, never
parsed as markup: ``[bold]`` in a cell's output shows as those characters.
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from recursa.protocol.wire import Usage
from recursa.view.blocks import Block, fold

STYLES = {
    "input": "bold cyan",
    "assistant": "bold green",
    "cell": "bold yellow",
    "compaction": "bold magenta",
    "gate": "bold blue",
    "harness": "bold magenta",
    "notice": "bold red",
    "turn_end": "bold white",
    "meta": "dim",
}


def count(n: int) -> str:
    """A token count in a few characters: 950, 12.3k, 4.5M."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def money(usage: Usage) -> str:
    """The cost in USD (four decimals under a cent); ``+?`` when some calls had no known price."""
    unknown = "+?" if usage.unknown_cost_calls else ""
    digits = 4 if usage.cost < 0.01 else 2
    return f"${usage.cost:.{digits}f}{unknown}"


def money_short(usage: Usage, *, mark: bool = True) -> str:
    """The cost in at most 6 characters: $.0042, $.042, $1.23, $123; ``?`` (with
    ``mark``) when some calls had no known price."""
    unknown = "?" if usage.unknown_cost_calls and mark else ""
    cost = usage.cost
    if cost < 0.01:
        text = f"${cost:.4f}"
    elif cost < 1:
        text = f"${cost:.3f}"
    else:
        text = f"${cost:.2f}" if cost < 100 else f"${cost:.0f}"
    return text.replace("$0.", "$.") + unknown


def ago(then: float | None, now: float | None = None) -> str:
    """How long since ``then`` (unix seconds), in the largest whole unit: 5s, 3m, 2h, 4d."""
    if not then:
        return "-"
    seconds = max(0.0, (time.time() if now is None else now) - then)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def block_renderable(block: Block, *, expanded: bool = False, seq_mark: int = 0) -> RenderableType:
    """One block: its title line (with its seq, for the harness pane's links),
    then its code (highlighted), body and output, each folded unless ``expanded``.
    ``seq_mark``: a seq this block shows is highlighted (a jump target)."""
    title = Text()
    marked = bool(seq_mark) and seq_mark in block.seqs
    if block.seq:
        title.append(f"#{block.seq} ", style="reverse" if marked else "dim")
    title.append(block.title, style=STYLES.get(block.kind, ""))
    if block.detail:
        title.append(f"  {block.detail}", style="dim")
    if block.open:
        title.append("  …", style="dim")
    parts: list[RenderableType] = [title]
    if block.code:
        code, hidden = _folded(block.code.rstrip("\n"), expanded)
        parts.append(Syntax(code, "python", theme="ansi_dark", word_wrap=True))
        if hidden:
            parts.append(_more(hidden))
    for text, style in ((block.body, ""), (block.output, "")):
        if not text.strip():
            continue
        shown, hidden = _folded(text.rstrip("\n"), expanded)
        parts.append(Text(shown, style=style))
        if hidden:
            parts.append(_more(hidden))
    return Group(*parts)


def _folded(text: str, expanded: bool) -> tuple[str, int]:
    return (text, 0) if expanded else fold(text)


def _more(hidden: int) -> Text:
    return Text(f"… {hidden} more lines (f: unfold)", style="dim italic")


__all__ = ["STYLES", "ago", "block_renderable", "count", "money", "money_short"]

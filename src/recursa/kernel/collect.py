"""Turning one request's iopub messages into :class:`OutputPart` values, in order.

The collector is the only place that decides what of a cell's output is kept:
it cleans every piece of text as it arrives (no ANSI codes, no lone
surrogates, no NULs), merges adjacent pieces of the same stream, and caps the
characters held in memory so a runaway ``print`` cannot exhaust the daemon.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from recursa.kernel.types import OutputPart, PartKind, bound_text, clean_text, strip_ansi
from recursa.kernel.wire import JSONDict, Message

DEFAULT_MAX_OUTPUT_CHARS = 20_000_000
"""Characters of one cell's output kept in memory; the rest is counted, not kept."""

ERROR_RESERVE_CHARS = 20_000
"""Room a traceback always gets, even past the cap: the error is what the model
needs most after a flood of output."""

log = logging.getLogger(__name__)

OnOutput = Callable[[OutputPart], None]


class OutputCollector:
    """Accumulates the output of one request.

    Invariants: parts come out in arrival order; two adjacent ``stdout`` (or
    ``stderr``) pieces are one part; the kept text of non-error parts never
    exceeds ``max_chars``; ``dropped`` counts every character not kept.
    ``on_output`` sees each kept piece as it arrives; an exception it raises
    is logged and does not disturb the cell. Setting it to ``None`` stops
    the calls (the kernel does when nobody waits for the cell any more).
    """

    def __init__(self, *, max_chars: int, on_output: OnOutput | None = None) -> None:
        self._max_chars = max_chars
        self.on_output = on_output
        self._parts: list[tuple[PartKind, list[str]]] = []
        self.kept = 0
        self.dropped = 0

    def add(self, message: Message) -> None:
        """Take one iopub message of this request; other types are ignored."""
        content = message.content
        match message.msg_type:
            case "stream":
                kind: PartKind = "stderr" if content.get("name") == "stderr" else "stdout"
                self._add(kind, str(content.get("text", "")))
            case "execute_result":
                self._add("result", _plain(content))
            case "display_data" | "update_display_data":
                self._add("display", _plain(content))
            case "error":
                self._add_error(_traceback(content))
            case _:
                # status, execute_input, clear_output, comm traffic: not output.
                pass

    def _add(self, kind: PartKind, text: str) -> None:
        room = max(self._max_chars - self.kept, 0)
        if len(text) > room:
            self.dropped += len(text) - room
            text = text[:room]
        if not text:
            return
        # Cleaning can lengthen text (a NUL becomes four characters): cut again.
        text = clean_text(text)[:room]
        self.kept += len(text)
        self._append(kind, text)

    def _add_error(self, text: str) -> None:
        text = clean_text(text)
        room = max(self._max_chars - self.kept, ERROR_RESERVE_CHARS)
        if len(text) > room:
            shown, _ = bound_text(text, room)
            self.dropped += max(len(text) - len(shown), 0)
            text = shown
        self.kept += len(text)
        self._append("error", text)

    def _append(self, kind: PartKind, text: str) -> None:
        if kind in ("stdout", "stderr") and self._parts and self._parts[-1][0] == kind:
            self._parts[-1][1].append(text)
        else:
            self._parts.append((kind, [text]))
        if self.on_output is not None:
            try:
                self.on_output(OutputPart(kind, text))
            except Exception:
                log.exception("an on_output callback failed; the cell continues")

    def parts(self) -> tuple[OutputPart, ...]:
        return tuple(OutputPart(kind, "".join(pieces)) for kind, pieces in self._parts)

    def note(self) -> str:
        """One line about what the cap dropped, or ``""``."""
        if not self.dropped:
            return ""
        return (
            f"output beyond {self._max_chars:,} characters was not kept: "
            f"{self.dropped:,} more characters were dropped"
        )


def _plain(content: JSONDict) -> str:
    data = content.get("data")
    if not isinstance(data, dict):
        return ""
    text = data.get("text/plain")
    if isinstance(text, str):
        return text
    # Rich output without a text form still tells the model something was shown.
    kinds = ", ".join(sorted(str(k) for k in data)) or "empty"
    return f"<display: {kinds}>"


def _traceback(content: JSONDict) -> str:
    frames = content.get("traceback")
    if isinstance(frames, list) and frames:
        return strip_ansi("\n".join(str(f) for f in frames))
    return f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"


__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "ERROR_RESERVE_CHARS", "OnOutput", "OutputCollector"]

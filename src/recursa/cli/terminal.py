"""Text from a model or its cells made harmless for a terminal.

A model's answer, a cell's output, a harness entry or a session's name is
text that code a model wrote may have chosen. Printed raw, it can drive the
terminal: an OSC 52 sequence writes the clipboard, CSI sequences clear the
screen or move the cursor, a bare carriage return overwrites what was
printed, C1 controls (``\\x9b``) start sequences of their own, and
bidirectional overrides reorder what a person reads.

:func:`printable` removes all of that and keeps the text: newlines and tabs
stay, every other character stays. A removed sequence is dropped whole (its
parameters too, so an OSC 52 payload does not appear as noise); a sequence
cut short loses only its introducer, and what follows prints as plain text,
which a terminal cannot act on without the escape character.

The CLI applies it to everything it prints for a person, on a terminal or
not (a captured answer pasted into a terminal later is just as live);
``--json`` output keeps the text unchanged, as data.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI sequences (colors, cursor moves, clears)
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC (titles, clipboard)
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c\n]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]?"  # other escapes (charset selection, resets)
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # every other C0 and C1 control, bare CR included
    r"|[\u202a-\u202e\u2066-\u2069]"  # bidirectional embeddings, overrides and isolates
)


def printable(text: str) -> str:
    """``text`` with every terminal control sequence and control character
    removed; tabs and newlines stay (a CRLF line end becomes a newline)."""
    return _CONTROL.sub("", text)


__all__ = ["printable"]

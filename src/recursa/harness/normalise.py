"""Text as the static screen reads it: normalised, with what hides inside it
brought out.

A proposal can hide words from a pattern in many cheap ways: full-width or
mathematical letters, zero-width characters between letters, Cyrillic or
Greek letters that look Latin, invisible Unicode tag characters that spell
ASCII, or base64, hex, percent-encoded or ROT13 text. :func:`prepare`
undoes each of them and returns every reading of the text the screen must
match (the text itself first), and what was hidden. Pure and fast: no I/O,
linear in the text.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

MAX_LAYERS = 40
"""At most this many decoded blobs are screened per text (the rest is ignored)."""
MIN_DECODED_CHARS = 6
"""A decoded blob shorter than this carries no phrase worth screening."""

_TAG_FIRST, _TAG_LAST = 0xE0000, 0xE007F
"""Unicode tag characters: invisible, and each one's low byte is an ASCII character."""

_INVISIBLE_RANGES = (
    (0x180B, 0x180F),
    (0x200B, 0x2010),
    (0x202A, 0x202F),
    (0x2060, 0x2070),
    (0xFE00, 0xFE10),
)
_INVISIBLE = frozenset(
    (0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0)
) | frozenset(code for first, last in _INVISIBLE_RANGES for code in range(first, last))
"""Characters that render as nothing (zero-width spaces and joiners, bidi
controls, word joiners, variation selectors, the byte-order mark)."""
_HARMLESS_INVISIBLE = frozenset({0x200C, 0x200D, 0xFE0F})
"""Removed, but not counted as hiding: the joiners and the emoji selector
that ordinary emoji and Persian or Indic text use."""

_HOMOGLYPHS = str.maketrans(
    {
        # Cyrillic letters that look Latin.
        "а": "a", "в": "b", "с": "c", "е": "e", "һ": "h", "і": "i", "ј": "j", "к": "k",
        "м": "m", "н": "h", "о": "o", "р": "p", "ԛ": "q", "ѕ": "s", "т": "t", "у": "y",
        "х": "x", "ԁ": "d", "ԝ": "w", "ү": "y", "ӏ": "l", "ɡ": "g",
        "А": "A", "В": "B", "С": "C", "Е": "E", "Н": "H", "І": "I", "Ј": "J", "К": "K",
        "М": "M", "О": "O", "Р": "P", "Ѕ": "S", "Т": "T", "Х": "X", "Ү": "Y",
        # Greek letters that look Latin.
        "α": "a", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "ι": "i", "κ": "k", "ν": "v",
        "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
        "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
        # Armenian.
        "օ": "o", "ս": "u", "հ": "h", "ո": "n",
    }
)  # fmt: skip
_LOOKALIKES = frozenset(chr(c) for c in _HOMOGLYPHS)
_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE")

_TAG = re.compile("[\U000e0000-\U000e007f]")
_WORD = re.compile(r"[^\W\d_]{2,}")
_BASE64 = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/]{16,}={0,2}|(?<![\w-])[A-Za-z0-9_-]{16,}={0,2}")
_HEX = re.compile(r"(?<![0-9A-Za-z])(?:[0-9A-Fa-f]{2}[ :]?){8,}")
_ESCAPED_HEX = re.compile(r"(?:\\x[0-9A-Fa-f]{2}){4,}")
_PERCENT = re.compile(r"(?:[\w.~-]{0,40}%[0-9A-Fa-f]{2}){3,}[\w.~-]{0,40}")
_ROT13 = re.compile(r"\brot[-_ ]?13\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A text as the screen reads it.

    ``layers``: (label, text) pairs to match, the normalised text first
    (label ``""``), then the text with homoglyphs folded to Latin, then each
    decoded blob (label: how it was encoded). ``hidden``: how many invisible
    characters were removed. ``mixed``: words that mix scripts."""

    layers: tuple[tuple[str, str], ...]
    hidden: int
    mixed: tuple[str, ...]


def prepare(text: str) -> Prepared:
    """Every reading of ``text`` the screen matches; see :class:`Prepared`."""
    tagged = "".join(chr(ord(ch) - _TAG_FIRST) for ch in _TAG.findall(text))
    plain, hidden = _visible(text)
    plain = unicodedata.normalize("NFKC", plain)
    layers: list[tuple[str, str]] = [("", plain)]
    mixed = tuple(mixed_script_words(plain))
    folded = plain.translate(_HOMOGLYPHS)
    if folded != plain:
        layers.append(("with homoglyphs read as Latin", folded))
    if tagged.strip():
        layers.append(("in invisible tag characters", tagged))
        hidden += len(tagged)
    _decode_into(layers, plain, depth=2)
    return Prepared(tuple(layers), hidden, mixed)


def _visible(text: str) -> tuple[str, int]:
    """``text`` without invisible characters, and how many of them hid something."""
    if text.isascii():
        return text, 0
    kept: list[str] = []
    hidden = 0
    for ch in text:
        code = ord(ch)
        if code in _INVISIBLE or _TAG_FIRST <= code <= _TAG_LAST:
            hidden += code not in _HARMLESS_INVISIBLE
            continue
        kept.append(ch)
    return "".join(kept), hidden


def mixed_script_words(text: str) -> list[str]:
    """The words in ``text`` that mix Latin with look-alike letters of another
    script (Cyrillic, Greek, Armenian, Cherokee), or mix two of those: the
    shape of a homoglyph attack. Words wholly in one script are fine."""
    if text.isascii():
        return []
    found: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group()
        if word.isascii():
            continue
        scripts = {_script(ch) for ch in word} - {None}
        if len(scripts) < 2:
            continue
        if "LATIN" in scripts and not any(ch in _LOOKALIKES for ch in word):
            continue  # e.g. a Greek mu in "μs": a unit, not a disguise
        found.append(word)
    return found


def _script(ch: str) -> str | None:
    if ch.isascii():
        return "LATIN" if ch.isalpha() else None
    name = unicodedata.name(ch, "")
    for script in _SCRIPTS:
        if name.startswith(script):
            return script
    return None


def _decode_into(layers: list[tuple[str, str]], text: str, *, depth: int) -> None:
    """Append the readable text hidden in ``text``'s encoded blobs to ``layers``
    (and, ``depth`` levels down, the blobs inside those)."""
    if depth == 0:
        return
    found: list[tuple[str, str]] = []
    for match in _BASE64.finditer(text):
        found.append(("in base64", _from_base64(match.group())))
    for match in _HEX.finditer(text):
        found.append(("in hex", _from_hex(re.sub(r"[ :]", "", match.group()))))
    if "\\x" in text:
        for match in _ESCAPED_HEX.finditer(text):
            found.append(("in hex escapes", _from_hex(match.group().replace("\\x", ""))))
    if "%" in text:
        for match in _PERCENT.finditer(text):
            found.append(("in percent-encoding", _readable(unquote_to_bytes(match.group()))))
    if _ROT13.search(text):
        found.append(("in ROT13", codecs.decode(text, "rot13")))
    for label, decoded in found:
        if len(layers) >= MAX_LAYERS:
            return
        if len(decoded) >= MIN_DECODED_CHARS:
            decoded = unicodedata.normalize("NFKC", _visible(decoded)[0])
            layers.append((label, decoded))
            _decode_into(layers, decoded, depth=depth - 1)


def _from_base64(blob: str) -> str:
    body = blob.rstrip("=")
    padded = body + "=" * (-len(body) % 4)
    try:
        if "-" in body or "_" in body:
            raw = base64.urlsafe_b64decode(padded)
        else:
            raw = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return ""
    return _readable(raw)


def _from_hex(digits: str) -> str:
    try:
        return _readable(bytes.fromhex(digits[: len(digits) // 2 * 2]))
    except ValueError:
        return ""


def _readable(raw: bytes) -> str:
    """``raw`` as text when it is UTF-8 and mostly printable; else ``""``
    (a hash or an image is not a hidden phrase)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    if not text:
        return ""
    printable = sum(ch.isprintable() or ch in "\n\t\r" for ch in text)
    return text if printable / len(text) >= 0.9 else ""


__all__ = ["MAX_LAYERS", "Prepared", "mixed_script_words", "prepare"]

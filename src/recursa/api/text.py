"""``search``: find passages of a long text by the words of a question.

A small model reading a long input with code trips on three things: an exact
phrase that does not match (``"magic number for x"`` against ``"magic
numbers for x"``), a ``find()`` position taken for the answer, and a printed
text whose middle is cut from the output. ``search(text, query)`` takes any
wording: it scores every sentence (or line) of ``text`` by how many of the
query's words it holds, a word matching its longer forms too, and prints the
best few with the text around them, so the answer is in what it prints.

It runs in the kernel alone (no daemon call, nothing accounted) and imports
only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STOP_TEXT = """a about above after again all also an and any are as at be been before being below
    between both but by can could did do does doing down during each few for from further had
    has have having he her here hers him his how i if in into is it its itself just me mentioned
    more most my no nor not now of off on once only or other our out over own provided same she
    should so some such than that the their them then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you
    your text document question answer find tell give please"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
"""Words that say nothing about where an answer is."""
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_PIECE = re.compile(r"[^\n.!?]*(?:[.!?]+|\n|$)")
HITS = 5
AROUND = 250
"""Characters shown before and after a passage."""


@dataclass(frozen=True, slots=True)
class Hit:
    """A passage of the searched text: ``start``/``end`` are its offsets."""

    start: int
    end: int
    words: int
    """How many of the query's words it holds."""


def query_words(query: str) -> list[str]:
    """The words of ``query`` worth looking for (lower case, each once, in order)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word not in STOP_WORDS and (len(word) > 1 or word.isdigit()):
            seen.setdefault(word, None)
    return list(seen)


def _stem(word: str) -> str:
    """What a query word must start a text word with: "numbers" finds "number" and back."""
    for ending in ("ies", "es", "s", "ed", "ing"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def hits(text: str, query: str, *, limit: int = HITS) -> list[Hit]:
    """The ``limit`` passages of ``text`` holding the most words of ``query``
    (ties: the earlier first), in the order of their score."""
    stems = [_stem(w) for w in query_words(query)]
    if not stems:
        return []
    pattern = re.compile(r"\b(" + "|".join(re.escape(s) for s in stems) + r")", re.I)
    found: list[Hit] = []
    for piece in _PIECE.finditer(text):
        if not piece.group().strip():
            continue
        matched = {m.group(1).lower() for m in pattern.finditer(piece.group())}
        if matched:
            found.append(Hit(piece.start(), piece.end(), len(matched)))
    found.sort(key=lambda h: (-h.words, h.start))
    return found[:limit]


def search(text: str, query: str, *, limit: int = HITS, around: int = AROUND) -> None:
    """Print the passages of ``text`` that best match the words of ``query``,
    each with ``around`` characters either side, best first.
    ``search(context, "special magic number for amber-apple")``."""
    if not isinstance(text, str):
        raise TypeError(f"search(text, query): text is a {type(text).__name__}, not a str")
    found = hits(text, query, limit=limit)
    if not found:
        words = ", ".join(query_words(query)) or "none"
        print(f"no passage holds any of the words ({words}); try other words")
        return
    wanted = len(query_words(query))
    for rank, hit in enumerate(found, 1):
        start, end = max(0, hit.start - around), min(len(text), hit.end + around)
        line = text.count("\n", 0, hit.start) + 1
        passage = " ".join(text[hit.start : hit.end].split())
        print(f"[{rank}] line {line}, {hit.words} of {wanted} words: {passage}")
        print(f"    around it: ...{' '.join(text[start:end].split())}...")


__all__ = ["Hit", "hits", "query_words", "search"]

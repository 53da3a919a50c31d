"""Each task's standard metric, as a score in [0, 1] for one answer.

- RULER's string match (its synthetic tasks): ``all`` is the share of the
  references found in the answer, ``part`` is 1 when any is; case-insensitive
  substring tests, as RULER's own scorer does.
- SQuAD and HotpotQA: exact match and token F1 after the standard answer
  normalisation (lower case, no punctuation, no articles ``a``/``an``/``the``,
  single spaces), the best over the gold answers.

An answer is cleaned first as RULER cleans it: stripped, control characters
turned into line breaks. A missing answer (None) scores 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Literal

Metric = Literal["string_match_all", "string_match_part", "exact_match", "f1"]

_CONTROL = re.compile(r"[\x00-\x1f]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def cleaned(answer: str | None) -> str:
    """The answer as RULER scores it: stripped, control characters as line breaks."""
    if answer is None:
        return ""
    return _CONTROL.sub("\n", answer.strip()).strip()


def string_match_all(answer: str | None, references: Sequence[str]) -> float:
    """The share of ``references`` that occur in the answer (case-insensitive)."""
    if not references:
        raise ValueError("a string match needs at least one reference")
    text = cleaned(answer).lower()
    return sum(1.0 for ref in references if ref.lower() in text) / len(references)


def string_match_part(answer: str | None, references: Sequence[str]) -> float:
    """1 when any of ``references`` occurs in the answer (case-insensitive), else 0."""
    if not references:
        raise ValueError("a string match needs at least one reference")
    text = cleaned(answer).lower()
    return 1.0 if any(ref.lower() in text for ref in references) else 0.0


def normalised(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str | None, golds: Sequence[str]) -> float:
    """1 when the normalised answer equals a normalised gold answer."""
    if not golds:
        raise ValueError("exact match needs at least one gold answer")
    mine = normalised(cleaned(answer))
    return 1.0 if any(mine == normalised(gold) for gold in golds) else 0.0


YES_NO = frozenset({"yes", "no", "noanswer"})
"""HotpotQA's closed answers: its F1 gives no partial credit on them."""


def f1(answer: str | None, golds: Sequence[str], *, yes_no: bool = False) -> float:
    """The best token F1 of the normalised answer against a normalised gold
    answer. ``yes_no`` (HotpotQA's official rule): when either side is yes,
    no or noanswer and they differ, the F1 is 0, not a share of the words."""
    if not golds:
        raise ValueError("F1 needs at least one gold answer")
    mine = normalised(cleaned(answer))
    best = 0.0
    for gold in golds:
        theirs = normalised(gold)
        if yes_no and mine != theirs and (mine in YES_NO or theirs in YES_NO):
            continue
        best = max(best, _f1(mine.split(), theirs.split()))
    return best


def _f1(mine: list[str], gold: list[str]) -> float:
    if not mine or not gold:
        return 1.0 if mine == gold else 0.0
    common = sum((Counter(mine) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(mine), common / len(gold)
    return 2 * precision * recall / (precision + recall)


METRICS = {
    "string_match_all": string_match_all,
    "string_match_part": string_match_part,
    "exact_match": exact_match,
    "f1": f1,
}


def score(metric: Metric, answer: str | None, references: Sequence[str]) -> float:
    return METRICS[metric](answer, references)


__all__ = [
    "METRICS",
    "Metric",
    "cleaned",
    "exact_match",
    "f1",
    "normalised",
    "score",
    "string_match_all",
    "string_match_part",
]

"""Run one of RULER's generator scripts offline, in this (fresh) process.

``python -m recursa.evals.suites._generate REQUEST.json`` where the file
holds a :class:`Request` as JSON: the generator script, its arguments (built
from RULER's task config by :mod:`recursa.evals.suites.ruler`), the
tokenizer's :attr:`~recursa.evals.tokens.Tokenizer.spec` and where to write
the samples, one JSON object a line.

The scripts are written for NVIDIA's environment, so three things are put in
their place before one runs:

- ``nltk.tokenize.sent_tokenize``, which would download punkt: our own
  sentence splitter (:func:`split_sentences`);
- ``select_tokenizer``, which would load a NeMo or Hugging Face tokenizer:
  the embedded model's, through llama.cpp;
- ``scipy.special.zeta`` (the frequent-words task only), when SciPy is not
  installed: the Riemann zeta function by Euler-Maclaurin summation.

A script formats its prompt template with the haystack as ``context``; the
template it is given is a ``str`` whose ``format`` also remembers where the
context went, so each sample is split into the context and the rest without
changing a byte of RULER's prompt. Each sample is written with
``context_start`` and ``context_end``, offsets into its ``input``.

A separate process per generation because the scripts keep their state in
module globals (parsed arguments, the tokenizer, seeded ``random``) and print
progress; it also keeps their imports out of the caller.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import re
import runpy
import sys
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recursa.evals.tokens import Tokenizer, tokenizer_from_spec

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z0-9])")
_ABBREVIATIONS = frozenset(
    (
        *("mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "inc"),
        *("ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept"),
        *("oct", "nov", "dec", "u.s", "a.m", "p.m", "no", "fig"),
    )
)


def split_sentences(text: str) -> list[str]:
    """Sentences of English prose: a break after ``.``, ``!`` or ``?`` (and
    any closing quote or bracket) followed by white space and a capital or a
    digit, except after a common abbreviation or a single initial."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[start : match.start()]
        last = head.rsplit(None, 1)[-1] if head.split() else ""
        word = last.rstrip(".!?\"')]").lower()
        if head.endswith(".") and (word in _ABBREVIATIONS or len(word) == 1):
            continue
        sentence = text[start : match.start()].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def zeta(s: float) -> float:
    """The Riemann zeta function for real ``s > 1`` (what RULER's ``fwe`` asks
    SciPy for): a direct sum to N plus the Euler-Maclaurin tail, exact to
    double precision for the exponents the task uses."""
    terms = 16
    n = float(terms)
    total: float = math.fsum(float(k) ** -s for k in range(1, terms))
    total += n ** (1 - s) / (s - 1) + 0.5 * n**-s
    # Bernoulli terms B2k / (2k)! * s(s+1)...(s+2k-2) * N^(-s-2k+1)
    bernoulli = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66)
    rising = s
    for k, b in enumerate(bernoulli, start=1):
        total += b / math.factorial(2 * k) * rising * n ** (-s - 2 * k + 1)
        rising *= (s + 2 * k - 1) * (s + 2 * k)
    return total


class RulerTokenizer:
    """The interface RULER's scripts call: ``text_to_tokens`` and ``tokens_to_text``."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    def text_to_tokens(self, text: str) -> list[int]:
        return self._tokenizer.encode(text)

    def tokens_to_text(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens)


FORMATTED: dict[int, dict[bytes, tuple[int, int]]] = {}
"""Each prompt a script formatted, by its length and digest: where its context
starts in it and how long the context is. Digests, not the prompts: a script
formats many candidates while it searches for the size that fits."""


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class Template(str):
    """RULER's template that records, for each prompt it formats, where the
    context is. ``replace`` keeps the type (the needle task rewrites its
    template for a single needle before formatting)."""

    def format(self, *args: Any, **kwargs: Any) -> str:
        text = str.format(self, *args, **kwargs)
        marker = self.find("{context}")
        if "context" in kwargs and marker >= 0:
            head = str.format(self[:marker], *args, **kwargs)
            span = (len(head), len(str(kwargs["context"])))
            FORMATTED.setdefault(len(text), {})[_digest(text)] = span
        return text

    def replace(self, old: str, new: str, count: int = -1) -> Template:  # type: ignore[override]
        return Template(str.replace(self, old, new, count))


def _context_span(sample: dict[str, Any]) -> tuple[int, int]:
    """Where the context of a written sample is: its prompt ends with one the
    script formatted (the few-shot example, if any, comes before it)."""
    text: str = sample["input"]
    for size, spans in FORMATTED.items():
        if size <= len(text):
            span = spans.get(_digest(text[len(text) - size :]))
            if span is not None:
                start = len(text) - size + span[0]
                return start, start + span[1]
    raise RuntimeError(f"sample {sample.get('index')}: its prompt was not formatted here")


def _install_shims(tokenizer: Tokenizer) -> None:
    nltk = types.ModuleType("nltk")
    nltk_tokenize = types.ModuleType("nltk.tokenize")
    nltk_tokenize.sent_tokenize = split_sentences  # type: ignore[attr-defined]
    nltk.tokenize = nltk_tokenize  # type: ignore[attr-defined]
    sys.modules["nltk"] = nltk
    sys.modules["nltk.tokenize"] = nltk_tokenize
    try:
        importlib.import_module("scipy.special")
    except ImportError:
        scipy = types.ModuleType("scipy")
        special = types.ModuleType("scipy.special")
        special.zeta = zeta  # type: ignore[attr-defined]
        scipy.special = special  # type: ignore[attr-defined]
        sys.modules["scipy"] = scipy
        sys.modules["scipy.special"] = special

    def select_tokenizer(kind: str, path: str) -> RulerTokenizer:
        return RulerTokenizer(tokenizer)

    ruler_tokenizer = importlib.import_module("long_context_eval.data.tokenizer")
    setattr(ruler_tokenizer, "select_tokenizer", select_tokenizer)  # noqa: B010 (untyped module)
    # The scripts other than niah import it by its bare name, from their parent directory.
    sys.modules["tokenizer"] = ruler_tokenizer


@dataclass(frozen=True, slots=True)
class Request:
    """One generation, as the parent asks for it."""

    script: str
    """The generator, e.g. ``.../long_context_eval/data/synthetic/niah.py``."""
    argv: tuple[str, ...]
    """Its arguments; they hold ``--save_dir`` and ``--save_name``."""
    save_dir: str
    save_name: str
    tokenizer: str
    """A :attr:`~recursa.evals.tokens.Tokenizer.spec`."""
    out: str
    """Where the samples go, with ``context_start`` and ``context_end`` added."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Request:
        raw = json.loads(text)
        return cls(**{**raw, "argv": tuple(raw["argv"])})


def run(request: Request) -> None:
    script = Path(request.script)
    _install_shims(tokenizer_from_spec(request.tokenizer))
    sys.path[:0] = [str(script.parent), str(script.parent.parent)]
    sys.argv = [script.name, *request.argv]
    _patch_argparse()
    runpy.run_path(str(script), run_name="__main__")
    save = Path(request.save_dir) / request.save_name / "validation.jsonl"
    out = Path(request.out)
    with save.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for line in src:
            sample = json.loads(line)
            start, end = _context_span(sample)
            sample["context_start"], sample["context_end"] = start, end
            dst.write(json.dumps(sample, ensure_ascii=False) + "\n")


def _patch_argparse() -> None:
    """Make the parsed ``--template`` a :class:`Template` (each script parses
    its own arguments at import, so this is the one place to reach it)."""
    original = argparse.ArgumentParser.parse_args

    def parse_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        parsed = original(self, *args, **kwargs)
        if isinstance(getattr(parsed, "template", None), str):
            parsed.template = Template(parsed.template)
        return parsed

    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]


def main() -> None:
    request = Request.from_json(Path(sys.argv[1]).read_text(encoding="utf-8"))
    # The scripts print progress and tqdm bars: keep stdout for nothing else.
    sys.stdout = sys.stderr
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run(request)


if __name__ == "__main__":
    main()

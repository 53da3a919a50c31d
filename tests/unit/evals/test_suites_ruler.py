"""RULER's generators, run offline through our shims: determinism, sizes, the
context split, the metrics, the cache, and no network."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from recursa.errors import UsageError
from recursa.evals.suites import _generate, ruler
from recursa.evals.suites.ruler import RulerSuite, deal, generate
from recursa.evals.tokens import ApproxTokenizer, Tokenizer, load_tokenizer
from recursa.evals.trials import Item


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


@pytest.fixture(scope="module")
def niah(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> list[Item]:
    cache = tmp_path_factory.mktemp("cache")
    return RulerSuite("ruler-niah", ("niah_single_2",), cache, tokenizer).items([2048], 2, 11)


def test_generation_is_deterministic_by_seed(tokenizer: Tokenizer) -> None:
    first = generate("vt", 1024, 2, 3, tokenizer)
    assert first == generate("vt", 1024, 2, 3, tokenizer)
    other = generate("vt", 1024, 2, 4, tokenizer)
    assert [i.prompt for i in other] != [i.prompt for i in first]
    assert [i.id for i in first] == ["vt/1024/0", "vt/1024/1"]


@pytest.mark.slow  # ~13 s: loads the real tokenizer and sizes every item
def test_items_are_sized_by_the_tokenizer_and_split_around_the_context(
    niah: list[Item], tokenizer: Tokenizer
) -> None:
    assert [i.id for i in niah] == ["niah_single_2/2048/0", "niah_single_2/2048/1"]
    for item in niah:
        tokens = tokenizer.count(item.prompt)
        assert item.meta["tokens"] == tokens
        # RULER keeps room for 128 answer tokens, and grows an essay haystack by
        # 500 words (some 650 tokens): at 2k a prompt fills 60-95% of the length,
        # by the tokenizer (SmolLM2's gives ~1320 tokens, Qwen's more words a token).
        assert 0.6 * 2048 <= tokens <= 2048 - 128
        start, end = item.meta["context_span"]
        assert item.prompt[:start] + item.context + item.prompt[end:] == item.prompt
        assert item.prompt[start:end] == item.context
        assert item.context.startswith("April 2012")  # the Paul Graham essays
        assert item.question.startswith("A special magic number is hidden within the following")
        assert item.question.endswith("mentioned in the provided text is")
        assert item.context not in item.question
        assert item.references[0] in item.context  # the needle
        assert 0.0 <= item.meta["depth"] <= 1.0
        assert item.meta["seed"] == 11 and item.meta["tokenizer"] == tokenizer.name


def test_each_metric_scores_a_reference_answer_1_and_a_wrong_one_0(niah: list[Item]) -> None:
    suite = RulerSuite("ruler-niah", ("niah_single_2",))
    item = niah[0]
    assert item.metric == "string_match_all"
    assert suite.score(item, f"The number is {item.references[0]}.") == 1.0
    assert suite.score(item, "The number is 1234.") == 0.0
    assert suite.score(item, None) == 0.0
    qa = Item("qa_2/0/0", "qa_2", "q", "c", "p", ("Paris", "paris, France"), "string_match_part")
    assert ruler.METRIC_OF_FAMILY["qa"] == "string_match_part"
    assert suite.score(qa, "It is Paris.") == 1.0
    assert suite.score(qa, "London") == 0.0


def test_generated_items_are_cached_and_read_back(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    told: list[str] = []
    suite = RulerSuite("ruler-cwe", ("cwe",), tmp_path, tokenizer, told.append)
    made = suite.items([1024], 1, 5)
    assert len(list((tmp_path / "ruler").glob("cwe-1024-n1-s5-*.jsonl"))) == 1
    assert told == ["generating RULER cwe at 1024 tokens (1 item)"]

    def refuse(*args: object) -> list[Item]:
        raise AssertionError("regenerated")

    monkeypatch.setattr(ruler, "generate", refuse)
    assert suite.items([1024], 1, 5) == made
    assert len(told) == 1  # nothing generated the second time


def test_n_is_dealt_over_the_tasks() -> None:
    assert deal(("a", "b", "c"), 10) == [("a", 4), ("b", 3), ("c", 3)]
    assert deal(("a", "b", "c"), 2) == [("a", 1), ("b", 1)]


def test_generation_works_with_the_network_unreachable(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(
        textwrap.dedent("""
        import socket, sys
        def refuse(*args, **kwargs):
            raise OSError("network is unreachable in this test")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        class Block:
            BLOCKED = ("huggingface_hub", "transformers", "tiktoken", "nemo", "nltk.downloader")
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in self.BLOCKED or name in self.BLOCKED:
                    raise ImportError(f"{name} must not be needed offline")
                return None
        sys.meta_path.insert(0, Block())
    """)
    )
    monkeypatch.setenv("PYTHONPATH", str(guard))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    items = generate("qa_1", 4096, 1, 2, tokenizer)  # SQuAD from the wheel
    assert items[0].metric == "string_match_part"
    assert any(ref in items[0].context for ref in items[0].references)
    (guard / "sitecustomize.py").write_text("raise SystemExit('guard ran')\n")
    with pytest.raises(UsageError, match="generating RULER fwe"):
        generate("fwe", 1024, 1, 2, tokenizer)  # proves the guard reaches the child


def test_the_sentence_splitter_and_zeta_stand_ins() -> None:
    text = "Mr. Smith went to Washington. He saw 3 dogs! Did he? Yes. e.g. this stays."
    assert _generate.split_sentences(text) == [
        "Mr. Smith went to Washington.",
        "He saw 3 dogs!",
        "Did he?",
        "Yes. e.g. this stays.",
    ]
    assert _generate.zeta(2.0) == pytest.approx(3.141592653589793**2 / 6, rel=1e-12)
    assert _generate.zeta(3.0) == pytest.approx(1.2020569031595942, rel=1e-12)


def test_a_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "long_context_eval", None)
    with pytest.raises(UsageError, match=r"pip install --no-deps nvidia-long-context-eval==26\.3"):
        RulerSuite("ruler-vt", ("vt",)).items([1024], 1, 0)


def test_a_generator_that_never_ends_is_stopped(tokenizer: Tokenizer) -> None:
    # RULER's qa loops for ever when not one document fits the length
    with pytest.raises(UsageError, match="did not finish in 5 s"):
        generate("qa_1", 256, 1, 0, tokenizer, timeout=5)


def test_a_length_is_required() -> None:
    with pytest.raises(UsageError, match="needs a length"):
        generate("vt", 0, 1, 0, load_tokenizer())


def test_ruler_suites_need_lengths() -> None:
    with pytest.raises(UsageError, match="ruler-vt needs lengths in tokens"):
        RulerSuite("ruler-vt", ("vt",)).items([], 1, 0)


def test_the_approximate_tokenizer_drives_the_generators_too() -> None:
    approx = ApproxTokenizer()
    (item,) = generate("vt", 1024, 1, 1, approx)
    assert item.meta["tokenizer"] == "approx-4char"
    assert 0.8 * 1024 <= approx.count(item.prompt) <= 1024 - 30


@pytest.mark.parametrize(
    ("task", "in_context", "question_end"),
    [
        ("vt", "VAR ", "they are: "),
        ("cwe", "1. ", "the top 10 words that appear most often in the list are:"),
        ("fwe", "... ", "the three most frequently appeared words are:"),
    ],
)
def test_the_split_finds_the_context_after_a_few_shot_example(
    task: str, in_context: str, question_end: str, tokenizer: Tokenizer
) -> None:
    (item,) = generate(task, 1024, 1, 9, tokenizer)
    start, end = item.meta["context_span"]
    assert item.prompt[:start] + item.context + item.prompt[end:] == item.prompt
    assert item.prompt.endswith(item.prompt[end:]) and item.context.strip()
    assert in_context in item.context
    assert item.question.lower().endswith(question_end.lower())
    # the few-shot example (vt, cwe) stays in the question, the context is the last one
    assert item.prompt.rindex(item.context) == start

"""The tokenizer that sizes items: the embedded model's vocabulary, else an approximation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from recursa.evals.tokens import (
    APPROX,
    ApproxTokenizer,
    find_vocabulary,
    load_tokenizer,
    tokenizer_from_spec,
)

TEXT = "The grass is green. The sky is blue: 4522457 needles, naïve café, x_y = 3!\n\n  End."
KNOWN = {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}


def test_the_embedded_vocabulary_is_used_when_installed(tmp_path: Path) -> None:
    # an empty models_dir still finds the 135M model where pip put it (the test venv has it)
    found = find_vocabulary(tmp_path)
    assert found is not None and found[0] == "smollm2-135m" and found[1].is_file()
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer.name == "smollm2-135m"
    assert load_tokenizer(tmp_path) is tokenizer  # cached
    ids = tokenizer.encode(TEXT)
    assert tokenizer.count(TEXT) == len(ids)
    assert tokenizer.decode(ids) == TEXT
    # a real BPE: far fewer tokens than characters, more than words
    assert len(TEXT.split()) < len(ids) < len(TEXT)


def test_the_configured_tokenizer_is_one_of_the_embedded_models() -> None:
    tokenizer = load_tokenizer()
    assert tokenizer.name in KNOWN
    again = tokenizer_from_spec(tokenizer.spec)
    assert again.name == tokenizer.name
    assert again.encode(TEXT) == tokenizer.encode(TEXT)


def test_the_approximation_round_trips_and_counts_about_four_letters_a_token() -> None:
    approx = ApproxTokenizer()
    assert approx.name == APPROX and tokenizer_from_spec(APPROX).name == APPROX
    ids = approx.encode(TEXT)
    assert approx.decode(ids) == TEXT
    assert approx.count(TEXT) == len(ids)
    assert approx.count("abcdefgh") == 2
    assert approx.count(" hello world") == 4  # " hell", "o", " worl", "d"
    assert approx.count("1234567") == 3


def test_a_bad_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="not a tokenizer spec"):
        tokenizer_from_spec("hf:gpt2")


def test_without_llama_cpp_the_approximation_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails
    load_tokenizer.cache_clear()
    try:
        assert load_tokenizer(tmp_path).name == APPROX
    finally:
        load_tokenizer.cache_clear()

"""``search(text, query)``: the kernel's helper for reading a long input by code."""

from __future__ import annotations

import pytest

from recursa.api.text import hits, query_words, search

HAY = (
    "Startups grow by making something people want. Most founders learn this late.\n"
    "The best ideas look bad at first. One of the special magic numbers for amber-apple "
    "is: 4821907. Investors rarely see that.\nA number of essays say the same about cities."
)


def test_the_question_as_asked_finds_the_needle_first(capsys: pytest.CaptureFixture[str]) -> None:
    search(HAY, "What is the special magic number for amber-apple mentioned in the provided text?")
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("[1] line 2, 5 of 5 words:"), first
    assert "4821907" in first


def test_a_word_finds_its_other_forms() -> None:
    (best,) = hits("Some numbers: 12. None here.", "number", limit=1)
    assert best.words == 1 and best.start == 0


def test_stop_words_and_repeats_are_not_searched_for() -> None:
    assert query_words("What is THE number, the Number for amber-apple?") == [
        "number",
        "amber",
        "apple",
    ]


def test_hits_are_ranked_by_words_then_position() -> None:
    found = hits(HAY, "magic number founders", limit=3)
    assert [h.words for h in found] == [2, 1, 1]
    assert HAY[found[0].start : found[0].end].strip().startswith("One of the special magic")
    assert found[1].start < found[2].start


def test_the_text_around_a_hit_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    search("Alpha. The key is below. " + "x" * 50 + " Value: 77.", "key", around=80)
    out = capsys.readouterr().out
    assert "around it:" in out and "Value: 77." in out


def test_no_match_says_which_words_were_tried(capsys: pytest.CaptureFixture[str]) -> None:
    search(HAY, "zebra quartz")
    assert capsys.readouterr().out.strip() == (
        "no passage holds any of the words (zebra, quartz); try other words"
    )


def test_a_text_that_is_not_a_str_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="text is a list, not a str"):
        search(["a"], "a")  # type: ignore[arg-type]

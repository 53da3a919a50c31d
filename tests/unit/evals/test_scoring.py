"""The standard metrics, on hand-checked cases."""

from __future__ import annotations

import pytest

from recursa.evals.scoring import (
    cleaned,
    exact_match,
    f1,
    normalised,
    score,
    string_match_all,
    string_match_part,
)


def test_ruler_string_match_counts_references_case_insensitively() -> None:
    assert string_match_all("The numbers are 4522457 and 91.", ["4522457", "91", "808"]) == 2 / 3
    # a substring test, as RULER's: "7" is found inside "4522457"
    assert string_match_all("4522457", ["7"]) == 1.0
    assert string_match_all("ANSWER: Apple", ["apple"]) == 1.0
    assert string_match_part("it is 91", ["4522457", "91"]) == 1.0
    assert string_match_part("nothing", ["4522457", "91"]) == 0.0
    assert string_match_all(None, ["x"]) == 0.0
    with pytest.raises(ValueError, match="at least one reference"):
        string_match_all("x", [])


def test_an_answer_is_cleaned_as_ruler_cleans_it() -> None:
    assert cleaned("  a\tb\x00c  ") == "a\nb\nc"
    assert cleaned(None) == ""


def test_squad_normalisation_exact_match_and_f1() -> None:
    assert normalised("The  Eiffel Tower!") == "eiffel tower"
    assert exact_match("the Eiffel tower.", ["Eiffel Tower", "Paris"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    # "eiffel" against "eiffel tower": precision 1, recall 1/2 -> F1 2/3
    assert f1("Eiffel", ["Eiffel Tower"]) == pytest.approx(2 / 3)
    # the best gold counts: "paris france" vs "paris" -> P 1/2, R 1 -> 2/3; vs "paris france" -> 1
    assert f1("Paris, France", ["Paris", "Paris France"]) == 1.0
    assert f1("London", ["Paris"]) == 0.0
    assert f1("the", ["a"]) == 1.0  # both normalise to nothing
    assert score("f1", "Eiffel", ["Eiffel Tower"]) == pytest.approx(2 / 3)


def test_hotpotqa_gives_no_partial_credit_on_yes_and_no() -> None:
    assert f1("yes it is", ["yes"]) == 0.5  # SQuAD's F1: a share of the words
    assert f1("yes it is", ["yes"], yes_no=True) == 0.0  # HotpotQA's official rule
    assert f1("no", ["yes"], yes_no=True) == 0.0
    assert f1("Yes.", ["yes"], yes_no=True) == 1.0
    assert f1("the Eiffel tower", ["Eiffel Tower"], yes_no=True) == 1.0

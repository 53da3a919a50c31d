"""errors.one_line: the one way a string or an exception becomes one line of text."""

from __future__ import annotations

import pytest

from recursa.errors import one_line


def test_whitespace_runs_fold_into_single_spaces() -> None:
    assert one_line("  disk\nfull:\t no  space \n") == "disk full: no space"


def test_first_line_keeps_only_the_first_non_blank_line() -> None:
    body = "\n  \n  Traceback (most recent call last):\n  File x\n"
    assert one_line(body, first_line=True) == "Traceback (most recent call last):"
    assert one_line("   \n ", first_line=True) == ""


def test_an_exception_is_its_message_or_its_type() -> None:
    assert one_line(ValueError("bad\nvalue")) == "bad value"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(ValueError("bad"), typed=True) == "ValueError: bad"
    assert one_line(RuntimeError(""), typed=True) == "RuntimeError"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdefg", 6, "abcde…"),
        ("abc   defg", 5, "abc…"),
        ("abc", 1, "…"),
    ],
)
def test_a_long_text_is_cut_to_the_limit_with_an_ellipsis(
    text: str, limit: int, expected: str
) -> None:
    out = one_line(text, limit=limit)
    assert out == expected
    assert len(out) <= limit

"""recursa.cli.terminal.printable: what a terminal may be shown of a model's text."""

from __future__ import annotations

import random

import pytest

from recursa.cli.terminal import printable


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\x1b]52;c;cHduZWQ=\x07b", "ab"),  # OSC 52 clipboard write, BEL-terminated
        ("a\x1b]52;c;cHduZWQ=\x1b\\b", "ab"),  # ... ST-terminated
        ("a\x9d0;title\x9cb", "ab"),  # 8-bit OSC
        ("a\x1b[2J\x1b[Hb", "ab"),  # clear screen, cursor home
        ("a\x9b31mb", "ab"),  # 8-bit CSI
        ("a\x1bPq#0;2\x1b\\b", "ab"),  # DCS (sixel)
        ("a\x1bcb", "ab"),  # full reset
        ("a\x1b(Bb", "ab"),  # charset selection
        ("progress 10%\rprogress 99%", "progress 10%progress 99%"),  # bare CR
        ("line\r\nnext", "line\nnext"),
        ("tab\tand\nnewline stay", "tab\tand\nnewline stay"),
        ("bell\x07 bs\x08 del\x7f nul\x00", "bell bs del nul"),
        ("abc\u202edcba\u202c", "abcdcba"),  # bidi override
        ("unterminated \x1b]52;c;AAAA\nnext line", "unterminated \nnext line"),
        ("ünïcode ✓ 名前 \U0001f600", "ünïcode ✓ 名前 \U0001f600"),
    ],
)
def test_printable_removes_sequences_whole_and_keeps_the_text(text: str, expected: str) -> None:
    assert printable(text) == expected


def test_nothing_a_terminal_acts_on_survives_any_input() -> None:
    # Random text dense in controls: the result holds no C0 (but \t and \n),
    # no DEL, no C1 and no bidi control, whatever the mix.
    pool = [chr(c) for c in range(0x00, 0xA0)] + ["\u202e", "\u2066", "é", "[", "]", "\\"]
    rng = random.Random(11)
    for _ in range(2000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        out = printable(text)
        bad = [
            ch
            for ch in out
            if (ord(ch) < 0x20 and ch not in "\t\n")
            or 0x7F <= ord(ch) <= 0x9F
            or ch in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
        ]
        assert not bad, (text, out)

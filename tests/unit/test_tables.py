"""The CLI's tables (``recursa.cli.tables``): one line per row at the terminal's
width, identifiers whole, model-written text made harmless, no colour in a pipe."""

from __future__ import annotations

import pytest

from recursa.cli.tables import Col, Row, cell_len, fit, flex_widths, print_table

COLUMNS = (Col("ID"), Col("TITLE", flex=True), Col("N", right=True))


def test_a_row_wider_than_the_terminal_shrinks_its_flex_column_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    print_table(COLUMNS, [("h-0123456789", "a title far too long to fit in forty columns", "7")])
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "TITLE", "N"]
    assert row.startswith("h-0123456789  a title") and "…" in row and row.endswith("  7")
    assert len(row) <= 40 and row == row.rstrip()


def test_a_wide_terminal_shows_every_cell_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    title = "a title far too long to fit in forty columns"
    print_table(COLUMNS, [("h-1", title, "7"), Row(("h-22", "short", "12"), quiet=True)])
    lines = capsys.readouterr().out.splitlines()
    assert title in lines[1]
    assert lines[1].endswith(" 7") and lines[2].endswith("12")  # numbers align right
    assert len(lines) == 3


def test_cells_are_one_plain_line_without_markup_escapes_or_colour(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)
    hostile = "[bold]x[/bold] :smile: \x1b]52;c;ZXZpbA==\x07two\nlines"
    print_table(COLUMNS, [Row(("h-1", hostile, "1"), quiet=True)])
    out = capsys.readouterr().out
    assert "\x1b" not in out  # captured stdout is not a terminal: no colour either
    [_, row] = out.splitlines()
    assert "[bold]x[/bold] :smile: two lines" in row


def test_flex_columns_share_the_room_left_and_keep_their_headers() -> None:
    columns = (Col("ID"), Col("TITLE", flex=True), Col("REASON", flex=True))
    assert flex_widths(columns, [10, 8, 30], room=60) == [None, None, None]  # it fits
    # 30 left after ID: TITLE needs 8 and gets it whole; REASON gets the other 22.
    assert flex_widths(columns, [10, 8, 30], room=40) == [None, 8, 22]
    # Too narrow for anything: the headers stay readable.
    assert flex_widths(columns, [10, 8, 30], room=12) == [None, 5, 6]


def test_wide_characters_take_two_cells_and_identifiers_are_never_cut(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    print_table(COLUMNS, [("h-0123456789", "日本語のタイトルはとても長い", "3")])
    _, row = capsys.readouterr().out.splitlines()
    assert row.startswith("h-0123456789  日本") and "…" in row and row.endswith("  3")
    assert cell_len(row) <= 30
    assert cell_len("日本") == 4 and cell_len("e\u0301") == 1 and fit("日本語", 4) == "日…"
    # Fixed columns alone wider than the terminal: the line runs past the edge
    # rather than cut an identifier.
    monkeypatch.setenv("COLUMNS", "10")
    print_table(COLUMNS, [("h-0123456789", "title", "3")])
    _, row = capsys.readouterr().out.splitlines()
    assert row.startswith("h-0123456789  ")


def test_colour_is_a_bold_header_and_dim_quiet_rows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr("recursa.cli.tables.color_enabled", lambda stream: True)
    print_table(COLUMNS, [("h-1", "a", "1"), Row(("h-2", "b", "2"), quiet=True)])
    header, plain, quiet = capsys.readouterr().out.splitlines()
    assert header.startswith("\x1b[1mID") and header.endswith("\x1b[0m")
    assert "\x1b" not in plain
    assert quiet.startswith("\x1b[2mh-2") and quiet.endswith("\x1b[0m")

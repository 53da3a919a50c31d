"""The cell result contract (recursa.kernel.types) and the collector that builds it."""

from __future__ import annotations

import pytest

from recursa.errors import KernelError
from recursa.kernel.collect import OutputCollector
from recursa.kernel.lifecycle import execute_content
from recursa.kernel.types import (
    CellOutput,
    OutputPart,
    bound_text,
    clean_text,
    collapse_redraws,
    strip_ansi,
)
from recursa.kernel.wire import Message, make_session, parse_message

# -- clean_text ---------------------------------------------------------------------


def test_clean_text_strips_ansi_codes() -> None:
    assert clean_text("\x1b[31mred\x1b[0m and \x1b[1;32mgreen\x1b[0m") == "red and green"
    assert strip_ansi("\x1b[?25lcursor\x1b[2K") == "cursor"


def test_clean_text_replaces_lone_surrogates_so_the_text_encodes() -> None:
    text = clean_text("a\udcff\udcfeb")
    assert text.encode("utf-8")  # would raise on a lone surrogate
    assert text.startswith("a")
    assert text.endswith("b")
    assert "\udcff" not in text


def test_clean_text_makes_nuls_visible() -> None:
    assert clean_text("a\x00b") == "a\\x00b"


def test_clean_text_keeps_ordinary_text() -> None:
    text = "naïve ✓ 日本\ttab\nline"
    assert clean_text(text) == text


# -- bound_text ---------------------------------------------------------------------


def test_bound_text_leaves_short_text_alone() -> None:
    assert bound_text("short", 100) == ("short", False)


def test_bound_text_keeps_head_and_tail_and_states_the_total() -> None:
    lines = [f"line {i:05d}" for i in range(10_000)]
    text = "\n".join(lines)
    shown, truncated = bound_text(text, 2_000, ref="_out[3]")
    assert truncated
    assert shown.startswith("line 00000\n")
    assert shown.endswith("line 09999")
    assert f"of {len(text):,}" in shown
    assert "(10,000 lines)" in shown
    assert "the full text is in _out[3]" in shown
    omitted = int(shown.split("[... ")[1].split(" characters")[0].replace(",", ""))
    marker_line = next(line for line in shown.splitlines() if line.startswith("[... "))
    assert omitted == len(text) - (len(shown) - len(marker_line) - 2)
    assert len(shown) < 2_000 + 200


def test_bound_text_cuts_on_line_breaks_when_near() -> None:
    text = "\n".join("x" * 50 for _ in range(200))
    shown, _ = bound_text(text, 1_000)
    head, _, rest = shown.partition("\n[... ")
    tail = rest.partition("...]\n")[2]
    assert all(len(line) == 50 for line in head.splitlines())
    assert all(len(line) == 50 for line in tail.splitlines())


def test_bound_text_without_line_breaks_still_bounds() -> None:
    shown, truncated = bound_text("y" * 100_000, 900)
    assert truncated
    assert shown.count("y") == 900
    assert "omitted of 100,000" in shown


# -- CellOutput.text ------------------------------------------------------------------


def test_text_keeps_order_and_separates_rich_parts() -> None:
    out = CellOutput(
        status="error",
        parts=(
            OutputPart("stdout", "one "),
            OutputPart("stdout", "two"),
            OutputPart("display", "<figure>"),
            OutputPart("stderr", "warn\n"),
            OutputPart("result", "42"),
            OutputPart("error", "Traceback\nValueError: bad"),
        ),
        note="the cell ran past its 2 s limit",
    )
    assert out.text() == (
        "one two\n<figure>\nwarn\n42\nTraceback\nValueError: bad\n[the cell ran past its 2 s limit]\n"
    )


def test_text_cleans_every_part() -> None:
    out = CellOutput(status="ok", parts=(OutputPart("stdout", "\x1b[1mbold\x1b[0m \udcff"),))
    text = out.text()
    assert text.startswith("bold ")
    text.encode("utf-8")


def test_text_of_an_empty_cell_is_empty() -> None:
    assert CellOutput(status="ok").text() == ""
    assert CellOutput(status="kernel_died", note="restarted").text() == "[restarted]\n"


def test_a_cell_is_not_restarted_unless_told() -> None:
    assert not CellOutput(status="ok").restarted
    assert CellOutput(status="kernel_died", restarted=True).restarted


# -- progress bars --------------------------------------------------------------------


def test_text_shows_a_redrawn_line_as_a_terminal_leaves_it() -> None:
    # tqdm's way: every redraw starts with a carriage return; the last ends the line.
    bar = "".join(f"\r{i:3d}%|{'#' * (i // 10):<10}| {i}/100" for i in range(0, 101, 5))
    out = CellOutput(
        status="ok",
        parts=(OutputPart("stderr", bar + "\n"), OutputPart("stdout", "done\n")),
        note="a note",
    )
    assert out.text() == "100%|##########| 100/100\ndone\n[a note]\n"


def test_redraws_collapse_on_the_whole_text_not_per_piece() -> None:
    # The redraw arrives in a later piece, even another stream, than the line
    # it redraws.
    collector = OutputCollector(max_chars=1_000)
    for piece in ("Downloading  10%", "\rDownloading  60%", "\rDownloading 100%\n"):
        collector.add(_msg("stream", name="stdout", text=piece))
    collector.add(_msg("stream", name="stderr", text="Installing 1/2"))
    collector.add(_msg("stream", name="stdout", text="\rInstalling 2/2\r\nok\n"))
    out = CellOutput(status="ok", parts=collector.parts())
    assert out.text() == "Downloading 100%\nInstalling 2/2\nok\n"


def test_collapse_redraws_line_endings() -> None:
    assert collapse_redraws("no carriage return\n") == "no carriage return\n"
    assert collapse_redraws("a\r\nb\r\n") == "a\nb\n"  # CRLF: a plain line break
    assert collapse_redraws("50%\r") == "50%"  # a carriage return alone overwrites nothing
    assert collapse_redraws("10%\r20%\r\r\nnext") == "20%\nnext"
    assert collapse_redraws("\r\r\n\r") == "\n"
    assert collapse_redraws("x\r" * 200_000 + "y") == "y"  # in linear time


# -- the collector --------------------------------------------------------------------


def _msg(msg_type: str, **content: object) -> Message:
    return Message(msg_type, "req", dict(content))


def test_collector_merges_adjacent_stream_pieces_in_order() -> None:
    seen: list[OutputPart] = []
    c = OutputCollector(max_chars=1_000, on_output=seen.append)
    c.add(_msg("stream", name="stdout", text="a"))
    c.add(_msg("stream", name="stdout", text="b"))
    c.add(_msg("stream", name="stderr", text="e"))
    c.add(_msg("display_data", data={"text/plain": "shown", "image/png": "..."}))
    c.add(_msg("display_data", data={"image/png": "..."}))
    c.add(_msg("stream", name="stdout", text="c"))
    c.add(_msg("execute_result", data={"text/plain": "1"}, execution_count=1))
    c.add(_msg("error", ename="E", evalue="v", traceback=["\x1b[31mTraceback\x1b[0m", "E: v"]))
    c.add(_msg("status", execution_state="idle"))
    assert c.parts() == (
        OutputPart("stdout", "ab"),
        OutputPart("stderr", "e"),
        OutputPart("display", "shown"),
        OutputPart("display", "<display: image/png>"),
        OutputPart("stdout", "c"),
        OutputPart("result", "1"),
        OutputPart("error", "Traceback\nE: v"),
    )
    assert [p.text for p in seen] == [
        "a",
        "b",
        "e",
        "shown",
        "<display: image/png>",
        "c",
        "1",
        "Traceback\nE: v",
    ]
    assert c.note() == ""


def test_collector_caps_what_it_keeps_and_counts_the_rest() -> None:
    c = OutputCollector(max_chars=10)
    c.add(_msg("stream", name="stdout", text="0123456"))
    c.add(_msg("stream", name="stdout", text="789abcdef"))
    c.add(_msg("stream", name="stderr", text="more"))
    c.add(_msg("error", ename="E", evalue="v", traceback=["Traceback", "E: v"]))
    assert c.parts() == (OutputPart("stdout", "0123456789"), OutputPart("error", "Traceback\nE: v"))
    assert c.dropped == 6 + 4
    assert "beyond 10 characters" in c.note()
    assert "10 more characters were dropped" in c.note()


def test_collector_survives_a_failing_callback() -> None:
    def boom(part: OutputPart) -> None:
        raise RuntimeError("watcher broke")

    c = OutputCollector(max_chars=100, on_output=boom)
    c.add(_msg("stream", name="stdout", text="still kept"))
    assert c.parts() == (OutputPart("stdout", "still kept"),)


def test_collector_error_without_traceback_uses_name_and_value() -> None:
    c = OutputCollector(max_chars=100)
    c.add(_msg("error", ename="KeyError", evalue="'x'", traceback=[]))
    assert c.parts() == (OutputPart("error", "KeyError: 'x'"),)


# -- messages on the wire -------------------------------------------------------------

CONNECTION = {"key": "secret", "signature_scheme": "hmac-sha256"}


def test_messages_are_checked_against_the_connection_key() -> None:
    ours = make_session(CONNECTION)
    request = ours.msg("execute_request", {"code": "1"})
    assert parse_message(ours, ours.serialize(request)) == Message(
        "execute_request", None, {"code": "1"}
    )
    kernel = make_session(CONNECTION)
    reply = kernel.serialize(kernel.msg("execute_reply", {"status": "ok"}, parent=request))
    msg_id = request["msg_id"]
    assert parse_message(ours, reply) == Message("execute_reply", msg_id, {"status": "ok"})
    head = [kernel.pack(kernel.msg_header("execute_reply")), kernel.pack(request["header"]), b"{}"]
    not_a_dict = [*head, b'["ok"]']
    assert parse_message(ours, [b"<IDS|MSG>", kernel.sign(not_a_dict), *not_a_dict]) is None
    forged = [*reply[:-1], b'{"status": "error"}']
    assert parse_message(ours, forged) is None
    assert parse_message(make_session({"key": "other key"}), reply) is None
    assert parse_message(ours, [b"no delimiter"]) is None
    assert parse_message(ours, [b"<IDS|MSG>"]) is None
    assert parse_message(ours, [b"<IDS|MSG>", b"", *reply[2:]]) is None  # unsigned
    # Signed, but a header or parent header that is not an object.
    for bad in ([b"[]", head[1], b"{}", b"{}"], [head[0], b"[1]", b"{}", b"{}"]):
        assert parse_message(ours, [b"<IDS|MSG>", kernel.sign(bad), *bad]) is None


def test_an_unusable_signature_scheme_is_a_kernel_error() -> None:
    with pytest.raises(KernelError, match="signature_scheme"):
        make_session({"key": "k", "signature_scheme": "sha256"})


def test_invalid_utf8_from_the_kernel_is_tolerated() -> None:
    kernel = make_session(CONNECTION)
    parts = [
        kernel.pack(kernel.msg_header("stream")),
        kernel.pack({"msg_id": "p"}),
        b"{}",
        b'{"text": "a\xff\xfeb"}',
    ]
    parsed = parse_message(make_session(CONNECTION), [b"<IDS|MSG>", kernel.sign(parts), *parts])
    assert parsed == Message("stream", "p", {"text": "a\ufffd\ufffdb"})


def test_lone_surrogates_in_code_travel_as_escapes() -> None:
    session = make_session(CONNECTION)
    content = execute_content("s = '\ud800 \udcff ✓'", silent=False)
    parsed = parse_message(session, session.serialize(session.msg("execute_request", content)))
    assert parsed is not None
    assert parsed.content["code"] == "s = '\\ud800 \\udcff ✓'"

"""Session names and references: what the wire and the command line accept."""

from __future__ import annotations

import pytest

from recursa.cli.common import reference
from recursa.errors import UsageError
from recursa.protocol.fields import MAX_SESSION_NAME_CHARS, check_session_name
from recursa.protocol.wire import CreateSession, Spawn, from_json

GOOD = ["a", "build-2", "v1.2_final", "A.b-C_d", "x" * MAX_SESSION_NAME_CHARS, "...", ".hidden"]
BAD = [
    "",
    ".",
    "..",
    "../../etc",
    "a/b",
    "a b",
    "tab\t",
    "line\n",
    "name:with:colons",
    "名前",
    "é",
    "x" * (MAX_SESSION_NAME_CHARS + 1),
    "\udcff",
    "a\x1b]52;c;eA==\x07",
]


@pytest.mark.parametrize("name", GOOD)
def test_plain_words_are_session_names(name: str) -> None:
    assert check_session_name(name) == name
    assert from_json(CreateSession, {"task": "t", "name": name}).name == name
    assert from_json(Spawn, {"task": "t", "name": name}).name == name


@pytest.mark.parametrize("name", BAD)
def test_anything_else_is_refused_in_one_line_by_the_rule_and_the_wire(name: str) -> None:
    with pytest.raises(ValueError, match="a session name") as info:
        check_session_name(name)
    assert "\n" not in str(info.value) and len(str(info.value)) < 200
    for cls in (CreateSession, Spawn):
        with pytest.raises(ValueError, match=r"name|surrogates") as wired:
            from_json(cls, {"task": "t", "name": name})
        assert "\n" not in str(wired.value)


def test_a_reference_must_be_utf8_and_bounded() -> None:
    assert reference(None) is None
    assert reference("s-abc") == "s-abc"
    assert reference("名前 with spaces") == "名前 with spaces"  # old names stay reachable
    with pytest.raises(UsageError, match=r"^a reference is UTF-8 text; '\\xff\\xfe' holds"):
        reference("\udcff\udcfe")
    with pytest.raises(UsageError, match="at most 500 characters; this one has 100,000"):
        reference("a" * 100_000)

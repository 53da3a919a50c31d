"""The suite registry: built-in names, custom suites by import path, file and entry point."""

from __future__ import annotations

import importlib
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from recursa.errors import UsageError
from recursa.evals import suites
from recursa.evals.suites import load_suite, suite_names
from recursa.evals.suites.qa import QASuite
from recursa.evals.suites.ruler import RulerSuite
from recursa.evals.trials import Item, Suite

PLAIN = textwrap.dedent("""
    name = "capitals"

    def items():
        return [
            {"id": "fr", "question": "Capital of France?", "references": ["Paris"]},
            {"id": "de", "question": "Capital?", "context": "Germany", "references": "Berlin"},
        ]

    def score(item, answer):
        return float(answer is not None and item.references[0] in answer)
""")

PROTOCOL = textwrap.dedent("""
    from recursa.evals.trials import Item

    class Counting:
        name = "counting"

        def items(self, lengths, n, seed):
            return [Item(f"c/{seed}/{i}", "count", f"{i}+1?", "", f"{i}+1?", (str(i + 1),),
                         "exact_match") for i in range(n)]

        def score(self, item, answer):
            return 1.0 if answer == item.references[0] else 0.0
""")


def test_built_in_names() -> None:
    names = suite_names()
    for name in (
        "ruler-niah",
        "ruler-vt",
        "ruler-cwe",
        "ruler-fwe",
        "ruler-qa",
        "ruler",
        "ruler-niah_multikey_1",
        "hotpotqa",
        "squad",
    ):
        assert name in names
    niah = load_suite("ruler-niah")
    assert isinstance(niah, RulerSuite) and isinstance(niah, Suite)
    assert niah.tasks == ("niah_single_1", "niah_single_2", "niah_single_3")
    assert len(load_suite("ruler").tasks) == 13  # type: ignore[attr-defined]
    assert isinstance(load_suite("hotpotqa"), QASuite)


def test_an_unknown_name_lists_the_built_in_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown suite 'nope': built-in suites are ruler-niah, "):
        load_suite("nope")


def test_a_custom_suite_by_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_capitals.py").write_text(PLAIN)
    (tmp_path / "my_counting.py").write_text(PROTOCOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = load_suite("my_capitals")
    assert plain.name == "capitals"
    fr, de = plain.items([4096], 0, 1)
    assert fr == Item(
        "fr", "capitals", "Capital of France?", "", "Capital of France?", ("Paris",), "custom"
    )
    assert de.prompt == "Germany\n\nCapital?" and de.references == ("Berlin",)
    assert [i.id for i in plain.items([], 1, 1)] == ["fr"]  # the first n
    assert plain.score(fr, "Paris, of course") == 1.0 and plain.score(fr, None) == 0.0
    counting = load_suite("my_counting:Counting")
    assert counting.name == "counting"
    assert [i.id for i in counting.items([], 2, 7)] == ["c/7/0", "c/7/1"]
    with pytest.raises(UsageError, match="has no 'Missing'"):
        load_suite("my_counting:Missing")


def test_a_custom_suite_by_file_path(tmp_path: Path) -> None:
    path = tmp_path / "suite_file.py"
    path.write_text(PLAIN)
    suite = load_suite(str(path))
    assert suite.name == "capitals" and len(suite.items([], 0, 0)) == 2
    (tmp_path / "broken.py").write_text("def items(): return []\n")
    with pytest.raises(UsageError, match="must provide items\\(\\) and score"):
        load_suite(str(tmp_path / "broken.py"))
    (tmp_path / "bad_items.py").write_text("def items(): return [1]\ndef score(i, a): return 0\n")
    with pytest.raises(UsageError, match="an item must be an Item or a dict"):
        load_suite(str(tmp_path / "bad_items.py")).items([], 0, 0)


def test_a_custom_suite_by_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ep_counting.py").write_text(PROTOCOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = metadata.EntryPoint("counts", "ep_counting:Counting", suites.ENTRY_POINT_GROUP)

    def entry_points(group: str) -> list[metadata.EntryPoint]:
        return [entry] if group == suites.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert load_suite("counts").name == "counting"

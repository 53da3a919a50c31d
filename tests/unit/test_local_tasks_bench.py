"""The fidelity benchmark's own parts: seeded tasks, answer checkers, the bare loop's
parsing and its plain kernel (a real ipykernel)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bare_loop import CODE, FINAL, BareKernel, cut, tool_code
from task_set import GROUPS, build, check


def test_tasks_are_deterministic_per_seed_and_cover_four_groups() -> None:
    first, again, other = build(3), build(3), build(4)
    assert [(t.id, t.expected, t.prompts) for t in first] == [
        (t.id, t.expected, t.prompts) for t in again
    ]
    assert [t.expected for t in first] != [t.expected for t in other]
    assert len(first) >= 30
    assert {t.group for t in first} == set(GROUPS)
    assert all(len(t.prompts) == 2 for t in first if t.group == "followup")
    assert len({t.id for t in first}) == len(first)


@pytest.mark.parametrize(
    ("kind", "expected", "answer", "right"),
    [
        ("int", "1234", "The total is 1,234.", True),
        ("int", "1234", "1235", False),
        ("int", "7", "1 2 3 4 5 6 7", False),  # a list of guesses
        ("float", "12.50", "about 12.5", True),
        ("float", "12.50", "12.6", False),
        ("text", "Friday", "FINAL: friday.", True),
        ("text", "Friday", "Fridays", False),
        ("text", "2020-01-31", "It is 2020-01-31", True),
        ("int", "3", None, False),
    ],
)
def test_checkers(kind: str, expected: str, answer: str | None, right: bool) -> None:
    assert check(kind, expected, answer) is right


def test_bare_loop_parsing() -> None:
    reply = "Let me compute.\n```python\nprint(2 + 2)\n```\n"
    found = CODE.search(reply)
    assert found is not None and found.group(1) == "print(2 + 2)\n"
    final = FINAL.search("Done.\nFINAL ANSWER: 42")
    assert final is not None and final.group(1) == "42"
    assert (
        tool_code('<tool_call>\n{"name": "python", "arguments": {"code": "x = 1"}}\n</tool_call>')
        == "x = 1"
    )
    assert (
        tool_code('```json\n{"name": "python", "arguments": "{\\"code\\": \\"y\\"}"}\n```') == "y"
    )
    assert tool_code('<tool_call>{"name": "other", "arguments": {"code": "z"}}</tool_call>') is None
    assert tool_code("<tool_call>{not json}</tool_call>") is None
    text = "a" * 50 + "b" * 50
    assert cut(text, 200) == text
    shown = cut(text, 20)
    assert shown.startswith("a" * 10) and shown.endswith("b" * 10) and "80 characters cut" in shown


async def test_bare_kernel_runs_cells_in_its_workspace(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("hello")
    async with BareKernel(tmp_path) as kernel:
        assert await kernel.run("x = open('data.txt').read()\nprint(x)", 60) == "hello\n"
        assert await kernel.run("len(x)", 60) == "5\n"
        assert "ZeroDivisionError" in await kernel.run("1 / 0", 60)
        stopped = await kernel.run("import time\nwhile True: time.sleep(0.05)", 1.0)
        assert "interrupted" in stopped
        assert await kernel.run("print(x)", 60) == "hello\n"

"""The session tree as rows: order, depth, subtree usage, filters, finding one."""

from __future__ import annotations

from recursa.protocol.wire import SessionInfo, Usage
from recursa.view.tree import build_rows, filter_rows, find_row, tokens


def info(
    sid: str,
    parent: str | None = None,
    *,
    name: str | None = None,
    status: str = "idle",
    at: float = 0.0,
    spent: int = 0,
) -> SessionInfo:
    return SessionInfo(
        id=sid,
        name=name,
        parent_id=parent,
        status=status,  # type: ignore[arg-type]
        model="openai/m",
        cwd="/w",
        created_at=at,
        last_activity=at,
        usage=Usage(calls=1, input_tokens=spent, output_tokens=1, cost=spent / 1000),
    )


TREE = [
    # given out of order on purpose: children before their parents
    info("c2aaaa", "r1aaaa", name="second", at=5, spent=10),
    info("g1aaaa", "c1aaaa", name="grandchild", status="running", at=4, spent=100),
    info("r1aaaa", name="root", status="running", at=1, spent=1000),
    info("c1aaaa", "r1aaaa", name="child", at=2, spent=10),
    info("r2bbbb", name="other", status="inactive", at=3),
]


def test_parents_come_before_children_and_siblings_are_oldest_first() -> None:
    rows = build_rows(TREE)
    assert [(r.label, r.depth) for r in rows] == [
        ("root", 0),
        ("child", 1),
        ("grandchild", 2),
        ("second", 1),
        ("other", 0),
    ]


def test_subtree_usage_adds_every_descendant() -> None:
    rows = {r.label: r for r in build_rows(TREE)}
    assert tokens(rows["root"].subtree) == (1000 + 1) + (10 + 1) + (100 + 1) + (10 + 1)
    assert tokens(rows["child"].subtree) == 11 + 101
    assert rows["root"].subtree.calls == 4
    assert rows["root"].children == 2 and rows["grandchild"].children == 0


def test_a_session_whose_parent_is_missing_is_a_root() -> None:
    rows = build_rows([info("x", "gone", name="orphan")])
    assert [(r.label, r.depth) for r in rows] == [("orphan", 0)]


def test_a_deep_chain_does_not_recurse() -> None:
    chain = [info("s0")] + [info(f"s{i}", f"s{i - 1}", at=i) for i in range(1, 3000)]
    rows = build_rows(chain)
    assert rows[-1].depth == 2999
    assert rows[0].subtree.calls == 3000


def test_filter_by_status_keeps_the_ancestors_of_a_match() -> None:
    rows = filter_rows(build_rows(TREE), statuses={"running"})
    assert [(r.label, r.matched) for r in rows] == [
        ("root", True),
        ("child", False),
        ("grandchild", True),
    ]


def test_filter_by_name_is_a_case_insensitive_substring() -> None:
    rows = filter_rows(build_rows(TREE), name="GRAND")
    assert [r.label for r in rows if r.matched] == ["grandchild"]
    assert filter_rows(build_rows(TREE), statuses={"idle"}, name="sec")[-1].label == "second"
    assert filter_rows(build_rows(TREE), name="nothing-like-it") == []


def test_find_by_id_prefix_or_name() -> None:
    rows = build_rows(TREE)
    assert find_row(rows, "g1aaaa").label == "grandchild"  # type: ignore[union-attr]
    assert find_row(rows, "Grandchild").label == "grandchild"  # type: ignore[union-attr]
    assert find_row(rows, "r2").label == "other"  # type: ignore[union-attr]
    assert find_row(rows, "grand").label == "grandchild"  # type: ignore[union-attr]
    assert find_row(rows, "c") is None  # c1…, c2…: ambiguous
    assert find_row(rows, "zzz") is None
    assert find_row(rows, "  ") is None

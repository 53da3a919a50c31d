"""Schema migrations: applied once, in order, recorded; newer and foreign files refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from recursa.errors import StoreError
from recursa.store import LATEST_VERSION, AppliedMigration, Store, applied_migrations
from recursa.store.db import connect
from recursa.store.migrations import MIGRATIONS, Migration, migrate


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_registry_is_contiguous_and_named() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert len({m.name for m in MIGRATIONS}) == len(MIGRATIONS)
    assert MIGRATIONS[-1].version == LATEST_VERSION
    assert MIGRATIONS[0].name == "initial"


def test_fresh_store_records_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "recursa.db"
    with Store.open(path, clock=lambda: 100.0):
        pass
    conn = _raw(path)
    try:
        recorded = applied_migrations(conn)
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    finally:
        conn.close()
    assert recorded == [AppliedMigration(m.version, m.name, 100.0) for m in MIGRATIONS]
    assert {"schema_migrations", "sessions", "events", "usage", "cell_outputs"} <= tables


def test_reopen_does_not_reapply(tmp_path: Path) -> None:
    path = tmp_path / "recursa.db"
    with Store.open(path, clock=lambda: 100.0) as store:
        sid = store.create_session(model="m", cwd="/", workspace="/").id
    with Store.open(path, clock=lambda: 200.0) as store:
        # The data from the first open is still there: nothing was recreated.
        assert store.session(sid).model == "m"
    conn = connect(path)
    try:
        assert migrate(conn, where=str(path), clock=lambda: 300.0) == ()
        assert [m.applied_at for m in applied_migrations(conn)] == [100.0] * len(MIGRATIONS)
    finally:
        conn.close()


def test_migrations_run_in_order_once_each(tmp_path: Path) -> None:
    calls: list[str] = []

    def step(version: int, name: str) -> Migration:
        def apply(conn: sqlite3.Connection) -> None:
            calls.append(name)
            conn.execute(f"CREATE TABLE {name} (x INTEGER)")

        return Migration(version, name, apply)

    steps = [step(1, "first"), step(2, "second")]
    conn = connect(tmp_path / "db.sqlite")
    try:
        # Given out of order, applied in version order.
        assert migrate(conn, where="db", clock=lambda: 1.0, migrations=steps[::-1]) == (1, 2)
        assert calls == ["first", "second"]
        assert migrate(conn, where="db", clock=lambda: 2.0, migrations=steps) == ()
        assert calls == ["first", "second"]
        steps.append(step(3, "third"))
        assert migrate(conn, where="db", clock=lambda: 3.0, migrations=steps) == (3,)
        assert calls == ["first", "second", "third"]
        assert [(m.version, m.name, m.applied_at) for m in applied_migrations(conn)] == [
            (1, "first", 1.0),
            (2, "second", 1.0),
            (3, "third", 3.0),
        ]
    finally:
        conn.close()


def test_a_failed_migration_rolls_back_alone(tmp_path: Path) -> None:
    def good(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE good (x INTEGER)")

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half (x INTEGER)")
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    steps = [Migration(1, "good", good), Migration(2, "bad", bad)]
    conn = connect(tmp_path / "db.sqlite")
    try:
        with pytest.raises(StoreError, match=r"migration 2 \(bad\) of db failed: no such table"):
            migrate(conn, where="db", clock=lambda: 1.0, migrations=steps)
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        assert "good" in tables
        assert "half" not in tables  # the DDL before the failure was rolled back with it
        assert [m.version for m in applied_migrations(conn)] == [1]
        assert not conn.in_transaction
    finally:
        conn.close()


def test_store_from_a_newer_recursa_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "recursa.db"
    Store.open(path).close()
    conn = _raw(path)
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
        (LATEST_VERSION + 1,),
    )
    conn.close()
    with pytest.raises(StoreError) as info:
        Store.open(path)
    message = str(info.value)
    assert "newer recursa" in message
    assert f"schema version {LATEST_VERSION + 1}" in message
    assert str(path) in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "content",
    [b"this is not a database\n" * 200, b"\x00" * 4096 + b"junk"],
    ids=["text", "binary"],
)
def test_garbage_file_is_refused_with_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "recursa.db"
    path.write_bytes(content)
    with pytest.raises(StoreError) as info:
        Store.open(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message
    assert path.read_bytes() == content  # refused, not overwritten


def test_torn_store_is_refused_with_one_line(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    with Store.open(good) as store:
        sid = store.create_session(model="m", cwd="/", workspace="/").id
        store.put_cell_output(sid, 1, "c", "x" * 20000)
    torn = tmp_path / "torn.db"
    # The header survives, the pages it promises do not.
    torn.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(StoreError) as info:
        Store.open(torn)
    assert str(torn) in str(info.value)
    assert "\n" not in str(info.value)


def test_another_programs_database_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = _raw(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    with pytest.raises(StoreError, match="not a recursa store"):
        Store.open(path)
    conn = _raw(path)
    try:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    finally:
        conn.close()
    assert tables == {"notes"}

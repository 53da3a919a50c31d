"""A 0-byte database is refused unless the home is new: SQLite would read it
as an empty store, and a used home's history would silently start over."""

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.errors import StoreError
from recursa.store import Store


def test_a_zero_byte_store_in_a_used_home_is_refused_in_one_line_and_kept(tmp_path: Path) -> None:
    db = tmp_path / "recursa.db"
    (tmp_path / "sessions" / "s-1").mkdir(parents=True)
    db.write_bytes(b"")
    with pytest.raises(StoreError) as caught:
        Store.open(db)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"the store {db} is empty (0 bytes) but this home has been used")
    assert db.read_bytes() == b"", "the file is kept as it is"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recursa.db", "sessions"]


def test_a_zero_byte_store_beside_a_written_log_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "recursa.db"
    db.write_bytes(b"")
    db.with_name("recursa.db-wal").write_bytes(b"\0" * 32)
    with pytest.raises(StoreError, match="is empty"):
        Store.open(db)


def test_a_zero_byte_store_in_a_new_home_becomes_the_store(tmp_path: Path) -> None:
    db = tmp_path / "recursa.db"
    db.write_bytes(b"")  # a first start cut short after making the file
    (tmp_path / "sessions").mkdir()  # made, but no session yet
    with Store.open(db) as store:
        assert store.sessions() == []
    assert db.stat().st_size > 0
    with Store.open(db) as again:  # a written store opens as before
        assert again.sessions() == []

"""recursa.files: a file is replaced whole, with its mode, or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from recursa.files import TEMP_SUFFIX, atomic_file, write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_atomic_replaces_the_file_with_its_mode_and_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert _mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_the_target_is_untouched_until_the_block_ends(tmp_path: Path) -> None:
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")
    with atomic_file(target, mode=0o644) as out:
        out.write(b"new")
        temp = Path(out.name)
        assert temp.parent == tmp_path and temp.name.endswith(TEMP_SUFFIX)
        assert _mode(temp) == 0o600  # private while it is being written
        assert target.read_bytes() == b"old"
    assert target.read_bytes() == b"new"
    assert _mode(target) == 0o644
    assert not temp.exists()


def test_a_block_that_raises_keeps_the_old_file_and_removes_the_temporary(
    tmp_path: Path,
) -> None:
    target = tmp_path / "marker.json"
    target.write_bytes(b"old")

    def write_then_refuse() -> None:
        with atomic_file(target, mode=0o600) as out:
            out.write(b"half")
            raise ValueError("checksum mismatch")

    with pytest.raises(ValueError, match="checksum"):
        write_then_refuse()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["marker.json"]


def test_a_missing_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "absent" / "x", b"data", mode=0o600)

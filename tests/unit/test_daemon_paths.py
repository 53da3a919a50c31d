"""The daemon's files: state written atomically and read defensively, the
token made once and private, the lock exclusive, the socket path short."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from recursa.daemon.paths import (
    MAX_SOCKET_PATH,
    DaemonLock,
    DaemonPaths,
    DaemonState,
    clear_stale,
    ensure_token,
    prepare_home,
    read_state,
    read_token,
    write_state,
)
from recursa.errors import DaemonError


@pytest.fixture
def paths(home: Path) -> DaemonPaths:
    paths = DaemonPaths.for_home(home)
    prepare_home(paths)
    return paths


def test_home_is_made_private(home: Path) -> None:
    home.mkdir(mode=0o755)
    prepare_home(DaemonPaths.for_home(home))
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700


def test_state_round_trips_and_bad_files_read_as_absent(paths: DaemonPaths) -> None:
    assert read_state(paths) is None
    state = DaemonState(pid=42, socket="/s", started_at=1.5, version="0.1.0", protocol=1)
    write_state(paths, state)
    assert read_state(paths) == state
    assert stat.S_IMODE(os.stat(paths.state).st_mode) == 0o600
    for text in (
        b"",
        b'{"pid": 4',
        b"\xff\xfe",
        b"[]",
        b'{"pid": "42", "socket": "/s", "started_at": 1, "version": "v", "protocol": 1}',
        b'{"pid": true, "socket": "/s", "started_at": 1, "version": "v", "protocol": 1}',
        b'{"pid": 42, "socket": "/s", "version": "v", "protocol": 1}',
    ):
        paths.state.write_bytes(text)
        assert read_state(paths) is None, text
    assert [p.name for p in paths.home.iterdir() if p.name.endswith(".tmp")] == []


def test_token_is_made_once_private_and_stable(paths: DaemonPaths) -> None:
    assert read_token(paths) is None
    token = ensure_token(paths)
    assert len(token) >= 43 and token == ensure_token(paths) == read_token(paths)
    assert stat.S_IMODE(os.stat(paths.token).st_mode) == 0o600
    assert sorted(p.name for p in paths.home.iterdir()) == ["daemon.token"]


def test_the_lock_admits_one_holder(paths: DaemonPaths) -> None:
    first, second = DaemonLock(paths), DaemonLock(paths)
    assert not DaemonLock.probe(paths)
    assert first.acquire()
    assert not second.acquire(wait=0.05)
    assert DaemonLock.probe(paths)
    assert not clear_stale(paths)
    first.release()
    assert second.acquire()
    second.release()
    assert not DaemonLock.probe(paths)


def test_stale_files_are_cleared_only_when_the_lock_is_free(paths: DaemonPaths) -> None:
    paths.socket.write_text("")
    write_state(paths, DaemonState(pid=1, socket="/s", started_at=0, version="v", protocol=1))
    holder = DaemonLock(paths)
    assert holder.acquire()
    assert not clear_stale(paths) and paths.socket.exists() and paths.state.exists()
    holder.release()
    assert clear_stale(paths)
    assert not paths.socket.exists() and not paths.state.exists()


def test_a_long_home_gets_a_short_private_socket_path(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 80) / ("y" * 40)
    paths = DaemonPaths.for_home(deep)
    assert len(os.fsencode(deep / "daemon.sock")) > MAX_SOCKET_PATH
    assert len(os.fsencode(paths.socket)) <= MAX_SOCKET_PATH
    assert paths.socket == DaemonPaths.for_home(str(deep) + "/").socket, "a pure function"
    assert paths.socket != DaemonPaths.for_home(deep / "z").socket
    prepare_home(paths)
    assert stat.S_IMODE(os.lstat(paths.socket.parent).st_mode) == 0o700


def test_a_shared_socket_directory_not_ours_alone_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import recursa.daemon.paths as daemon_paths

    monkeypatch.setattr(daemon_paths, "SHORT_SOCKET_ROOT", tmp_path)
    paths = DaemonPaths.for_home(tmp_path / ("x" * 120))
    paths.socket.parent.mkdir(mode=0o755)
    os.chmod(paths.socket.parent, 0o755)
    with pytest.raises(DaemonError, match="accessible to others"):
        prepare_home(paths)
    paths.socket.parent.rmdir()
    paths.socket.parent.symlink_to(tmp_path)
    with pytest.raises(DaemonError, match="not a directory owned by you"):
        prepare_home(paths)

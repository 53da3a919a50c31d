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
    kernel_socket_dir,
    prepare_home,
    read_state,
    read_token,
    write_state,
)
from recursa.errors import ConfigError, DaemonError


@pytest.fixture
def paths(home: Path) -> DaemonPaths:
    paths = DaemonPaths.for_home(home)
    prepare_home(paths)
    return paths


def test_a_new_home_is_private_and_an_existing_one_keeps_its_mode(home: Path) -> None:
    assert prepare_home(DaemonPaths.for_home(home)) is True
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    os.chmod(home, 0o755)  # the owner's choice: never changed behind their back
    assert prepare_home(DaemonPaths.for_home(home)) is False
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o755


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o702])
def test_a_world_writable_home_is_refused_in_one_line_and_left_alone(home: Path, mode: int) -> None:
    home.mkdir()
    os.chmod(home, mode)
    with pytest.raises(ConfigError) as caught:
        prepare_home(DaemonPaths.for_home(home))
    message = str(caught.value)
    assert "\n" not in message and "writable by every user" in message and str(home) in message
    assert caught.value.exit_code == 2
    assert stat.S_IMODE(os.stat(home).st_mode) == mode
    assert list(home.iterdir()) == []


def test_the_kernel_socket_has_a_directory_of_its_own(tmp_path: Path) -> None:
    paths = DaemonPaths.for_home(tmp_path / "h")
    assert paths.kernel_socket == paths.home / "kernel-api" / "kernel.sock"
    prepare_home(paths)
    directory = kernel_socket_dir(paths)
    assert directory == paths.kernel_socket.parent
    assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    (directory / "kernel.sock").write_text("")  # a dead daemon's socket is expected there
    assert kernel_socket_dir(paths) == directory
    (directory / "daemon.token").write_text("stray")
    with pytest.raises(DaemonError, match=r"must hold only kernel\.sock; remove daemon\.token"):
        kernel_socket_dir(paths)


def test_a_long_home_gets_a_short_private_kernel_socket_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 80) / ("y" * 40)
    paths = DaemonPaths.for_home(deep)
    assert len(os.fsencode(paths.kernel_socket)) <= MAX_SOCKET_PATH
    assert paths.kernel_socket == DaemonPaths.for_home(str(deep) + "/").kernel_socket
    assert paths.kernel_socket.parent.parent == paths.socket.parent
    assert paths.kernel_socket.parent != paths.socket.parent, "the kernels' directory is theirs"
    prepare_home(paths)
    directory = kernel_socket_dir(paths)
    try:
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
        assert list(directory.iterdir()) == []
    finally:
        directory.rmdir()


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

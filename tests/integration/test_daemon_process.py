"""The daemon as a real detached process: ``python -m recursa.daemon`` started,
found, stopped, killed and restarted through :mod:`recursa.daemon.process`.
The host inside it is the fake (``--host-factory fake_host:open_fake_host``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.daemon.paths import EXIT_ALREADY_RUNNING, DaemonPaths, DaemonState, read_state
from recursa.errors import DaemonError
from recursa.protocol.wire import CreateSession

TESTS = Path(__file__).resolve().parents[1]
FAKE = "fake_host:open_fake_host"
CANARY = "sk-canary-daemon-4242"
CORP_CANARY = "corp-canary-7777"
WAIT = 15.0


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    """The environment a CLI would pass: ours, plus the fake host on the path."""
    return {
        **os.environ,
        "RECURSA_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture
async def running(home: Path, env: dict[str, str]) -> AsyncIterator[DaemonState]:
    state = await process.start(home, env=env, host_factory=FAKE)
    yield state
    if psutil.pid_exists(state.pid) and psutil.Process(state.pid).status() != "zombie":
        await process.stop(home, force=True, timeout=WAIT)


def readable_proc(pid: int) -> bool:
    """Whether this test may look inside the daemon's /proc entries: the daemon
    is non-dumpable, so only root (or CAP_SYS_PTRACE) can."""
    return os.access(f"/proc/{pid}/environ", os.R_OK)


def wait_gone(pid: int) -> None:
    """Wait for (and reap, if it is our child) a process we killed."""
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(WAIT)


async def test_start_status_and_stop(home: Path, env: dict[str, str]) -> None:
    paths = DaemonPaths.for_home(home)
    state = await process.start(home, env=env, host_factory=FAKE)

    assert read_state(paths) == state
    assert state.socket == str(paths.socket)
    found = await process.status(home)
    assert found is not None and found.pid == state.pid
    assert stat.S_IMODE(os.stat(paths.socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    daemon = psutil.Process(state.pid)
    if readable_proc(state.pid):
        assert daemon.net_connections(kind="inet") == [], "no TCP listener"
        assert any(c.laddr == str(paths.socket) for c in daemon.net_connections(kind="unix"))
    assert os.getsid(state.pid) == state.pid, "detached in its own session"

    assert await process.stop(home) == state.pid
    assert not psutil.pid_exists(state.pid) or daemon.status() == psutil.STATUS_ZOMBIE
    assert await process.status(home) is None
    assert not paths.socket.exists() and not paths.state.exists()
    closed = json.loads((home / "fake-host-closed.json").read_text())
    assert closed == [{"pid": state.pid, "shutdowns": [False]}]


async def test_sigterm_stops_the_daemon_gracefully(home: Path, env: dict[str, str]) -> None:
    paths = DaemonPaths.for_home(home)
    state = await process.start(home, env=env, host_factory=FAKE)
    os.kill(state.pid, signal.SIGTERM)
    assert psutil.Process(state.pid).wait(WAIT) == 0
    assert not paths.socket.exists() and not paths.state.exists()
    closed = json.loads((home / "fake-host-closed.json").read_text())
    assert closed == [{"pid": state.pid, "shutdowns": [False]}]


async def test_a_second_daemon_for_the_same_home_refuses(
    home: Path, env: dict[str, str], running: DaemonState
) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "recursa.daemon", "--home", str(home), "--host-factory", FAKE],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert second.returncode == EXIT_ALREADY_RUNNING
    assert second.stderr.strip().splitlines() == [
        f"recursa daemon: a daemon is already running for RECURSA_HOME {home.resolve()} "
        f"(pid {running.pid})"
    ]
    with pytest.raises(DaemonError, match=f"already running .* \\(pid {running.pid}\\)"):
        await process.start(home, env=env, host_factory=FAKE)
    assert (await process.start(home, env=env, host_factory=FAKE, reuse=True)).pid == running.pid


async def test_after_kill_9_a_new_daemon_replaces_the_stale_files(
    home: Path, env: dict[str, str]
) -> None:
    paths = DaemonPaths.for_home(home)
    first = await process.start(home, env=env, host_factory=FAKE)
    async with DaemonClient(home) as client:
        await client.create_session(CreateSession(task="t"))
    os.kill(first.pid, signal.SIGKILL)
    wait_gone(first.pid)
    assert paths.socket.exists(), "a crash leaves the socket"
    stale = read_state(paths)
    assert stale is not None and stale.pid == first.pid

    second = await process.start(home, env=env, host_factory=FAKE, reuse=True)
    assert second.pid != first.pid
    assert read_state(paths) == second
    async with DaemonClient(home) as client:
        assert (await client.status()).pid == second.pid
    await process.stop(home)


async def test_a_dead_daemon_is_reported_not_running_and_cleaned_up(
    home: Path, env: dict[str, str]
) -> None:
    paths = DaemonPaths.for_home(home)
    state = await process.start(home, env=env, host_factory=FAKE)
    os.kill(state.pid, signal.SIGKILL)
    wait_gone(state.pid)
    assert await process.status(home) is None
    assert not paths.socket.exists() and not paths.state.exists()
    with pytest.raises(DaemonError) as error:
        await process.stop(home)
    assert str(error.value) == f"no daemon is running for RECURSA_HOME {home.resolve()}"


async def test_credentials_reach_the_host_but_not_the_daemons_environment(
    home: Path, env: dict[str, str]
) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[providers.corp]\nkind = "openai"\napi_key_env = "CORP_LLM_KEY"\n'
    )
    env = {**env, "OPENAI_API_KEY": CANARY, "CORP_LLM_KEY": CORP_CANARY}
    state = await process.start(home, env=env, host_factory=FAKE)
    try:
        if readable_proc(state.pid):  # otherwise non-dumpable hides it even from us
            environ = Path(f"/proc/{state.pid}/environ").read_bytes()
            assert b"RECURSA_HOME=" in environ
            assert CANARY.encode() not in environ
            assert CORP_CANARY.encode() not in environ
            assert b"OPENAI_API_KEY=" not in environ and b"CORP_LLM_KEY=" not in environ
        received = json.loads((home / "fake-host.json").read_text())
        assert received["pid"] == state.pid
        assert received["api_keys"]["openai"] == CANARY
        assert received["api_keys"]["corp"] == CORP_CANARY
        log = (home / "daemon.log").read_text()
        assert CANARY not in log and CORP_CANARY not in log
    finally:
        await process.stop(home)


async def test_stop_without_a_daemon_is_one_clear_line(home: Path) -> None:
    with pytest.raises(DaemonError) as error:
        await process.stop(home)
    assert str(error.value) == f"no daemon is running for RECURSA_HOME {home.resolve()}"
    assert await process.status(home) is None


async def test_a_corrupt_state_file_breaks_neither_status_nor_start(
    home: Path, env: dict[str, str]
) -> None:
    paths = DaemonPaths.for_home(home)
    home.mkdir(mode=0o700, parents=True)
    paths.state.write_text('{"pid": 12')  # torn
    paths.socket.write_text("not a socket")  # and something in the socket's place
    assert await process.status(home) is None

    paths.state.write_text('{"pid": 12')
    state = await process.start(home, env=env, host_factory=FAKE)
    assert read_state(paths) == state
    paths.state.write_bytes(b"\xff\x00garbage")  # corrupted while it runs
    found = await process.status(home)
    assert found is not None and found.pid == state.pid
    assert await process.stop(home) == state.pid


async def test_a_daemon_that_fails_to_start_reports_its_last_log_line(
    home: Path, env: dict[str, str]
) -> None:
    with pytest.raises(DaemonError) as error:
        await process.start(home, env=env, host_factory="fake_host:open_failing_host")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("the daemon exited during start (status 3): ")
    assert "no model weights here" in message and "daemon.log" in message
    assert await process.status(home) is None


async def test_concurrent_starters_share_one_daemon(home: Path, env: dict[str, str]) -> None:
    states = await asyncio.gather(
        *(process.start(home, env=env, host_factory=FAKE, reuse=True) for _ in range(3))
    )
    assert len({s.pid for s in states}) == 1
    # The other spawned daemons found the lock taken and exit on their own.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while (live := live_daemons()) != [states[0].pid]:
        assert loop.time() < deadline, f"daemons still running: {live}"
        await asyncio.sleep(0.02)
    assert await process.stop(home) == states[0].pid


def live_daemons() -> list[int]:
    pids = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE and "recursa.daemon" in child.cmdline():
                pids.append(child.pid)
    return pids

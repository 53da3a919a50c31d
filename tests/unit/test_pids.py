"""Other processes by pid (recursa.kernel.pids), on real child processes: a
running one is alive with its command line, a zombie is dead with none, and an
entry that cannot be read counts as alive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from uuid import uuid4

import psutil
import pytest

from recursa.kernel import pids

WAITS_FOR_STDIN = "import sys; sys.stdin.read()"


@pytest.fixture
def child() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A Python child that runs until its stdin closes, with a unique marker argument."""
    marker = f"marker-{uuid4().hex}"
    with subprocess.Popen(
        [sys.executable, "-c", WAITS_FOR_STDIN, marker], stdin=subprocess.PIPE
    ) as proc:
        yield proc, marker
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()


def _make_zombie(proc: subprocess.Popen[bytes]) -> None:
    """Let ``proc`` exit and wait for it without reaping it (WNOWAIT)."""
    assert proc.stdin is not None
    proc.stdin.close()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def test_a_running_child_is_alive_with_its_command_line(
    child: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, marker = child
    assert pids.is_alive(proc.pid)
    args = pids.command_line(proc.pid)
    assert args is not None and args[-2:] == [WAITS_FOR_STDIN, marker]
    assert dict(pids.command_lines())[proc.pid][-1] == marker


@pytest.mark.skipif(not hasattr(os, "WNOWAIT"), reason="needs waitid(WNOWAIT) to keep a zombie")
def test_a_zombie_counts_as_dead_without_a_command_line(
    child: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, _ = child
    _make_zombie(proc)
    assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE  # the premise
    assert not pids.is_alive(proc.pid)
    assert pids.command_line(proc.pid) is None
    assert proc.pid not in dict(pids.command_lines())
    assert proc.wait() == 0
    assert not pids.is_alive(proc.pid)


def test_this_process_is_alive_but_left_out_of_the_scan() -> None:
    assert pids.is_alive(os.getpid())
    assert os.getpid() not in dict(pids.command_lines())


@pytest.mark.parametrize("pid", [0, -1])
def test_no_process_has_a_pid_below_one(pid: int) -> None:
    assert not pids.is_alive(pid)
    assert pids.command_line(pid) is None


def test_an_unreadable_entry_counts_as_alive_but_shows_no_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Tests run as root here, where every entry is readable: the refusal a
    # hardened /proc (or another user's process on macOS) gives is simulated.
    class Refused:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def status(self) -> str:
            raise psutil.AccessDenied(self.pid)

        def cmdline(self) -> list[str]:
            raise psutil.AccessDenied(self.pid)

    refusing = SimpleNamespace(
        Process=Refused,
        Error=psutil.Error,
        NoSuchProcess=psutil.NoSuchProcess,
        AccessDenied=psutil.AccessDenied,
    )
    monkeypatch.setattr(pids, "psutil", refusing)
    assert pids.is_alive(4242)
    assert pids.command_line(4242) is None

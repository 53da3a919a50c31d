"""Helpers for tests that run a real daemon: start it against the loopback fake
model server, run the real CLI, and make sure no process outlives the test.

Kernels are started to survive the daemon (so a crashed daemon can reattach),
which also means a test that kills a daemon must kill its kernels itself:
:func:`kill_everything` does, using the store's record of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from recursa.daemon import process
from recursa.daemon.paths import DaemonPaths, read_state
from recursa.testing import FakeModelServer
from recursa.testing.processes import home_processes, kill_all


def daemon_env(home: Path, server: FakeModelServer) -> dict[str, str]:
    return {
        **os.environ,
        "RECURSA_HOME": str(home),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "x",
    }


def recursa(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recursa", *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(args: Sequence[str], env: Mapping[str, str], cwd: Path) -> str:
    """Run the CLI; it must exit 0. Its stdout."""
    result = recursa(args, env, cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def fails(args: Sequence[str], env: Mapping[str, str], cwd: Path, code: int) -> str:
    """The one line a failing command prints, checked: exit ``code``, no traceback."""
    result = recursa(args, env, cwd)
    assert result.returncode == code, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("recursa: ")
    return line


def daemon_pid(home: Path) -> int:
    state = read_state(DaemonPaths.for_home(home))
    assert state is not None, "no daemon state file"
    return state.pid


def kernel_pids(home: Path) -> list[int]:
    """The kernels the store remembers (read-only; the daemon may be writing)."""
    db = home / "recursa.db"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            # A gateway kernel is recorded with pid 0: it is no process of this host.
            return [int(row[0]) for row in conn.execute("SELECT pid FROM kernels WHERE pid > 0")]
        except sqlite3.OperationalError:
            return []


def kill_daemon(home: Path) -> int:
    """SIGKILL the daemon and wait until it is gone; its kernels live on."""
    pid = daemon_pid(home)
    proc = psutil.Process(pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    return pid


def kill_everything(home: Path) -> None:
    """Stop the daemon if one runs, then kill every kernel it ever recorded and
    any other process whose command line names the home (a killed daemon's
    spares, which no store records)."""
    try:
        asyncio.run(process.stop(home, force=True, timeout=20))
    except Exception:
        state = read_state(DaemonPaths.for_home(home))
        if state is not None and psutil.pid_exists(state.pid):
            psutil.Process(state.pid).kill()
    victims = [psutil.Process(pid) for pid in kernel_pids(home) if psutil.pid_exists(pid)]
    victims += [p for p in home_processes(home) if p.pid not in {v.pid for v in victims}]
    kill_all(victims)


def agents(env: Mapping[str, str], cwd: Path) -> list[dict[str, object]]:
    result = recursa(["agents", "--json"], env, cwd)
    assert result.returncode == 0, result.stderr
    listed: list[dict[str, object]] = json.loads(result.stdout)
    return listed


def unanswered_calls(messages: list[dict[str, Any]]) -> list[str]:
    """OpenAI's rule, checked on a request the fake server received: an
    assistant message's tool calls are answered, each by a tool message,
    right after it and before anything else."""
    problems = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        wanted = {call["id"] for call in message["tool_calls"]}
        follow = index + 1
        while follow < len(messages) and messages[follow]["role"] == "tool":
            wanted.discard(messages[follow]["tool_call_id"])
            follow += 1
        if wanted:
            problems.append(f"message {index}: tool calls without a result: {sorted(wanted)}")
    return problems

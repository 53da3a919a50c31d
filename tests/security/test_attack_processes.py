"""Attacks that outlive their session (issue 11, high): processes a cell
detaches from its kernel, and the kernel's token after ``stop``. A real
daemon, real kernels, a scripted model.

The detached processes are found from outside by a unique command line, so
the test does not depend on which PID namespace the kernel sees; any that
survive are killed by the test (by pid) before it ends."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from attack_kit import (
    attack,
    cli_json,
    events,
    poll,
    processes_running,
    python,
    reply_then,
    report,
    start,
    toolkit,
)

from daemon_kit import recursa
from recursa.testing import FakeModelServer

GONE_WITHIN = 2.0
"""The acceptance bound: seconds from ``stop``'s return until every process is gone."""


@pytest.fixture
def marks() -> Iterator[tuple[str, str]]:
    """Two unique ``sleep`` arguments (one per escape); survivors are killed at the end."""
    tag = uuid.uuid4().int % 10**9
    pair = (f"86400.{tag:09d}1", f"86400.{tag:09d}2")
    yield pair
    survivors = [p for mark in pair for p in processes_running("sleep", mark)]
    for proc in survivors:
        proc.kill()
    psutil.wait_procs(survivors, timeout=10)


def _escape(marks: tuple[str, str]) -> str:
    """A cell that starts one sleep in a new session and one by a double fork."""
    new_session, double_fork = marks
    return f"""
import os, subprocess
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.Popen(["sleep", {new_session!r}], start_new_session=True, **quiet)
child = os.fork()
if child == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", {double_fork!r}])
    finally:
        os._exit(0)
os.waitpid(child, 0)
print("escaped")
"""


def _escaped(marks: tuple[str, str]) -> list[psutil.Process]:
    return [p for mark in marks for p in processes_running("sleep", mark)]


def _escape_then(
    server: FakeModelServer,
    env: dict[str, str],
    tmp_path: Path,
    marks: tuple[str, str],
    command: Callable[[str], list[str]],
) -> None:
    """A session's cell escapes twice; then ``command(session)`` runs, and both
    escapees must be gone within :data:`GONE_WITHIN` of its return."""
    reply_then(server, python(_escape(marks)))
    session = start(env, tmp_path, "detach something")
    assert poll(lambda: len(_escaped(marks)) == 2, 30), "the cell's processes never started"
    done = recursa(command(session), env, tmp_path)
    assert done.returncode == 0, done.stderr
    gone = poll(lambda: not _escaped(marks), GONE_WITHIN)
    survivors = [" ".join(p.cmdline()) for p in _escaped(marks)]
    assert gone, f"alive {GONE_WITHIN} s after {' '.join(command(session))}: {survivors}"


def test_processes_a_cell_detaches_die_with_stop(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path, marks: tuple[str, str]
) -> None:
    _escape_then(server, env, tmp_path, marks, lambda session: ["stop", session])


def test_processes_a_cell_detaches_die_with_shutdown_force(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path, marks: tuple[str, str]
) -> None:
    _escape_then(server, env, tmp_path, marks, lambda _session: ["shutdown", "--force"])


def test_processes_a_cell_detaches_die_when_its_kernel_restarts(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path, marks: tuple[str, str]
) -> None:
    """The cell after the escape kills its own kernel; the kernel is restarted
    for the session, and the escapees are gone with the old one."""
    # os._exit, not SIGKILL: a sandboxed kernel is its PID namespace's init,
    # which ignores a SIGKILL sent from inside.
    reply_then(server, python(_escape(marks)), python("import os\nos._exit(1)"))
    session = start(env, tmp_path, "detach, then crash")
    restarted = [e for e in events(env, tmp_path, session) if e["type"] == "kernel_status"]
    assert "restarted" in [e["state"] for e in restarted], restarted
    gone = poll(lambda: not _escaped(marks), GONE_WITHIN)
    survivors = [" ".join(p.cmdline()) for p in _escaped(marks)]
    assert gone, f"alive {GONE_WITHIN} s after the kernel restarted: {survivors}"


TOKEN = """
from recursa.api.client import configured
report["socket"], report["token"] = configured()
save()
print("kept")
"""


def test_a_stopped_sessions_token_is_dead_at_once(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    """A leftover of the kernel (here the test itself, holding the kernel's token
    and socket, the strongest leftover there is) right after ``stop``: it cannot
    spawn a sub-agent, message anyone or schedule a wake-up; the session stays
    stopped and no model call is made. (Kernels given a socket and a token:
    ``[kernel] api = "socket"``; by default a kernel holds neither.)"""
    home = Path(env["RECURSA_HOME"])
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "config.toml").write_text('[kernel]\napi = "socket"\n')
    reply_then(server, attack(TOKEN))
    session = start(env, tmp_path, "keep your token")
    kept = report(tmp_path)
    stopped = recursa(["stop", session], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    calls = len(server.requests)

    call = toolkit()["call"]
    attempts = {
        "spawn": ("POST", "/v1/kernel/rlm", {"task": "wake the parent", "name": "late"}),
        "message": ("POST", "/v1/kernel/messages", {"text": "wake up", "to": "all"}),
        "heartbeat": ("POST", "/v1/kernel/heartbeats", {"spec": "in 1m", "prompt": "wake up"}),
        "list": ("GET", "/v1/kernel/subagents", None),
    }
    answers = {name: call(kept["socket"], kept["token"], *how) for name, how in attempts.items()}
    accepted = {k: v for k, v in answers.items() if isinstance(v, int) and 200 <= v < 300}
    assert accepted == {}, f"the stopped session's token still works: {answers}"

    listed = cli_json(env, tmp_path, "agents")
    assert [(s["id"], s["status"]) for s in listed] == [(session, "inactive")]
    assert cli_json(env, tmp_path, "schedule", "list") == []
    assert len(server.requests) == calls, "a model call was made after stop"

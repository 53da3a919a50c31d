"""Hostile text at the command line's edges, on a real daemon with the loopback
fake model server: a model's answer full of terminal escapes (printed to a real
pty), credentials in the provider's base URL, and references and names that no
session can have. Only the model is scripted."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tty
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from daemon_kit import fails, recursa
from recursa.testing import FakeModelServer, Fault, Reply

HOSTILE_ANSWER = (
    "before\x1b]52;c;cHduZWQ=\x07"  # OSC 52: write the clipboard
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]0;owned title\x1b\\"  # set the window title
    "\x9b31m"  # a C1 CSI
    "\x1bPq#0;2;0;0;0\x1b\\"  # a DCS string (sixel)
    "fake prompt$ \rafter\tcol\nline two\r\n\x1bc"  # bare CR overwrite, then a full reset
)
SAFE_ANSWER = "beforefake prompt$ after\tcol\nline two"


def run_on_a_pty(args: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, bytes]:
    """Run the CLI with its stdout on a real terminal (raw, so the bytes read are
    the bytes written) and stderr on a pipe; its exit code and what the terminal got."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "recursa", *args],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=subprocess.PIPE,
        )
        os.close(slave)
        slave = -1
        received = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            received += chunk
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode(errors="replace")
        return proc.returncode, bytes(received)
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)


def test_the_answer_on_a_terminal_carries_no_control_sequence(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text=HOSTILE_ANSWER))
    code, shown = run_on_a_pty(["run", "--model", "openai/m", "say it"], env, tmp_path)
    assert code == 0
    text = shown.decode("utf-8")
    assert text == SAFE_ANSWER + "\n"
    assert not any(ch in text for ch in "\x1b\x07\r\x9b")


def test_the_answer_in_a_pipe_is_stripped_too_and_json_keeps_it_as_data(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text=HOSTILE_ANSWER), Reply(text=HOSTILE_ANSWER))
    plain = recursa(["run", "--model", "openai/m", "say it"], env, tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == SAFE_ANSWER + "\n"
    as_json = recursa(["run", "--json", "--model", "openai/m", "say it"], env, tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout.splitlines()[-1])
    assert result["answer"] == HOSTILE_ANSWER


def test_credentials_in_the_base_url_reach_no_log_event_or_message(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    key = "hunter2-url-secret"
    base = server.openai_base_url.replace("http://", f"http://alice:{key}@")
    echoed = f"upstream {base}/chat/completions refused the call"
    server.push(Fault("server_error", message=echoed), Reply(text="fine"))
    env = {**env, "OPENAI_BASE_URL": base}
    result = recursa(["run", "--model", "openai/m", "hello"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "fine"
    # The provider was reached through that URL (the user info travels as basic auth).
    assert len(server.requests) == 2
    models = recursa(["models"], env, tmp_path)
    assert models.returncode == 0, models.stderr
    log = (home / "daemon.log").read_text()
    # The failed attempt is logged (its message names the URL), without the key;
    # the requests themselves are not (httpx's INFO lines are off).
    assert "[redacted]@127.0.0.1" in log and "server_error" in log, log
    assert "HTTP Request" not in log, log
    for where, text in {
        "daemon.log": log,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "models": models.stdout + models.stderr,
        "store": (home / "recursa.db").read_bytes().decode("utf-8", "replace"),
    }.items():
        assert key not in text, where
    assert "retrying (server_error" in result.stderr  # the echoed message was shown, redacted
    assert "upstream http://[redacted]@127.0.0.1" in result.stderr


REFERENCE_COMMANDS = [
    ["logs"],
    ["attach"],
    ["stop"],
    ["send", "{ref}", "hello"],
    ["usage"],
    ["refine"],
    ["goal", "status"],
    ["goal", "set", "{ref}", "objective"],
    ["goal", "pause"],
    ["schedule", "add", "{ref}", "every 10m", "--", "ping"],
    ["schedule", "list"],
    ["harness", "show"],
    ["harness", "show", "--prompt"],
    ["harness", "diff"],
    ["harness", "approve"],
]
BAD_REFERENCES = {
    "not UTF-8": ("\udcff\udcfe", "UTF-8"),  # the bytes ff fe, as Python decodes them
    "too long": ("a" * 100_000, "at most 500 characters"),
}


@pytest.mark.parametrize("words", REFERENCE_COMMANDS, ids=" ".join)
def test_a_reference_that_is_not_utf8_or_too_long_is_one_line_and_exit_2(
    words: list[str], env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    for ref, says in BAD_REFERENCES.values():
        args = [w.replace("{ref}", ref) for w in words]
        if "{ref}" not in " ".join(words):
            args.append(ref)
        line = fails(args, env, tmp_path, 2)
        assert says in line and "internal error" not in line
        assert len(line) < 300
    assert not (home / "daemon.token").exists()  # refused before any daemon was needed


def test_run_refuses_a_name_that_no_session_can_have(
    env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    for name in ("../../etc", "..", "a b", "x" * 101, "é"):
        line = fails(["run", "--name", name, "--detach", "task"], env, tmp_path, 2)
        assert line.startswith("recursa: --name: a session name")
    with contextlib.suppress(FileNotFoundError):
        assert "sessions" not in os.listdir(home)

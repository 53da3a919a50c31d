"""The CLI's quick path (``recursa agents``, ``recursa usage``) at its edges:
Ctrl-C while the daemon it reaches does not answer ends the call as any
command's Ctrl-C does (exit 130, no traceback); a reader that closed the pipe
ends it quietly (exit 1); an option with no command is Typer's usage error.
(tests/integration/test_cli_light.py shows its answers and fallbacks
against a real daemon.)

The "daemon" here is a unix socket in a home laid out as a running daemon
leaves it, which accepts and answers (or not) as the test says; the test
waits on the connection and the request arriving, never on a clock.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from recursa import __version__
from recursa.daemon.paths import (
    DaemonPaths,
    DaemonState,
    ensure_token,
    prepare_home,
    write_state,
)
from recursa.protocol.common import PROTOCOL_VERSION

NO_SUCH_PID = (1 << 22) + 1
"""Above Linux's largest pid: the state file names no process (the suite's
check for a daemon left running then has nothing to kill)."""


SESSION = {
    "id": "s-quick",
    "name": None,
    "parent_id": None,
    "status": "idle",
    "model": "openai/m",
    "cwd": "/tmp",
    "created_at": 1.0,
    "last_activity": 2.0,
    "usage": {
        "calls": 1,
        "input_tokens": 10,
        "output_tokens": 2,
        "cached_tokens": 0,
        "cost": 0.0,
        "unknown_cost_calls": 0,
    },
    "last_answer": None,
    "depth": 0,
    "pending": 0,
    "cell_started_at": None,
}


def daemon_socket(home: Path) -> socket.socket:
    """A listening socket where the home's daemon would be, and its files."""
    paths = DaemonPaths.for_home(home)
    assert paths.socket.parent == home  # the quick path's own layout
    prepare_home(paths)
    ensure_token(paths)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(paths.socket))
    listener.listen(1)
    listener.settimeout(60)
    state = DaemonState(
        NO_SUCH_PID, os.fspath(paths.socket), time.time(), __version__, PROTOCOL_VERSION
    )
    write_state(paths, state)
    return listener


def cli(home: Path, *args: str) -> subprocess.Popen[str]:
    """``recursa ARGS`` with its stdout buffered, as on a pipe it is by default."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.Popen(
        [sys.executable, "-m", "recursa", *args],
        env={**env, "RECURSA_HOME": os.fspath(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_request(connection: socket.socket) -> bytes:
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = connection.recv(4096)
        assert chunk, request
        request += chunk
    return request


def test_ctrl_c_while_the_daemon_is_silent_exits_130_without_a_traceback(home: Path) -> None:
    with daemon_socket(home) as listener:
        call = cli(home, "agents")
        try:
            connection, _ = listener.accept()
            with connection:
                assert read_request(connection).startswith(b"GET /v1/sessions ")
                call.send_signal(signal.SIGINT)  # it waits for the reply now
                out, err = call.communicate(timeout=60)
        finally:
            if call.poll() is None:
                call.kill()
                call.communicate()
            DaemonPaths.for_home(home).state.unlink()
    assert (call.returncode, out) == (130, ""), err
    assert "Traceback" not in err


def test_a_reader_that_closed_the_pipe_ends_the_call_quietly(home: Path) -> None:
    body = json.dumps([SESSION]).encode()
    with daemon_socket(home) as listener:
        call = cli(home, "agents")
        try:
            assert call.stdout is not None
            call.stdout.close()  # as `recursa agents | head -0`
            connection, _ = listener.accept()
            with connection:
                read_request(connection)
                head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n\r\n"
                connection.sendall(head.encode() + body)
                err = call.stderr.read() if call.stderr is not None else ""
                call.wait(timeout=60)
        finally:
            if call.poll() is None:
                call.kill()
                call.wait()
            if call.stderr is not None:
                call.stderr.close()
            DaemonPaths.for_home(home).state.unlink()
    assert call.returncode == 1 and err == "", err


def test_an_option_without_a_command_is_typers_usage_error(home: Path) -> None:
    call = cli(home, "--json")
    out, err = call.communicate(timeout=60)
    assert call.returncode == 2 and out == "" and "No such option" in err, err
    assert "Traceback" not in err

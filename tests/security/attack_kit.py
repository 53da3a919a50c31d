"""What the attack tests share: the attacker's toolkit a scripted cell runs
(raw HTTP over a unix socket, with only the standard library, as any model
could write it), and the steps that drive a real daemon through the CLI.

A cell reports what it achieved by writing :data:`REPORT` (JSON) into its
working directory, the session's workspace: a file survives a turn that the
attack cuts short, and needs no parsing of model requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from daemon_kit import recursa
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

REPORT = "attack-report.json"
DEADLINE = 60.0
"""Bound on any wait for a state the test caused (polled, never slept)."""

TOOLKIT = r'''
import glob, http.client, json, os, socket, sys
from pathlib import Path

class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=15)
        self._unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(15)
        sock.connect(self._unix_path)
        self.sock = sock

def call(sock, token, method, path, body=None):
    """The HTTP status of one request, or the error's name when none came back."""
    try:
        conn = _UnixHTTP(str(sock))
        headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        reply = conn.getresponse()
        reply.read()
        conn.close()
        return reply.status
    except Exception as exc:
        return type(exc).__name__

def readable(path):
    try:
        with open(path, "rb") as handle:
            handle.read(1)
        return True
    except OSError:
        return False

def own_api():
    """This kernel's API socket and token (held in its process, not its
    environment), or empty strings where it has none."""
    from recursa.api.client import configured
    from recursa.errors import RecursaError

    try:
        return configured()
    except RecursaError:
        return "", ""

def credentials(home):
    """Every token this kernel can lay its hands on, by where it was found."""
    socket, token = own_api()
    found = {"kernel token": token}
    api = Path(socket or "/nonexistent")
    for place in (api.parent, api.parent.parent, Path(home)):
        try:
            found[str(place / "daemon.token")] = (place / "daemon.token").read_text().strip()
        except OSError:
            pass
    return found

def sockets(home):
    """Every daemon socket this kernel can name."""
    return sorted({own_api()[0], str(Path(home) / "daemon.sock")} - {""})

def own_connection_file():
    return os.path.realpath(sys.argv[sys.argv.index("-f") + 1]) if "-f" in sys.argv else ""

report = {}

def save():
    Path("attack-report.json").write_text(json.dumps(report))
'''
"""The attacker's toolkit, prepended to every attacking cell."""


def python(code: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": code})


def attack(code: str) -> ToolCallSpec:
    """A cell that runs ``code`` after the toolkit."""
    return python(TOOLKIT + code)


def report(workspace: Path) -> dict[str, Any]:
    """What the attacking cell wrote; it must have written something."""
    path = workspace / REPORT
    assert path.exists(), "the attacking cell wrote no report"
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def toolkit() -> dict[str, Any]:
    """The toolkit's functions, for the test process itself to act as a leftover
    process of a kernel."""
    namespace: dict[str, Any] = {}
    exec(TOOLKIT, namespace)
    return namespace


def start(env: Mapping[str, str], cwd: Path, task: str) -> str:
    """A detached root session that has finished its first turn. Its id."""
    started = recursa(["run", "--detach", "--model", "openai/m", task], env, cwd)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip().splitlines()[-1]
    assert session.startswith("s-"), started.stdout
    wait_idle(env, cwd, session)
    return session


def send(env: Mapping[str, str], cwd: Path, session: str, text: str, *, check: bool = True) -> None:
    """Message ``session`` and wait until the turn it starts is over. Without
    ``check`` the wait may fail (an attack that worked can take the daemon down);
    the test then finds out what a person would see."""
    sent = recursa(["send", session, text], env, cwd)
    assert sent.returncode == 0, sent.stderr
    wait_idle(env, cwd, session, check=check)


def wait_idle(env: Mapping[str, str], cwd: Path, session: str, *, check: bool = True) -> None:
    """Block (on the event stream, not a sleep) until the session is idle."""
    done = recursa(["attach", session, "--until-idle", "--after", "0"], env, cwd, timeout=120)
    assert done.returncode == 0 or not check, done.stderr


def wait_kernel_ready(env: Mapping[str, str], cwd: Path, session: str) -> None:
    """Block (on the event stream, not a sleep) until the session's kernel has
    said it is ready: a session starts its kernel in the background, and that
    event may come after its first turn is over."""
    argv = [sys.executable, "-m", "recursa", "attach", session, "--after", "0", "--json"]
    with subprocess.Popen(argv, env=dict(env), cwd=cwd, stdout=subprocess.PIPE, text=True) as watch:
        timer = threading.Timer(120, watch.kill)  # a bound, should the event never come
        timer.start()
        try:
            assert watch.stdout is not None
            for line in watch.stdout:
                event = json.loads(line)
                if event.get("type") == "kernel_status" and event.get("state") == "ready":
                    return
            raise AssertionError(f"{session}'s stream ended before its kernel was ready")
        finally:
            timer.cancel()
            watch.kill()


def events(env: Mapping[str, str], cwd: Path, session: str) -> list[dict[str, Any]]:
    logs = recursa(["logs", session, "--json"], env, cwd)
    assert logs.returncode == 0, logs.stderr
    return [json.loads(line) for line in logs.stdout.splitlines()]


def cli_json(env: Mapping[str, str], cwd: Path, *args: str) -> Any:
    result = recursa([*args, "--json"], env, cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def daemon_running(env: Mapping[str, str], cwd: Path) -> bool:
    """Whether a daemon answers (``daemon status`` exits 1 when none runs)."""
    status = recursa(["daemon", "status", "--json"], env, cwd)
    assert status.returncode in (0, 1), status.stderr
    return status.returncode == 0


def one_line_failure(result: Any, code: int | None = None) -> str:
    """The single line a refused command prints: non-zero exit (``code`` when
    given), one line on stderr, no traceback and no 'internal error'."""
    assert result.returncode != 0, (result.stdout, result.stderr)
    if code is not None:
        assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "internal error" not in lines[0].lower(), lines[0]
    assert "Traceback" not in result.stderr
    line: str = lines[0]
    return line


def poll(condition: Callable[[], bool], timeout: float) -> bool:
    """Whether ``condition()`` holds within ``timeout`` seconds (checked often)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def processes_running(*argv_tail: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose command line ends with ``argv_tail``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = proc.info["cmdline"] or []
        if tuple(cmdline[-len(argv_tail) :]) == argv_tail:
            found.append(proc)
    return found


def reply_then(server: FakeModelServer, *cells: ToolCallSpec, answer: str = "done") -> None:
    """Script one turn: each cell in its own step, then the answer."""
    server.push(*(Reply(tool_calls=[cell]) for cell in cells), Reply(text=answer))

"""The daemon process against its own user's other processes, and its home.

- It is non-dumpable: a process of the same user (a kernel, or whatever a
  kernel started) cannot read its ``/proc/PID/environ`` or memory. Root
  reads every process whatever the flag, so when the tests run as root the
  daemon, the prober and the control run with every capability dropped from
  their bounding set before they exec: same-uid processes without privileges.
- A world-writable ``RECURSA_HOME`` is refused with one line (exit 2), and
  left as it was.
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon_kit import fails
from recursa.daemon.paths import DaemonPaths, read_state

TESTS = Path(__file__).resolve().parents[1]
WAIT = 20.0
PR_CAPBSET_DROP = 24
LAST_CAP = 63

PROBE = """
import sys
try:
    with open(f"/proc/{sys.argv[1]}/environ", "rb") as f:
        f.read()
except PermissionError:
    print("refused")
else:
    print("read")
"""


def _unprivileged() -> None:
    """In a child before exec: no capability at all after the exec (a no-op
    for a user without any)."""
    if os.getuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last one the kernel knows


def _probe(pid: int) -> str:
    """What a same-user process without privileges gets reading ``pid``'s environ."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(pid)],
        preexec_fn=_unprivileged,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=True,
    )
    return result.stdout.strip()


def test_the_daemon_is_not_dumpable_by_its_own_user(home: Path) -> None:
    env = {**os.environ, "RECURSA_HOME": str(home), "PYTHONPATH": str(TESTS)}
    log_path = home.parent / "daemon.log"
    with log_path.open("w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "recursa.daemon", "--home", str(home),
             "--host-factory", "fake_host:open_fake_host"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=_unprivileged,
        )  # fmt: skip
    # The control: an ordinary process of the same user is readable by the prober.
    plain = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=env,
        preexec_fn=_unprivileged,
    )
    try:
        deadline = time.monotonic() + WAIT
        paths = DaemonPaths.for_home(home)
        while (state := read_state(paths)) is None or state.pid != daemon.pid:
            assert daemon.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)  # polling the daemon's state file, with a deadline
        assert _probe(plain.pid) == "read"
        assert _probe(daemon.pid) == "refused"
        assert "non-dumpable" not in log_path.read_text()
    finally:
        plain.kill()
        daemon.terminate()
        daemon.wait(WAIT)
        plain.wait(WAIT)


@pytest.mark.parametrize("mode", [0o1777, 0o777])
def test_a_world_writable_home_is_refused_with_one_line(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    env = {**os.environ, "RECURSA_HOME": str(shared)}
    for command in (["daemon", "start"], ["run", "--no-daemon", "--model", "faux/x", "hi"]):
        line = fails(command, env, tmp_path, 2)
        assert "writable by every user" in line and str(shared) in line
    assert stat.S_IMODE(os.stat(shared).st_mode) == mode
    assert list(shared.iterdir()) == []

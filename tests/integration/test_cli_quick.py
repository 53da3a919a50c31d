"""The CLI's quick path (``recursa agents``, ``recursa usage``) when the daemon
it reaches does not answer: Ctrl-C ends the call as any command's Ctrl-C
does, exit 130 and no traceback. (tests/integration/test_cli_light.py shows
its answers and fallbacks against a real daemon.)

The "daemon" here is a unix socket that accepts and never replies, in a home
laid out as a running daemon leaves it; the test waits on the connection and
the request arriving, never on a clock.
"""

from __future__ import annotations

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


def test_ctrl_c_while_the_daemon_is_silent_exits_130_without_a_traceback(home: Path) -> None:
    paths = DaemonPaths.for_home(home)
    assert paths.socket.parent == home  # the quick path's own layout
    prepare_home(paths)
    ensure_token(paths)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(os.fspath(paths.socket))
        listener.listen(1)
        listener.settimeout(60)
        state = DaemonState(
            NO_SUCH_PID, os.fspath(paths.socket), time.time(), __version__, PROTOCOL_VERSION
        )
        write_state(paths, state)
        call = subprocess.Popen(
            [sys.executable, "-m", "recursa", "agents"],
            env={**os.environ, "RECURSA_HOME": os.fspath(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            connection, _ = listener.accept()
            with connection:
                assert connection.recv(4096).startswith(b"GET /v1/sessions ")
                call.send_signal(signal.SIGINT)  # it waits for the reply now
                out, err = call.communicate(timeout=60)
        finally:
            if call.poll() is None:
                call.kill()
                call.communicate()
            paths.state.unlink()
    assert (call.returncode, out) == (130, ""), err
    assert "Traceback" not in err

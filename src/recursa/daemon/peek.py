"""One read from the running daemon, synchronous and on the standard library
alone: for CLI calls that only read (:mod:`recursa.cli.quick`), which would
otherwise spend most of their time importing :mod:`recursa.daemon.client`'s
asyncio, pydantic and transport.

It never starts a daemon, resends, or explains a failure: any answer but a
200 from a daemon of this version is None, and the caller's full path (the
real client) takes over, with its recoveries and its one-line errors. So is a
home the full path would refuse (one others may write to, where a planted
state file could point the token at their socket), or a socket not at its
usual place in the home.
"""

from __future__ import annotations

import http.client
import os
import socket

from recursa import __version__
from recursa.daemon.harden import harden_process
from recursa.daemon.paths import DaemonPaths, check_home, read_state, read_token
from recursa.environ import home_dir
from recursa.errors import RecursaError
from recursa.protocol.common import API_PREFIX, PROTOCOL_VERSION

TIMEOUT = 5.0
"""Seconds to connect and for each read; past them the caller's full path takes over."""


def get(path: str) -> bytes | None:
    """The body of the daemon's 200 reply to ``GET path`` (after the API's
    prefix), or None. The process is hardened first, as for any command: it
    reads the daemon's token."""
    harden_process()
    paths = DaemonPaths.for_home(home_dir())
    if paths.socket.parent != paths.home:
        return None
    try:
        check_home(paths.home)
        token = read_token(paths)
    except RecursaError:
        return None
    state = read_state(paths)
    if (
        token is None
        or state is None
        or (state.protocol, state.version) != (PROTOCOL_VERSION, __version__)
        or state.socket != os.fspath(paths.socket)
    ):
        return None
    connection = _UnixConnection(state.socket)
    try:
        connection.request("GET", API_PREFIX + path, headers={"authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read()
    except (
        OSError,
        ValueError,
        http.client.HTTPException,
    ):  # ValueError: a token unfit for a header
        return None
    finally:
        connection.close()
    return body if response.status == 200 else None


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 to the daemon's unix socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=TIMEOUT)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


__all__ = ["TIMEOUT", "get"]

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

The request is HTTP/1.0 over a new connection: the daemon's reply is then
framed by the connection's end (and checked against its ``content-length``),
which takes no HTTP library to read (``http.client`` imports the email
package, a quarter of a quick call's time).
"""

from __future__ import annotations

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
MAX_HEAD_BYTES = 64 * 1024
"""The most a reply's status line and headers may take."""
READ_SIZE = 64 * 1024


def get(path: str, *, limit: int | None = None) -> bytes | None:
    """The body of the daemon's 200 reply to ``GET path`` (after the API's
    prefix), or None; None too for a body longer than ``limit`` bytes. The
    process is hardened first, as for any command: it reads the daemon's
    token."""
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
    if not (token.isascii() and token.isprintable()):
        return None  # a token unfit for a header
    target = API_PREFIX + path
    request = f"GET {target} HTTP/1.0\r\nhost: recursa\r\nauthorization: Bearer {token}\r\n\r\n"
    try:
        return _exchange(state.socket, request.encode("ascii"), limit)
    except (OSError, UnicodeError):
        return None


def _exchange(path: str, request: bytes, limit: int | None) -> bytes | None:
    """The body of the daemon's answer to ``request`` if it is a 200 of at
    most ``limit`` bytes, framed by its ``content-length`` or else by the
    connection's end; else None."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(path)
        sock.sendall(request)
        received = b""
        while b"\r\n\r\n" not in received:
            if len(received) > MAX_HEAD_BYTES or not (piece := sock.recv(READ_SIZE)):
                return None
            received += piece
        head, _, start = received.partition(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            return None
        status, *lines = head.decode("latin-1").split("\r\n")
        if status.split(" ", 2)[:2] not in (["HTTP/1.0", "200"], ["HTTP/1.1", "200"]):
            return None
        length = None
        for line in lines:
            name, colon, value = line.partition(":")
            name = name.strip().lower()
            if not colon or name == "transfer-encoding":
                return None  # a chunked body is not this version's daemon's answer
            if name == "content-length":
                digits = value.strip()
                if not (digits.isascii() and digits.isdigit()):
                    return None
                length = int(digits)
        most = length if length is not None else (limit if limit is not None else 1 << 62)
        if limit is not None and most > limit:
            return None
        pieces, size = [start], len(start)
        while size < most and (piece := sock.recv(min(READ_SIZE, most + 1 - size))):
            pieces.append(piece)
            size += len(piece)
    if (length is not None and size != length) or size > most:
        return None  # cut short, or longer than it said
    return b"".join(pieces)


__all__ = ["TIMEOUT", "get"]

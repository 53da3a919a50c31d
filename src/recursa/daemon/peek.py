"""Reads from the running daemon, synchronous and on the standard library
alone: for CLI calls that only read (:mod:`recursa.cli.quick`), which would
otherwise spend most of their time importing :mod:`recursa.daemon.client`'s
asyncio and the command line's typer.

It never starts a daemon, resends, or explains a failure: any answer but a
whole 200 from a daemon of this version is None, and the caller's full path
(the real client) takes over, with its recoveries and its one-line errors.
So is a home the full path would refuse (one others may write to, where a
planted state file could point the token at their socket), or a socket not
at its usual place in the home.

Each read is one request on a new connection (``connection: close``), its
reply taken apart with :mod:`recursa.daemon.framing`. A body framed by its
``content-length`` is read to that length. A chunked one is read to the
connection's end, and taken only if it is whole: a body that lost its last
chunk, as when the daemon stops mid-stream, is None, never a history cut
short. (``http.client`` would import the email package, a quarter of a
quick call's time.)
"""

from __future__ import annotations

import os
import socket

from recursa import __version__
from recursa.daemon.framing import (
    MAX_HEAD_BYTES,
    content_length,
    dechunk,
    is_chunked,
    parse_head,
)
from recursa.daemon.harden import harden_process
from recursa.daemon.paths import DaemonPaths, check_home, read_state, read_token
from recursa.environ import home_dir
from recursa.errors import RecursaError
from recursa.protocol.common import API_PREFIX, PROTOCOL_VERSION

TIMEOUT = 5.0
"""Seconds to connect and for each read; past them the caller's full path takes over."""
MAX_BODY_BYTES = 64 << 20
"""The most a reply without a ``limit`` may bring (a listing of sessions)."""
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
    head = f"GET {API_PREFIX}{path} HTTP/1.1\r\nhost: recursa\r\nconnection: close\r\n"
    request = f"{head}authorization: Bearer {token}\r\n\r\n".encode("ascii")
    try:
        return _exchange(state.socket, request, limit)
    except (OSError, UnicodeError, ValueError):  # ValueError: a malformed reply
        return None


def _exchange(path: str, request: bytes, limit: int | None) -> bytes | None:
    """The body of the daemon's answer to ``request`` if it is a whole 200
    of at most ``limit`` bytes, else None."""
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
        status, headers = parse_head(head)
        length = content_length(headers)
        most = MAX_BODY_BYTES if limit is None else limit
        if status != 200:
            return None
        if is_chunked(headers):  # before any length
            raw = _read(sock, start, 2 * most + 64, whole=True)  # a chunk's framing: a few bytes
            body = None if raw is None else dechunk(raw)
            return body if body is not None and len(body) <= most else None
        if length is not None:  # read to its length: the connection may stay open
            return _read(sock, start, length, whole=False) if length <= most else None
        return None  # framed by the connection's end alone: it may have been cut short


def _read(sock: socket.socket, start: bytes, most: int, *, whole: bool) -> bytes | None:
    """``start`` and what follows it on ``sock``: exactly ``most`` bytes, or
    (``whole``) everything to the connection's end if that is at most
    ``most``; else None."""
    pieces, size = [start], len(start)
    while size <= most and (whole or size < most):
        piece = sock.recv(min(READ_SIZE, most + 1 - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    if size > most or (not whole and size != most):
        return None
    return b"".join(pieces)


__all__ = ["TIMEOUT", "get"]

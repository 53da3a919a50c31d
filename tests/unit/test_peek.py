"""The quick path's one read (``recursa.daemon.peek``): the reply's framing.

A unix socket in a thread answers with the bytes each test gives and then
keeps the connection open (as a keep-alive server does) or closes it. A
200 framed by its ``content-length``, or chunked and whole, is read; any
other answer is None (the full path's to handle), never a body cut short.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recursa import __version__
from recursa.daemon import peek
from recursa.daemon.framing import MAX_HEAD_BYTES
from recursa.daemon.paths import DaemonPaths, DaemonState, ensure_token, prepare_home, write_state
from recursa.protocol.common import PROTOCOL_VERSION

REQUEST = b"GET /v1/x HTTP/1.1\r\nhost: recursa\r\nconnection: close\r\n\r\n"
Ask = Callable[..., bytes | None]


class Daemon:
    """Answers one connection with ``reply``; closes it after, unless ``hold``
    (then it stays open until the test ends)."""

    def __init__(self, path: Path, reply: bytes, *, hold: bool) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.fspath(path))
        self.listener.listen(1)
        self.reply, self.hold = reply, hold
        self.request = b""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            while b"\r\n\r\n" not in self.request:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                self.request += chunk
            try:
                connection.sendall(self.reply)
            except OSError:  # the reader stopped reading a reply too long for it
                return
            if self.hold:
                self.done.wait()

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=30)
        self.listener.close()


@pytest.fixture
def answer(tmp_path: Path) -> Iterator[Ask]:
    daemons: list[Daemon] = []

    def ask(reply: bytes, *, hold: bool = False, limit: int | None = None) -> bytes | None:
        path = tmp_path / f"d{len(daemons)}.sock"
        daemon = Daemon(path, reply, hold=hold)
        daemons.append(daemon)
        body = peek._exchange(os.fspath(path), REQUEST, limit)
        assert daemon.request == REQUEST
        return body

    yield ask
    for daemon in daemons:
        daemon.close()


def test_a_body_framed_by_its_length_is_read_without_waiting_for_the_end(answer: Ask) -> None:
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n[1, 2 ]"
    assert answer(reply, hold=True) == b"[1, 2 ]"
    assert answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", hold=True) == b""


def chunked(*pieces: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        + body
        + b"0\r\n"
        + trailer
        + b"\r\n"
    )


def test_a_chunked_body_is_read_whole_to_its_last_chunk(answer: Ask) -> None:
    lines = [b"".join(b'{"seq": %d}\n' % n for n in range(k, k + 5000)) for k in (0, 5000)]
    assert answer(chunked(*lines)) == b"".join(lines)  # several reads
    assert answer(chunked(b"a", b"bc", trailer=b"x-t: 1\r\n")) == b"abc"
    assert answer(chunked(b"abc"), limit=3) == b"abc"
    assert answer(chunked(b"abc"), limit=2) is None
    both = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
    assert answer(both + b"3\r\nabc\r\n0\r\n\r\n") == b"abc"  # the chunks frame it, not the length


@pytest.mark.parametrize(
    ("reply", "limit"),
    [
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}", None),
        (chunked(b"{}")[: -len(b"0\r\n\r\n")], None),  # the daemon stopped mid-stream
        (chunked(b"{}")[:-2], None),
        (chunked(b"{}") + b"1\r\nx\r\n", None),  # more after the end
        (chunked(b"{}") + b"\r\n", None),
        (chunked(b"{}")[:-2] + b"xyz", None),  # three stray bytes where the end goes
        (chunked(b"{}", trailer=b"x-t")[:-2], None),  # a trailer cut short
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\n\r\n{}\r\n0\r\n\r\n", None),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", None),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{}\r\n0\r\n\r\n", None),
        (b"HTTP/1.1 200 OK\r\ncontent-type: x\r\n\r\n{}", None),  # framed by the end alone
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}", None),  # cut short
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}{}", None),  # more than it said
        (b"HTTP/1.1 200 OK\r\ncontent-length: two\r\n\r\n{}", None),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n{}", None),
        (b"HTTP/1.1 200 OK\r\ncontent-length: \xb2\r\n\r\n{}", None),  # a digit, not ASCII
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n{}", None),
        (b"SSH-2.0-OpenSSH\r\n\r\n", None),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2", None),  # the head never ends
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n12345", 4),  # past the limit
    ],
)
def test_any_other_answer_is_none(answer: Ask, reply: bytes, limit: int | None) -> None:
    try:
        body = answer(reply, limit=limit)
    except ValueError:  # malformed framing: get() answers None for it (below)
        body = None
    assert body is None


def test_a_head_past_its_bound_is_none(answer: Ask) -> None:
    header = b"x-filler: " + b"a" * MAX_HEAD_BYTES + b"\r\n"
    assert answer(b"HTTP/1.1 200 OK\r\n" + header + b"content-length: 2\r\n\r\n{}") is None


def test_get_answers_none_for_a_malformed_reply_and_the_body_of_a_whole_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    paths = DaemonPaths.for_home(home)
    prepare_home(paths)
    token = ensure_token(paths)
    state = DaemonState(1 << 22, os.fspath(paths.socket), 1.0, __version__, PROTOCOL_VERSION)
    write_state(paths, state)
    monkeypatch.setenv("RECURSA_HOME", os.fspath(home))
    monkeypatch.setattr(peek, "harden_process", lambda: True)  # not this test process
    replies = [
        chunked(b"{}")[: -len(b"0\r\n\r\n")] + b"zz\r\n\r\n",  # a bad last chunk
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
    ]
    for reply, expected in zip(replies, (None, b"{}"), strict=True):
        daemon = Daemon(paths.socket, reply, hold=False)
        try:
            assert peek.get("/sessions") == expected
            assert daemon.request.startswith(b"GET /v1/sessions HTTP/1.1\r\n")
            assert f"authorization: Bearer {token}\r\n".encode() in daemon.request
        finally:
            daemon.close()
            paths.socket.unlink()

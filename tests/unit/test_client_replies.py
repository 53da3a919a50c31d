"""The daemon client's reply that does not fit its type: one line, naming
where in the reply, bounded like every error line (a path through a deep
usage tree is long). The "daemon" is a unix socket in a thread that answers
one request with the bytes the test gives."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from recursa.daemon.client import DaemonClient
from recursa.daemon.errormap import MAX_MESSAGE_CHARS
from recursa.errors import DaemonError
from recursa.protocol.plain import to_plain
from recursa.protocol.wire import Usage


def answer_once(path: Path, body: bytes) -> threading.Thread:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(path))
    listener.listen(1)

    def serve() -> None:
        with listener, listener.accept()[0] as connection:
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(4096)
            head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            connection.sendall(head.encode() + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("depth", [0, 150])
async def test_a_reply_that_does_not_fit_is_a_one_line_daemon_error(
    tmp_path: Path, depth: int
) -> None:
    usage = to_plain(Usage())
    node: dict[str, Any] = {
        "id": "s",
        "name": None,
        "own": {**usage, "calls": "many"},
        "total": usage,
        "children": [],
    }
    for _ in range(depth):
        node = {"id": "s", "name": None, "own": usage, "total": usage, "children": [node]}
    served = answer_once(tmp_path / "d.sock", json.dumps(node).encode())
    client = DaemonClient(tmp_path, socket=tmp_path / "d.sock", token="t")
    try:
        with pytest.raises(DaemonError) as error:
            await client.usage("s")
    finally:
        await client.aclose()
        served.join(timeout=30)
    message = str(error.value)
    assert message.startswith("the daemon sent a malformed reply to GET /sessions/s/usage: ")
    assert "\n" not in message and len(message) <= MAX_MESSAGE_CHARS + 100
    if depth == 0:
        assert message.endswith(": own.calls: expected a whole number, not 'many'")
    else:  # cut to an error line's length
        assert message.count("children[0].") > 10 and message.endswith("…")

"""A kernel that stops reading its control channel cannot stall the daemon:
a reply that need not wait (``send(..., block=False)``, what the kernel API's
relay sends) is refused once the socket's queue is full, where a plain send
would block the event loop for good. Real ZeroMQ sockets; the peer is a
ROUTER that never receives, as a kernel whose control thread is parked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import zmq

from recursa.errors import KernelError
from recursa.kernel.wire import Channels

pytestmark = pytest.mark.timeout(60)


async def test_a_reply_to_a_kernel_that_stopped_reading_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    context = zmq.Context()
    sockets = []
    for port, kind in ((1, zmq.ROUTER), (2, zmq.PUB), (3, zmq.ROUTER)):
        sock = context.socket(kind)
        sock.linger = 0
        sock.bind(f"ipc://{tmp_path}/k-{port}")  # jupyter_client's ipc address: IP-PORT
        sockets.append(sock)
    connection = {
        "transport": "ipc",
        "ip": str(tmp_path / "k"),
        "shell_port": 1,
        "iopub_port": 2,
        "control_port": 3,
        "stdin_port": 4,
        "hb_port": 5,
        "key": "k",
        "signature_scheme": "hmac-sha256",
    }
    channels = Channels(connection, asyncio.get_running_loop())
    try:
        body = {"comm_id": "recursa.api", "data": {"id": "x", "body": "y" * 2000}}
        refusals: list[str] = []
        for _ in range(200_000):  # far past any queue: a blocking send would hang here
            try:
                channels.send("comm_msg", body, control=True, block=False)
            except KernelError as exc:
                refusals.append(str(exc))
                if len(refusals) >= 10:
                    break
        assert refusals == ["the kernel is not reading its channel"] * 10
    finally:
        channels.close()
        for sock in sockets:
            sock.close()
        context.term()

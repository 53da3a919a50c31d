"""The gateway backend's judgements, apart from a real gateway: which status
a death is, how long a new kernel may take to answer before another is asked
for, when a DELETE is tried again (against a loopback HTTP server), and that
the hand-built WebSocket request misses none of tornado's defaults.
(tests/integration/test_gateway_kernels.py shows the rest on real gateways.)"""

from __future__ import annotations

import asyncio
import http.server
import inspect
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from recursa.kernel import GatewayClient, GatewaySettings, remote
from recursa.kernel.gateway import (
    MIN_PATIENCE,
    PATIENCE_FACTOR,
    RECENT_STARTS,
    given_up,
)
from recursa.kernel.gateway_channels import GatewayChannels
from recursa.kernel.remote import means_death


def test_restarting_is_a_death_only_once_the_kernel_answered() -> None:
    assert means_death("dead", starting=True) and means_death("dead", starting=False)
    assert means_death("restarting", starting=False)
    assert not means_death("restarting", starting=True)
    assert not any(means_death(s, starting=False) for s in ("idle", "busy", "starting"))


def test_patience_is_learnt_from_the_slowest_recent_start() -> None:
    client = GatewayClient(GatewaySettings("http://127.0.0.1:9", "t"))
    assert client.patience() is None  # nothing learnt: the startup limit alone
    client.answered(100.0, 0.5)
    assert client.patience() == MIN_PATIENCE and client.latest_answered_ask == 100.0
    client.answered(90.0, 4.0)
    client.answered(110.0, 1.0)
    assert client.patience() == PATIENCE_FACTOR * 4.0 and client.latest_answered_ask == 110.0
    for _ in range(RECENT_STARTS):  # the slow start is forgotten in time
        client.answered(0.0, 1.0)
    assert client.patience() == MIN_PATIENCE


def test_a_silent_kernel_is_given_up_only_when_the_gateway_makes_progress_past_it() -> None:
    # Alone, past its patience: lost (the next kernel is asked for).
    assert given_up(12.0, 10.0, overtaken=False, others=0)
    # Nineteen others starting beside it, one asked later already answered:
    # the gateway works, this one is stuck (Enterprise Gateway's taken port).
    assert given_up(12.0, 10.0, overtaken=True, others=19)
    # Many starting at once and none asked later has answered yet: a slow
    # host, not a lost kernel; waited for.
    assert not given_up(12.0, 10.0, overtaken=False, others=19)
    assert not given_up(9.0, 10.0, overtaken=True, others=0)


def test_the_channels_request_sets_every_field_tornado_would_default() -> None:
    """The WebSocket's request is built by hand (so that a handshake can be
    abandoned): a field tornado adds to its defaults must be set there too."""
    from tornado.httpclient import HTTPRequest

    given = {
        "connect_timeout",
        "request_timeout",
        "follow_redirects",
        "max_redirects",
        "decompress_response",
        "proxy_password",
        "allow_nonstandard_methods",
        "validate_cert",
    }
    assert set(HTTPRequest._DEFAULTS) <= given
    source = inspect.getsource(GatewayChannels.connect)
    assert all(f"{name}=" in source for name in given)


class _Deletes(http.server.BaseHTTPRequestHandler):
    """Answers each DELETE with the next status of the server's ``answers``."""

    def do_DELETE(self) -> None:
        server: Any = self.server
        server.seen.append(self.path)
        status = server.answers.pop(0)
        body = b'{"message": "busy restarting"}' if status >= 400 else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def deletes() -> Iterator[Any]:
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deletes)
    server.seen, server.answers = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(
    ("answers", "tries", "warned"),
    [([500, 204], 2, False), ([500, 500, 500], 3, True), ([401], 1, True), ([400], 1, True)],
)
async def test_a_delete_is_tried_again_only_after_a_server_error(
    deletes: Any,
    answers: list[int],
    tries: int,
    warned: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A gateway in the middle of a kernel's restart answers its DELETE with
    HTTP 500: tried again (three times in all). A refusal is final."""
    monkeypatch.setattr(remote, "DELETE_RETRY", 0.0)
    deletes.answers = list(answers)
    host, port = deletes.server_address
    client = GatewayClient(GatewaySettings(f"http://{host}:{port}", "t"))
    process = remote.GatewayProcess(client, startup_timeout=5.0, kernel_id="k-1")
    try:
        await process.stop(graceful=False)
    finally:
        await client.aclose()
    assert deletes.seen == ["/api/kernels/k-1"] * tries and process.kernel_id is None
    assert ("could not stop gateway kernel k-1" in caplog.text) is warned


def test_kernels_past_their_patience_do_not_wait_for_each_other() -> None:
    client = GatewayClient(GatewaySettings("http://127.0.0.1:9", "t"))
    first, second, third = object(), object(), object()
    client.began(first, 0.0)
    client.began(second, 0.0)
    client.began(third, 25.0)
    # At 30 s with a patience of 10 s: only the third is still within it.
    assert client.others_within(first, 30.0, 10.0) == 1
    client.ended(third)
    assert client.others_within(first, 30.0, 10.0) == 0  # both stuck: neither waits
    client.ended(third)  # again: no error, and nothing drifts
    client.ended(first)
    client.ended(second)
    assert client.starting == 0


async def test_a_kernel_given_up_just_as_it_answered_is_kept() -> None:
    client = GatewayClient(GatewaySettings("http://127.0.0.1:9", "t"))
    client.answered(0.0, 1.0)  # patience is known: the judge acts
    process = remote.GatewayProcess(client, startup_timeout=5.0, kernel_id="k-1")
    process._asked = asyncio.get_running_loop().time() - 60.0  # long past its patience
    process._set_starting(True)
    process._judge_start()  # alone and silent: given up
    assert process.exit_description().startswith("it did not answer within")
    process.answered()  # its answer had come all the same
    assert not process._dead and client.starting == 0
    await client.aclose()

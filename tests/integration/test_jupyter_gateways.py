"""The real Jupyter gateways the gateway kernel backend is tested against
(tests/jupyter_gateways.py): each starts on loopback with a token, starts the
project's ipykernel from its kernelspec, runs a cell over the channels
WebSocket, delivers a custom control message to a cell that awaits it,
deletes its kernels, and leaves no process. Skipped, naming scripts/gateways,
where a gateway's venv is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2
import psutil
import pytest

from jupyter_gateways import KINDS, Channels, Gateway, Kind, missing, start_gateway

FIXTURE = {"kg": "kernel_gateway", "eg": "enterprise_gateway"}

# A control handler that resolves a future the cell awaits, as the backend's
# kernel side does: control messages are handled on the kernel's control
# thread, so the result crosses to the cell's loop with call_soon_threadsafe.
SETUP = """
import asyncio
_waiting = {}
async def _x_reply(*args):
    content = args[-1]["content"]
    future, loop = _waiting.pop(content["id"])
    loop.call_soon_threadsafe(future.set_result, content["value"])
get_ipython().kernel.control_handlers["x_reply"] = _x_reply
"""
AWAIT = """
_loop = asyncio.get_running_loop()
_future = _loop.create_future()
_waiting["a"] = (_future, _loop)
print("waiting", flush=True)
print("got", await asyncio.wait_for(_future, 20))
"""


@pytest.fixture(scope="module", params=KINDS)
def gateway(request: pytest.FixtureRequest) -> Gateway:
    """Each gateway in turn. Module-scoped, so it starts before the per-test
    check for leaked processes looks, as the fixtures it picks do."""
    found: Gateway = request.getfixturevalue(FIXTURE[request.param])
    return found


def test_the_token_is_required(gateway: Gateway) -> None:
    assert gateway.request("GET", "/api/kernels").status_code == 200
    wrong = httpx2.get(gateway.url + "/api/kernels", headers={"Authorization": "token nope"})
    assert wrong.status_code in (401, 403)
    assert httpx2.get(gateway.url + "/api/kernels").status_code in (401, 403)
    assert httpx2.post(gateway.url + "/api/kernels", json={}).status_code in (401, 403)
    specs = gateway.request("GET", "/api/kernelspecs").json()
    assert specs["default"] == gateway.kernel_name
    assert specs["kernelspecs"][gateway.kernel_name]["spec"]["argv"][0] == sys.executable


async def test_a_kernel_runs_cells_and_hears_the_control_channel(gateway: Gateway) -> None:
    before = {p.pid for p in gateway.kernel_processes()}
    kernel_id = gateway.start_kernel()
    assert kernel_id in [k["id"] for k in gateway.kernels()]
    [kernel] = [p for p in gateway.kernel_processes() if p.pid not in before]
    assert kernel.cmdline()[:3] == [sys.executable, "-m", "ipykernel_launcher"]
    # Its connection file is in the gateway's own runtime directory, not the home's.
    assert list((gateway.where / "runtime").glob(f"kernel-{kernel_id}*.json"))

    channels = await Channels.connect(gateway, kernel_id)
    try:
        assert (await channels.execute("1+1")).result == "2"
        assert (await channels.execute(SETUP)).status == "ok"

        def answer(text: str) -> None:
            if "waiting" in text:
                channels.send("control", "x_reply", {"id": "a", "value": 7})

        done = await channels.execute(AWAIT, on_stream=answer)
        assert (done.status, done.error) == ("ok", None)
        assert done.stdout == "waiting\ngot 7\n"
    finally:
        channels.close()

    assert gateway.delete_kernel(kernel_id) == 204
    _gone, alive = psutil.wait_procs([kernel], timeout=15)
    assert alive == []
    assert kernel_id not in [k["id"] for k in gateway.kernels()]


async def test_what_a_kernel_inherits(gateway: Gateway) -> None:
    """A POST's ``env`` passes ``KERNEL_*`` and nothing else asked for; the
    gateway's temporary IPYTHONDIR reaches the kernel (whitelisted)."""
    kernel_id = gateway.start_kernel(env={"KERNEL_RECURSA_PROBE": "yes", "RECURSA_PROBE": "no"})
    channels = await Channels.connect(gateway, kernel_id)
    try:
        code = "import os; print([os.environ.get(n) for n in {names!r}])"
        names = ["KERNEL_RECURSA_PROBE", "RECURSA_PROBE", "IPYTHONDIR", "KG_AUTH_TOKEN"]
        done = await channels.execute(code.format(names=names))
    finally:
        channels.close()
        assert gateway.delete_kernel(kernel_id) == 204
    ipython = str(gateway.where / "ipython")
    assert done.stdout == f"{['yes', None, ipython, None]!r}\n"


@pytest.mark.parametrize("kind", KINDS)
def test_leaving_a_gateway_deletes_its_kernels_and_stops_it(kind: Kind, tmp_path: Path) -> None:
    reason = missing(kind)
    if reason is not None:
        pytest.skip(reason)
    with start_gateway(kind, tmp_path) as gateway:
        gateway.start_kernel()
        gateway.start_kernel()
        kernels = gateway.kernel_processes()
        server = psutil.Process(gateway.process.pid)
        assert len(kernels) == 2
    assert not server.is_running()
    assert not [p for p in kernels if p.is_running()]


def test_a_missing_gateway_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import jupyter_gateways

    monkeypatch.setattr(jupyter_gateways, "VENVS", Path("/nonexistent"))
    assert missing("eg") == (
        "Jupyter Enterprise Gateway is not installed in /nonexistent/eg: run scripts/gateways"
    )

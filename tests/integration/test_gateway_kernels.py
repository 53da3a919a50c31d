"""Kernels behind a real Jupyter gateway (Kernel Gateway and Enterprise Gateway,
started on loopback by tests/jupyter_gateways.py): the gateway backend of
:class:`recursa.kernel.Kernel`, one kernel at a time.

Everything a session asks of a kernel is checked on both gateways: cells
that keep their state, a cell past its limit interrupted with its variables
kept, a restart that keeps the kernel's id, a snapshot restored, a kernel
taken over by id as a daemon restarted after ``kill -9`` does, and the
one-line errors of a wrong token, an unknown kernel and a gateway that is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jupyter_gateways import Gateway, missing, start_gateway, write_kernelspec
from recursa.errors import KernelError
from recursa.kernel import GatewayClient, GatewaySettings, Kernel
from recursa.kernel import gateway as gateway_module

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def gateway(jupyter_gateway: Gateway) -> Gateway:
    return jupyter_gateway


def client_of(gateway: Gateway, token: str | None = None) -> GatewayClient:
    settings = GatewaySettings(
        gateway.url, gateway.token if token is None else token, gateway.kernel_name
    )
    return GatewayClient(settings)


@pytest.fixture
async def kernel(gateway: Gateway, tmp_path: Path) -> AsyncIterator[Kernel]:
    client = client_of(gateway)
    kernel = Kernel(tmp_path, {}, gateway=client, interrupt_grace=5.0)
    await kernel.start()
    try:
        yield kernel
    finally:
        await kernel.shutdown()
        await client.aclose()
    assert kernel.kernel_id not in {k["id"] for k in gateway.kernels()}


def text(out: object) -> str:
    return "".join(part.text for part in out.parts)  # type: ignore[attr-defined]


async def test_cells_keep_their_state_and_run_in_the_session_directory(
    kernel: Kernel, gateway: Gateway, tmp_path: Path
) -> None:
    assert kernel.backend == "gateway" and kernel.pid is None
    assert kernel.kernel_id in {k["id"] for k in gateway.kernels()}
    first = await kernel.execute("x = 6 * 7\nprint('hello')", timeout=30)
    assert (first.status, text(first)) == ("ok", "hello\n")
    second = await kernel.execute("import os\nx, os.getcwd()", timeout=30)
    assert text(second) == f"(42, {str(tmp_path)!r})"
    failed = await kernel.execute("1 / 0", timeout=30)
    assert failed.status == "error" and "ZeroDivisionError" in text(failed)


async def test_a_cell_past_its_limit_is_interrupted_and_the_variables_stay(
    kernel: Kernel,
) -> None:
    await kernel.execute("x = 41", timeout=30)
    out = await kernel.execute("import time\ntime.sleep(60)", timeout=1.0)
    assert out.status == "timeout" and not out.restarted
    assert "interrupted" in out.note
    assert text(await kernel.execute("x + 1", timeout=30)) == "42"


async def test_a_restart_keeps_the_id_and_clears_the_namespace(kernel: Kernel) -> None:
    kernel_id = kernel.kernel_id
    await kernel.execute("x = 1", timeout=30)
    await kernel.restart()
    assert kernel.kernel_id == kernel_id and kernel.restarts == 1
    out = await kernel.execute("'x' in dir()", timeout=30)
    assert text(out) == "False"


async def test_a_snapshot_restores_into_a_restarted_kernel(kernel: Kernel, tmp_path: Path) -> None:
    await kernel.execute("data = {'a': [1, 2, 3]}\ndef f(n):\n    return n * 2", timeout=30)
    report = await kernel.snapshot(tmp_path / "ns.dill", max_bytes=1 << 20)
    assert {"data", "f"} <= set(report.names)
    await kernel.restart()
    restored = await kernel.restore(tmp_path / "ns.dill")
    assert {"data", "f"} <= set(restored.names) and not restored.failed
    assert text(await kernel.execute("f(len(data['a']))", timeout=30)) == "6"


async def test_a_kernel_is_taken_over_by_id_with_its_variables(
    gateway: Gateway, tmp_path: Path
) -> None:
    """What a daemon restarted after kill -9 does: the old one just vanished
    (its channels closed, nothing stopped), and the new one attaches by id."""
    client = client_of(gateway)
    first = Kernel(tmp_path, {}, gateway=client)
    await first.start()
    kernel_id = first.kernel_id
    assert kernel_id is not None
    await first.execute("kept = 'still here'", timeout=30)
    first._proc.let_go()  # the daemon is gone; the gateway keeps the kernel
    second = await Kernel.attach(first.connection_file, 0, tmp_path, {}, gateway=client)
    try:
        assert second.attach_outcome == "idle" and second.kernel_id == kernel_id
        assert text(await second.execute("kept", timeout=30)) == "'still here'"
    finally:
        await second.shutdown()
        await client.aclose()
    assert kernel_id not in {k["id"] for k in gateway.kernels()}


async def test_a_kernel_running_a_cell_is_interrupted_when_taken_over(
    gateway: Gateway, tmp_path: Path
) -> None:
    client = client_of(gateway)
    first = Kernel(tmp_path, {}, gateway=client)
    await first.start()
    await first.execute("n = 5", timeout=30)
    channels = first._proc.channels
    assert channels is not None
    channels.execute("import time\ntime.sleep(60)", silent=False)  # left running
    first._proc.let_go()
    second = await Kernel.attach(first.connection_file, 0, tmp_path, {}, gateway=client)
    try:
        assert second.attach_outcome == "interrupted"
        assert text(await second.execute("n", timeout=30)) == "5"
    finally:
        await second.shutdown()
        await client.aclose()


async def test_a_kernel_deleted_behind_our_back_is_replaced_and_the_cell_says_so(
    kernel: Kernel, gateway: Gateway
) -> None:
    """The gateway closes no connection when a kernel is deleted: the watch
    (one listing every two seconds) notices it during the next cell."""
    old = kernel.kernel_id
    assert old is not None
    await kernel.execute("x = 1", timeout=30)
    assert gateway.delete_kernel(old) == 204
    out = await kernel.execute("'x' in dir()", timeout=30)
    assert (out.status, out.restarted) == ("kernel_died", True)
    assert "the gateway reports the kernel deleted" in out.note and "variables are gone" in out.note
    assert text(await kernel.execute("'x' in dir()", timeout=30)) == "False"
    assert kernel.kernel_id != old and kernel.kernel_id in {k["id"] for k in gateway.kernels()}


STALLS_ONCE = textwrap.dedent(
    """
    import os, sys, time
    first, told = sys.argv[1], sys.argv[2]
    try:
        os.close(os.open(first, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[3:]])
    with open(told, "w") as fifo:  # the test waits on it
        fifo.write("stalled")
    time.sleep(3600)  # never comes up, as a kernel whose port was taken
    """
)


async def test_a_kernel_that_is_lost_or_never_answers_while_it_starts_is_replaced(
    gateway: Gateway,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Of many kernels Enterprise Gateway starts at once, one now and then
    never comes up (its port was taken): it is dropped by the gateway, or
    listed as starting for good. A start asks for another kernel in both
    cases. Here the first kernel of each start stalls: the first start's is
    deleted; the second start's is given up after the gateway's patience (a
    multiple of how long the first start's good kernel took)."""
    script, told, first = tmp_path / "stalls_once.py", tmp_path / "told", tmp_path / "first"
    script.write_text(STALLS_ONCE)
    os.mkfifo(told)
    name = "recursa-stalls-once"
    write_kernelspec(gateway.where / "jupyter-path", name, (str(script), str(first), str(told)))
    monkeypatch.setattr(gateway_module, "PATIENCE_FACTOR", 2.0)
    settings = GatewaySettings(gateway.url, gateway.token, name)
    client = GatewayClient(settings, watch_interval=0.05, min_patience=1.0)
    started: asyncio.Queue[str] = asyncio.Queue()
    start_kernel = client.start_kernel

    async def start_and_tell() -> str:
        kernel_id = await start_kernel()
        started.put_nowait(kernel_id)
        return kernel_id

    monkeypatch.setattr(client, "start_kernel", start_and_tell)
    deleted, given_up = Kernel(tmp_path, {}, gateway=client), Kernel(tmp_path, {}, gateway=client)
    reading = asyncio.ensure_future(asyncio.to_thread(told.read_text))
    starting = asyncio.ensure_future(deleted.start())
    try:
        assert client.patience() is None  # nothing learnt yet: the startup limit alone
        # The gateway answered the start, and the kernel's process is stalled.
        stalled = await asyncio.wait_for(started.get(), 60)
        await asyncio.wait({starting, reading}, return_when=asyncio.FIRST_COMPLETED)
        assert reading.done() and reading.result() == "stalled", starting
        with caplog.at_level(logging.WARNING, "recursa.kernel.remote"):
            assert await asyncio.to_thread(gateway.delete_kernel, stalled) == 204
            await starting
        assert "lost while it started (the gateway reports the kernel deleted)" in caplog.text
        assert deleted.kernel_id == started.get_nowait() != stalled
        assert text(await deleted.execute("6 * 7", timeout=30)) == "42"

        patience = client.patience()
        assert patience is not None and patience >= 1.0
        first.unlink()  # the next kernel stalls too; nobody deletes it
        reading = asyncio.ensure_future(asyncio.to_thread(told.read_text))
        with caplog.at_level(logging.WARNING, "recursa.kernel.remote"):
            await given_up.start()
        assert re.search(r"lost while it started \(it did not answer within \d+ s\)", caplog.text)
        [never, kept] = [started.get_nowait(), started.get_nowait()]
        assert await reading == "stalled" and given_up.kernel_id == kept != never
        assert never not in {k["id"] for k in gateway.kernels()}
        assert text(await given_up.execute("7 * 6", timeout=30)) == "42"
    finally:
        if not reading.done():  # the process never wrote: let the reader go
            os.close(os.open(told, os.O_WRONLY | os.O_NONBLOCK))
        await asyncio.gather(starting, reading, return_exceptions=True)
        await deleted.shutdown()
        await given_up.shutdown()
        await client.aclose()
    assert gateway.kernels() == []


async def test_errors_are_one_line(gateway: Gateway, tmp_path: Path) -> None:
    wrong = client_of(gateway, token="not-the-token")
    with pytest.raises(KernelError, match="refused the token") as refused:
        await Kernel(tmp_path, {}, gateway=wrong).start()
    assert "\n" not in str(refused.value)
    await wrong.aclose()
    client = client_of(gateway)
    with pytest.raises(KernelError, match="gateway kernel no-such-id is gone"):
        await Kernel.attach(Path("gateway:no-such-id"), 0, tmp_path, {}, gateway=client)
    await client.aclose()
    nowhere = GatewayClient(GatewaySettings("http://127.0.0.1:9", "t"))
    with pytest.raises(
        KernelError, match=r"cannot reach the kernel gateway at http://127\.0\.0\.1:9"
    ):
        await Kernel(tmp_path, {}, gateway=nowhere).start()
    await nowhere.aclose()
    assert gateway.kernels() == []


def test_settings_keep_the_token_out_of_their_text() -> None:
    settings = GatewaySettings("https://gw.example:8443/base/", "sekrit", "py")
    assert "sekrit" not in repr(settings)
    assert settings.channels_url("a b") == "wss://gw.example:8443/base/api/kernels/a%20b/channels"
    assert settings.headers() == {"Authorization": "token sekrit"}
    with pytest.raises(ValueError, match="http"):
        GatewaySettings("gw.example:8443")


async def test_the_gateways_own_environment_does_not_reach_its_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started from a shell that holds a provider key, a gateway given no
    environment for a kernel would pass it its own, key included."""
    reason = missing("kg")
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-in-the-gateways-shell")
    with start_gateway("kg", tmp_path / "gw") as served:
        client = client_of(served)
        kernel = Kernel(tmp_path, {}, gateway=client)
        await kernel.start()
        try:
            out = await kernel.execute(
                "import os\n[os.environ.get(n) for n in ('OPENAI_API_KEY', 'KERNEL_LAUNCHED_BY')]",
                timeout=30,
            )
        finally:
            await kernel.shutdown()
            await client.aclose()
    assert text(out) == "[None, 'recursa']"


async def test_a_closed_connection_to_a_live_kernel_is_reopened_not_restarted(
    kernel: Kernel,
) -> None:
    """A proxy's idle timeout or a network blip closes the WebSocket, not the
    kernel: the next cell reopens the channels and finds its variables."""
    kernel_id = kernel.kernel_id
    await kernel.execute("kept = 7", timeout=30)
    channels = kernel._proc.channels
    assert channels is not None
    channels._ws.close()  # type: ignore[union-attr]  # as a proxy would
    await channels.wait(None)  # the reader sees the close and wakes us
    assert not kernel.is_alive()
    out = await kernel.execute("kept * 6", timeout=30)
    assert (text(out), out.restarted, out.note) == ("42", False, "")
    assert kernel.kernel_id == kernel_id and kernel.restarts == 0

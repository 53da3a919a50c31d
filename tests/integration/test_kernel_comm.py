"""The kernel API over a kernel's own Jupyter channels (``api_transport="comm"``):
real kernels, the real kernel app called in-process
(:func:`recursa.daemon.app.in_process`), only the host fake. The kernel
sends its requests as comm messages on iopub; the relay
(:mod:`recursa.kernel.relay`) answers on control while the cell awaits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fake_kernel_host import FakeKernelHost
from recursa.config import Config
from recursa.daemon.app import create_apps, in_process
from recursa.daemon.replies import StopSignal
from recursa.kernel import Kernel, OutputPart, driver, launch
from recursa.kernel.relay import MAX_IN_FLIGHT
from recursa.protocol.wire import AgentMessage, Spawn

WAIT = 10.0
"""Bound on any wait for something a test caused (never a sleep)."""


@pytest.fixture
def host() -> FakeKernelHost:
    return FakeKernelHost()


@pytest.fixture
def tree(host: FakeKernelHost) -> dict[str, str]:
    """A root, and a child of it whose kernel the tests' kernel is."""
    root, _ = host.add_root("root")
    coroutine = host.spawn(root, Spawn(task="work", name="kid"))
    try:
        coroutine.send(None)  # the fake's spawn never awaits
    except StopIteration as done:
        kid = done.value.id
    host.kernel_calls.clear()
    return {"root": root, "kid": kid, "token": host.token_of(kid)}


@pytest.fixture
async def kernel(
    tmp_path: Path, config: Config, host: FakeKernelHost, tree: dict[str, str]
) -> AsyncIterator[Kernel]:
    """A comm kernel served as the kid through the real kernel app."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    apps = create_apps(host, token="people-token", stop=StopSignal(), kernel_host=host)
    async with Kernel(
        workdir, config.kernel.env, runtime_dir=tmp_path / "rt", api_transport="comm"
    ) as started:
        started.serve_api(in_process(apps.kernel)(tree["token"]))
        yield started


async def run(kernel: Kernel, code: str, *, timeout: float = 60.0) -> str:
    out = await kernel.execute(code, timeout=timeout)
    assert out.status == "ok", out.text()
    return out.text()


async def until(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), WAIT)


async def test_rlm_and_agent_message_go_over_the_kernels_channels(
    kernel: Kernel, tree: dict[str, str], host: FakeKernelHost
) -> None:
    text = await run(
        kernel,
        "import os\n"
        "h = await rlm('task', name='a')\n"
        "r = await agent_message.send('hi', to='parent')\n"
        "print(h.name, h.status, r.status, 'RECURSA_KERNEL_TOKEN' in os.environ)",
    )
    assert text == "a running queued False\n"
    assert host.kernel_calls[:2] == [
        ("spawn", tree["kid"], Spawn(task="task", name="a")),
        ("message", tree["kid"], AgentMessage("hi", "parent", "auto")),
    ]


async def test_many_calls_and_a_long_poll_are_in_flight_at_once(
    kernel: Kernel, tree: dict[str, str], host: FakeKernelHost
) -> None:
    cell = asyncio.ensure_future(
        kernel.execute(
            "import asyncio\n"
            "poll = asyncio.ensure_future(agent_message.inbox(wait=600))\n"
            "hs = await asyncio.gather(*(rlm(f'task {i}', name=f'c{i}') for i in range(40)))\n"
            "print(len({h.id for h in hs}))\n"
            "print([m.text for m in await poll])",
            timeout=60,
        )
    )
    await until(host.entered("inbox"))
    host.deliver(tree["kid"], "wake up")
    out = await asyncio.wait_for(cell, WAIT)
    assert out.status == "ok", out.text()
    assert out.text() == "40\n['wake up']\n"
    assert len([c for c in host.kernel_calls if c[0] == "spawn"]) == 40


async def test_an_interrupted_long_poll_is_cancelled_in_the_host_and_the_kernel_goes_on(
    kernel: Kernel, host: FakeKernelHost
) -> None:
    await run(kernel, "h = await rlm('task', name='w')")
    child = next(h for h in host.children.values() if h.name == "w")
    cell = asyncio.ensure_future(kernel.execute("await h.wait()", timeout=120))
    await until(host.entered("wait"))
    await kernel.interrupt()
    out = await asyncio.wait_for(cell, WAIT)
    assert out.status == "interrupted", out.text()
    await until(host.was_cancelled(f"wait:{child.id}"))
    host.finish(child.id, "late answer")
    assert await run(kernel, "print(await h.result())") == "late answer\n"
    from recursa.kernel.relay import Relay

    relay = kernel._relay
    assert isinstance(relay, Relay) and relay.in_flight == 0


async def test_hostile_comm_messages_from_a_cell_confuse_nothing(
    kernel: Kernel, tree: dict[str, str], host: FakeKernelHost
) -> None:
    """Model code sends what it likes on the API's comm: ill-formed messages
    are ignored or refused in one line, a request naming another session's
    token is still the kernel's own session, and the API goes on working."""
    other_token = host.token_of(tree["root"])
    code = (
        "from recursa.api import channel\n"
        "k = get_ipython().kernel\n"
        "def raw(data):\n"
        "    k.session.send(k.iopub_socket, 'comm_msg', {'comm_id': 'recursa.api', 'data': data},"
        " parent=k.get_parent('shell'))\n"
        "for data in [None, 'x', [1], {}, {'id': 7}, {'id': 'x' * 1000}, {'id': 'c', 'cancel': True},"
        " {'id': 'n', 'method': 'POST', 'path': '/kernel/rlm', 'body': {'task': 'ok'},"
        " 'timeout': 'soon'}]:\n"
        "    raw(data)\n"
        "k.session.send(k.iopub_socket, 'comm_msg', {'comm_id': 'recursa.api'})\n"
        "k.session.send(k.iopub_socket, 'comm_msg', {'data': {'id': 'q'}})\n"
        "replies = [await channel.call(m, p, b, timeout=10) for m, p, b in [\n"
        "    ('GET', '/sessions', None),\n"
        "    ('POST', '/kernel/../sessions', None),\n"
        "    ('TRACE', '/kernel/rlm', None),\n"
        "    ('POST', '/kernel/rlm', [1, 2]),\n"
        "    ('POST', '/kernel/nowhere', {}),\n"
        "    ('POST', '/kernel/rlm', {'name': 'no task'}),\n"
        "]]\n"
        "for status, body in replies:\n"
        "    print(status, body['error']['kind'])\n"
        f"print(await channel.call('POST', '/kernel/rlm', {{'task': 'mine', 'token': {other_token!r},"
        f" 'session': {tree['root']!r}}}, timeout=10))\n"
        "h = await rlm('still works', name='s')\n"
        "print(h.name)"
    )
    out = await kernel.execute(code, timeout=60)
    lines = out.text().splitlines()
    assert out.status == "ok", out.text()
    assert lines[:6] == [
        "400 invalid",  # not a kernel route
        "400 invalid",  # no way out of /kernel/
        "400 invalid",
        "400 invalid",
        "404 not_found",
        "400 invalid",
    ], out.text()
    assert lines[-1] == "s"
    spawns = [(caller, request) for name, caller, request in host.kernel_calls if name == "spawn"]
    assert spawns == [
        (tree["kid"], Spawn(task="mine")),
        (tree["kid"], Spawn(task="still works", name="s")),
    ]
    assert {caller for _, caller, _ in host.kernel_calls} == {tree["kid"]}


async def test_more_calls_than_the_relay_allows_at_once_are_refused_in_one_line(
    kernel: Kernel, host: FakeKernelHost
) -> None:
    # The cell says when the extra calls were refused: the relay then holds
    # MAX_IN_FLIGHT waits (none can end before the child does).
    refused = asyncio.Event()

    def seen(part: OutputPart) -> None:
        if "refused" in part.text:
            refused.set()

    cell = asyncio.ensure_future(
        kernel.execute(
            "import asyncio\n"
            "h = await rlm('task', name='w')\n"
            f"tasks = [asyncio.ensure_future(h.wait()) for _ in range({MAX_IN_FLIGHT + 6})]\n"
            "while sum(t.done() for t in tasks) < 6:\n"
            "    await asyncio.wait([t for t in tasks if not t.done()],"
            " return_when=asyncio.FIRST_COMPLETED)\n"
            "print('refused', flush=True)\n"
            "waits = await asyncio.gather(*tasks, return_exceptions=True)\n"
            "errors = [w for w in waits if isinstance(w, Exception)]\n"
            "print(len(waits) - len(errors), len(errors), type(errors[0]).__name__)\n"
            "print(errors[0])",
            timeout=60,
            on_output=seen,
        )
    )
    await until(refused)
    relay = kernel._relay
    assert relay is not None and relay.in_flight == MAX_IN_FLIGHT
    child = next(h for h in host.children.values() if h.name == "w")
    host.finish(child.id, "done")
    out = await asyncio.wait_for(cell, WAIT)
    assert out.status == "ok", out.text()
    assert out.text().splitlines() == [
        "refused",
        f"{MAX_IN_FLIGHT} 6 UsageError",
        f"too many kernel API calls in flight at once (at most {MAX_IN_FLIGHT})",
    ]
    assert relay.in_flight == 0


async def test_a_restarted_kernel_is_bootstrapped_for_the_channel_again(
    kernel: Kernel, tree: dict[str, str], host: FakeKernelHost
) -> None:
    await run(kernel, "h = await rlm('before', name='a')")
    await kernel.restart()
    assert await run(kernel, "h = await rlm('after', name='b')\nprint(h.name)") == "b\n"
    assert [c[2] for c in host.kernel_calls if c[0] == "spawn"] == [
        Spawn(task="before", name="a"),
        Spawn(task="after", name="b"),
    ]


async def test_a_kernel_served_by_nobody_fails_in_one_line(
    kernel: Kernel, tree: dict[str, str]
) -> None:
    kernel.serve_api(None)
    out = await kernel.execute("await rlm('task')", timeout=60)
    assert out.status == "error"
    lines = [line for line in out.text().splitlines() if line.strip()]
    assert lines[-1] == "DaemonError: the recursa API is not served to this kernel"


async def test_rlm_admission_latency_over_the_channel(kernel: Kernel, host: FakeKernelHost) -> None:
    code = (
        "import json, time\n"
        "await rlm('warm up')\n"
        "samples = []\n"
        "for i in range(250):\n"
        "    began = time.perf_counter()\n"
        "    await rlm(f'task {i}')\n"
        "    samples.append(time.perf_counter() - began)\n"
        "samples.sort()\n"
        "print(json.dumps({'p50': samples[len(samples) // 2],"
        " 'p99': samples[int(len(samples) * 0.99)]}))"
    )
    figures = json.loads(await run(kernel, code, timeout=120))
    assert len([c for c in host.kernel_calls if c[0] == "spawn"]) == 251
    # The same bound as over the socket (test_kernel_api): measured here at
    # about 1.6 ms p50, 5 ms p99, on a busy two-CPU machine (iopub out, the
    # app in-process, control back: the reply wakes the cell from another thread).
    assert figures["p50"] < 0.005, figures


async def test_the_extensions_command_line_setting_switches_a_kernel_to_the_channel(
    tmp_path: Path,
    config: Config,
    host: FakeKernelHost,
    tree: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--RecursaKernel.api_transport=comm`` alone (no silent use_comm())."""
    flags = launch.extension_flags()
    monkeypatch.setattr(
        launch, "extension_flags", lambda: (*flags, "--RecursaKernel.api_transport=comm")
    )
    monkeypatch.setattr(driver, "USE_COMM", "pass")  # the silent switch every launch runs
    apps = create_apps(host, token="people-token", stop=StopSignal(), kernel_host=host)
    async with Kernel(
        tmp_path, config.kernel.env, runtime_dir=tmp_path / "rt", api_transport="comm"
    ) as kernel:
        kernel.serve_api(in_process(apps.kernel)(tree["token"]))
        assert await run(kernel, "print((await rlm('flagged')).status)") == "running\n"
    assert [c[2] for c in host.kernel_calls] == [Spawn(task="flagged")]


async def test_a_daemon_that_takes_a_kernel_over_ends_the_calls_its_predecessor_left(
    tmp_path: Path, config: Config
) -> None:
    """A call in flight when the daemon died never gets its reply: the daemon
    that reattaches the kernel tells it so, and the call fails in one line
    instead of waiting forever (a task the cell left running awaits it)."""
    started = asyncio.Event()

    async def never(method: str, path: str, body: object, timeout: float | None) -> object:
        started.set()
        await asyncio.Event().wait()  # the daemon dies before it answers

    first = Kernel(tmp_path, config.kernel.env, runtime_dir=tmp_path / "rt", api_transport="comm")
    await first.start()
    first.serve_api(never)
    await run(
        first,
        "import asyncio\n"
        "async def ask():\n"
        "    try:\n"
        "        await rlm.list_subagents()\n"
        "    except Exception as exc:\n"
        "        return f'{type(exc).__name__}: {exc}'\n"
        "pending = asyncio.ensure_future(ask())",
    )
    await until(started)
    pid = first.pid
    assert pid is not None
    manager = first._proc._manager  # type: ignore[union-attr]
    assert manager is not None
    launched = manager.provisioner.process  # reaped below: this process started it
    first._proc.let_go()  # the daemon is gone; the kernel and its task live on
    await first._relay.aclose()  # type: ignore[union-attr]
    second = await Kernel.attach(
        first.connection_file, pid, tmp_path, config.kernel.env, api_transport="comm"
    )
    try:
        text = await run(second, "print(await asyncio.wait_for(pending, 10))")
        assert text.strip() == (
            "DaemonError: the recursa daemon restarted during this call; its outcome is unknown"
        )
    finally:
        await second.shutdown()
        await asyncio.to_thread(launched.wait, 10)

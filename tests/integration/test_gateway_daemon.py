"""Sessions whose kernels run behind a real Jupyter gateway (each test on Kernel
Gateway, then on Enterprise Gateway), through the real daemon and CLI (issue
16's acceptance): a two-cell run, a 20-child fan-out
with no kernel process on the daemon's side, ``kill -9`` of the daemon mid-cell
and the kernel reattached with its variables, a local parent whose child
runs on the gateway, and the one-line refusals.

The model is the loopback fake server; its ``responder`` plays every agent
from the request alone. Waits are on the daemon's events (a cell's live
output), never on a clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from daemon_kit import daemon_env, daemon_pid, fails, kill_daemon, kill_everything, ok
from jupyter_gateways import Gateway
from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.protocol.events import CellOutput, EventRecord
from recursa.protocol.wire import CreateSession
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

# slow: about 75 s (a daemon per test over both real gateways, a 20-child fan-out
# on each); the kernel-level gateway suite (test_gateway_kernels) runs by default.
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

TOKEN_VAR = "RECURSA_TEST_GATEWAY_TOKEN"
CHILD = re.compile(r"child task (\d+)")


def cell(code: str) -> Reply:
    return Reply(tool_calls=[ToolCallSpec("python", {"code": code})])


def text_of(message: dict[str, Any]) -> str:
    body = message.get("content")
    return body if isinstance(body, str) else json.dumps(body)


def tool_results(body: dict[str, Any]) -> list[str]:
    return [text_of(m) for m in body["messages"] if m["role"] == "tool"]


def task_of(body: dict[str, Any]) -> str:
    users = [text_of(m) for m in body["messages"] if m["role"] == "user"]
    return next((u for u in users if "task" in u), users[0] if users else "")


def write_config(home: Path, gateway: Gateway | None, backend: str = "gateway") -> None:
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[kernel]", f'backend = "{backend}"']
    if gateway is not None:
        lines += [
            "[kernel.gateway]",
            f'url = "{gateway.url}"',
            f'token_env = "{TOKEN_VAR}"',
            f'kernel_name = "{gateway.kernel_name}"',
        ]
    (home / "config.toml").write_text("\n".join(lines) + "\n")


def stored_kernels(home: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(f"file:{home / 'recursa.db'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT session_id, pid, connection_file FROM kernels").fetchall()
    return [(str(s), int(p), str(c)) for s, p, c in rows]


def meta_backends(home: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{home / 'recursa.db'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT id, meta FROM sessions").fetchall()
    return {str(i): json.loads(m or "{}").get("kernel_backend") for i, m in rows}


def kernel_descendants(pid: int) -> list[str]:
    """The processes under ``pid`` that are kernels (or fork servers of them)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            if "kernel" in line or "zygote" in line:
                found.append(line)
    return found


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer.in_thread() as fake:
        yield fake


@pytest.fixture
def gw_env(home: Path, server: FakeModelServer) -> Iterator[dict[str, str]]:
    env = daemon_env(home, server)
    yield env
    kill_everything(home)


def run_env(env: dict[str, str], gateway: Gateway) -> dict[str, str]:
    return {**env, TOKEN_VAR: gateway.token}


async def test_a_two_cell_run_answers_through_the_gateway_and_stops_its_kernel(
    jupyter_gateway: Gateway,
    home: Path,
    server: FakeModelServer,
    gw_env: dict[str, str],
    tmp_path: Path,
) -> None:
    write_config(home, jupyter_gateway)
    env = run_env(gw_env, jupyter_gateway)
    server.push(
        cell(
            "import os\nx = 6 * 7\n"
            f"names = [{TOKEN_VAR!r}, 'RECURSA_API_SOCKET', 'RECURSA_KERNEL_TOKEN']\n"
            "print([os.environ.get(n) for n in names], os.getcwd())"
        ),
        cell("print(x)"),
        Reply(text="the answer is 42"),
    )
    out = ok(["run", "--model", "openai/m", "two cells please"], env, tmp_path)
    assert out.strip().splitlines()[-1] == "the answer is 42"
    [(session, pid, where)] = stored_kernels(home)
    assert pid == 0 and where.startswith("gateway:")
    kernel_id = where.removeprefix("gateway:")
    assert kernel_id in {k["id"] for k in jupyter_gateway.kernels()}
    # The first cell printed the token's variable and the kernel API's (none is
    # set: the API travels on the kernel's own channels) and its directory.
    first = tool_results(server.requests[1].body)[0]
    assert f"[None, None, None] {tmp_path}" in first and jupyter_gateway.token not in first
    assert kernel_descendants(daemon_pid(home)) == []
    transcript = ok(["logs", session], env, tmp_path)
    assert f"gateway kernel {kernel_id}" in transcript and jupyter_gateway.token not in transcript
    ok(["daemon", "stop"], env, tmp_path)
    assert kernel_id not in {k["id"] for k in jupyter_gateway.kernels()}


async def test_kill_9_mid_cell_then_any_command_reattaches_with_variables(
    jupyter_gateway: Gateway,
    home: Path,
    server: FakeModelServer,
    gw_env: dict[str, str],
    tmp_path: Path,
) -> None:
    write_config(home, jupyter_gateway)
    env = run_env(gw_env, jupyter_gateway)
    server.push(
        cell("kept = 41"),
        cell("import time\nprint('in the cell', flush=True)\ntime.sleep(120)"),
        cell("print(kept + 1)"),
        Reply(text="done"),
    )
    await process.start(home, env=env)
    async with DaemonClient(home) as client:
        info = await client.create_session(
            CreateSession(task="a task", model="openai/m", cwd=str(tmp_path))
        )

        def in_the_cell(record: EventRecord) -> bool:
            event = record.event
            return isinstance(event, CellOutput) and "in the cell" in event.text

        stream = client.events(info.id, follow=True, in_progress=True)
        async with contextlib.aclosing(stream) as records:
            async for record in records:
                if in_the_cell(record):
                    break
    [(_, _, where)] = stored_kernels(home)
    kill_daemon(home)
    assert where.removeprefix("gateway:") in {k["id"] for k in jupyter_gateway.kernels()}
    ok(["agents"], env, tmp_path)  # any command: the daemon starts and recovers
    async with DaemonClient(home) as client:
        assert await client.wait_quiet(info.id, timeout=60)
    transcript = ok(["logs", info.id], env, tmp_path)
    assert "survived; its variables are kept" in transcript
    assert tool_results(server.requests[-1].body)[-1].strip() == "42"
    assert stored_kernels(home)[0][2] == where  # the same kernel, reattached
    assert kernel_descendants(daemon_pid(home)) == []


async def test_a_fan_out_of_20_children_runs_every_kernel_behind_the_gateway(
    jupyter_gateway: Gateway,
    home: Path,
    server: FakeModelServer,
    gw_env: dict[str, str],
    tmp_path: Path,
) -> None:
    write_config(home, jupyter_gateway)
    env = run_env(gw_env, jupyter_gateway)

    def play(path: str, body: dict[str, Any]) -> Reply:
        task, results = task_of(body), tool_results(body)
        child = CHILD.search(task)
        if child is not None:
            n = int(child.group(1))
            return cell(f"print({n} * {n})") if not results else Reply(text=str(n * n))
        if not results:
            return cell(
                "hs = [await rlm(f'child task {i}') for i in range(20)]\n"
                "rs = [await h.result() for h in hs]\n"
                "print(sum(int(r) for r in rs))"
            )
        return Reply(text=f"total {results[-1].strip()}")

    server.responder = play
    before = len(jupyter_gateway.kernel_processes())
    out = ok(["run", "--model", "openai/m", "fan out the task"], env, tmp_path)
    assert out.strip().splitlines()[-1] == "total 2470", out  # sum of n*n for n < 20
    kernels = stored_kernels(home)
    assert len(kernels) == 21 and all(pid == 0 for _, pid, _ in kernels), kernels
    running = len(jupyter_gateway.kernel_processes())
    assert running >= before + 21, (before, running, jupyter_gateway.log_tail())
    assert kernel_descendants(daemon_pid(home)) == []
    assert set(meta_backends(home).values()) == {"gateway"}


async def test_a_local_parent_sends_a_child_to_the_gateway(
    jupyter_gateway: Gateway,
    home: Path,
    server: FakeModelServer,
    gw_env: dict[str, str],
    tmp_path: Path,
) -> None:
    write_config(home, jupyter_gateway, backend="local")
    env = run_env(gw_env, jupyter_gateway)

    def play(path: str, body: dict[str, Any]) -> Reply:
        task, results = task_of(body), tool_results(body)
        if "child task" in task:
            return cell("import os\nprint(os.getpid())") if not results else Reply(text="ok")
        if not results:
            return cell("h = await rlm('child task', backend='gateway')\nprint(await h.result())")
        return Reply(text="parent done")

    server.responder = play
    out = ok(["run", "--model", "openai/m", "the parent task"], env, tmp_path)
    assert out.strip().splitlines()[-1] == "parent done"
    backends = sorted(meta_backends(home).values())
    assert backends == ["gateway", "local"]
    kinds = sorted("gateway" if where.startswith("gateway:") else "local"
                   for _, _, where in stored_kernels(home))  # fmt: skip
    assert kinds == ["gateway", "local"]


async def test_a_gateway_nobody_configured_is_refused_in_one_line(
    home: Path, gw_env: dict[str, str], tmp_path: Path
) -> None:
    line = fails(
        ["run", "--model", "faux/echo", "--kernel-backend", "gateway", "hi"], gw_env, tmp_path, 2
    )
    assert "no kernel gateway is configured" in line and "[kernel.gateway] url" in line
    line = fails(
        ["run", "--model", "faux/echo", "--kernel-backend", "cloud", "hi"], gw_env, tmp_path, 2
    )
    assert "--kernel-backend is local or gateway" in line
    write_config(home, None)  # backend = "gateway" with no [kernel.gateway]
    ok(["daemon", "stop"], gw_env, tmp_path)
    line = fails(["run", "--model", "faux/echo", "hi"], gw_env, tmp_path, 2)
    assert 'kernel.backend = "gateway" needs a [kernel.gateway] url' in line


def test_an_unset_token_variable_fails_the_daemon_start_in_one_line(
    jupyter_gateway: Gateway, home: Path, gw_env: dict[str, str], tmp_path: Path
) -> None:
    write_config(home, jupyter_gateway)
    env = {k: v for k, v in gw_env.items() if k != TOKEN_VAR}
    line = fails(["run", "--model", "faux/echo", "hi"], env, tmp_path, 2)
    assert f"kernel.gateway.token_env: the variable {TOKEN_VAR} is not set" in line
    assert TOKEN_VAR not in os.environ


async def test_a_stopped_session_unloads_its_gateway_kernel_and_comes_back_with_its_variables(
    jupyter_gateway: Gateway,
    home: Path,
    server: FakeModelServer,
    gw_env: dict[str, str],
    tmp_path: Path,
) -> None:
    write_config(home, jupyter_gateway)
    env = run_env(gw_env, jupyter_gateway)
    server.push(cell("kept = [1, 2, 3]"), Reply(text="first"))
    out = ok(["run", "--detach", "--model", "openai/m", "first task"], env, tmp_path)
    session = out.strip().splitlines()[-1]
    async with DaemonClient(home) as client:
        assert await client.wait_quiet(session, timeout=60)
    [(_, _, where)] = stored_kernels(home)
    first_id = where.removeprefix("gateway:")
    ok(["stop", session], env, tmp_path)  # snapshot, kernel stopped on the gateway
    assert stored_kernels(home) == []
    assert first_id not in {k["id"] for k in jupyter_gateway.kernels()}
    server.push(cell("print(sum(kept))"), Reply(text="second"))
    ok(["send", session, "second task"], env, tmp_path)
    async with DaemonClient(home) as client:
        assert await client.wait_quiet(session, timeout=60)
    assert tool_results(server.requests[-1].body)[-1].strip() == "6"
    [(_, _, again)] = stored_kernels(home)
    assert again.startswith("gateway:") and again != where

"""The daemon's two channels and its kernel tokens, end to end: a real daemon,
real kernels, the real CLI; only the model is scripted. The kernel's cells
try what a hostile cell would, with every credential they can reach (without
a sandbox: the client token in ``daemon.token`` too).

- Kernels get the kernel socket, not the people's: ``kernel-api/kernel.sock``.
- The people's socket refuses a kernel token; the kernel socket refuses the
  client token; so an approval sent from a kernel never records ``human``,
  and the proposed global entry stays ``proposed``.
- ``recursa stop`` revokes the session's kernel token before it returns.
- After a crash, the next daemon binds the kernel socket again in the same
  directory, and the reattached kernel reaches it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx2

from daemon_kit import kill_daemon, recursa
from recursa.daemon.client import DaemonClient
from recursa.daemon.paths import DaemonPaths
from recursa.protocol.person_ops import HARNESS_SHOW, EntryRef
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

TRY_EVERY_DOOR = """
import json, os, httpx2
from recursa.api.client import configured
home = {home!r}
kernel_socket, kernel_token = configured()  # the kernel's own, held in its process
client_token = open(os.path.join(home, "daemon.token")).read().strip()
people_socket = os.path.join(home, "daemon.sock")
route = "/v1/harness/entries/{entry}/approve"
tried = {{}}
for socket_name, socket in (("people", people_socket), ("kernel", kernel_socket)):
    for token_name, token in (("client", client_token), ("kernel", kernel_token)):
        if (socket_name, token_name) == ("people", "client"):
            continue
        with httpx2.Client(
            transport=httpx2.HTTPTransport(uds=socket), base_url="http://recursa"
        ) as http:
            reply = http.post(
                route, json={{"reason": "self-approved"}},
                headers={{"authorization": "Bearer " + token}},
            )
        tried[socket_name + "/" + token_name] = reply.status_code
with open("tried.json", "w") as f:
    json.dump({{"socket": kernel_socket, "tried": tried}}, f)
"""


KEEP_ENV = (
    "import json\nfrom recursa.api.client import configured\n"
    "json.dump(dict(zip(('RECURSA_API_SOCKET', 'RECURSA_KERNEL_TOKEN'), configured())),"
    " open('kernel.json', 'w'))"
)


def kernel_get(held: dict[str, str], route: str) -> int:
    """The status of a GET on the kernel socket with the kernel's token."""
    with httpx2.Client(
        transport=httpx2.HTTPTransport(uds=held["RECURSA_API_SOCKET"]),
        base_url="http://recursa",
        headers={"authorization": f"Bearer {held['RECURSA_KERNEL_TOKEN']}"},
    ) as http:
        return http.get(route).status_code


def python(code: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": code})


def wait_idle(env: dict[str, str], cwd: Path, session: str) -> None:
    result = recursa(["attach", session, "--until-idle", "--after", "0"], env, cwd, timeout=120)
    assert result.returncode == 0, result.stderr


def socket_kernels(home: Path, extra: str = "") -> None:
    """Kernels reach the API by the daemon's kernel socket and a token
    (``[kernel] api = "socket"``), the transport these tests are about."""
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "config.toml").write_text(f'[kernel]\napi = "socket"\n{extra}')


def run_detached(env: dict[str, str], cwd: Path, task: str) -> str:
    started = recursa(["run", "--detach", "--model", "openai/m", task], env, cwd)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip().splitlines()[-1]
    wait_idle(env, cwd, session)
    return session


def test_no_approval_a_kernel_sends_records_human(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    """A cell proposes a global entry, then tries to approve it with its kernel
    token on both sockets, and with the client token on the kernel socket.
    (The client token on the people's socket is the person's own door; keeping
    ``daemon.token`` and ``daemon.sock`` out of a kernel's reach is the sandbox's part.)"""
    # Unsandboxed on purpose: the cell must reach ``daemon.token`` to show that
    # the kernel socket refuses it (tests/security checks the sandbox hides it).
    socket_kernels(home, 'sandbox = "none"\n')
    stage = (
        "r = await harness.create('skill', 'double', 'doubles a number', scope='global',"
        " code='def double(x):\\n    return 2 * x\\n', reason='a cell said so')\n"
        "open('entry.txt', 'w').write(r['entry_id'])"
    )
    server.push(Reply(tool_calls=[python(stage)]), Reply(text="proposed"))
    session = run_detached(env, tmp_path, "propose")
    entry = (tmp_path / "entry.txt").read_text()
    server.push(
        Reply(tool_calls=[python(TRY_EVERY_DOOR.format(home=str(home), entry=entry))]),
        Reply(text="tried"),
    )
    sent = recursa(["send", session, "now approve it"], env, tmp_path)
    assert sent.returncode == 0, sent.stderr
    wait_idle(env, tmp_path, session)

    found = json.loads((tmp_path / "tried.json").read_text())
    assert found["socket"] == str(DaemonPaths.for_home(home).kernel_socket)
    assert found["socket"] == str(home / "kernel-api" / "kernel.sock")
    assert found["tried"] == {"people/kernel": 401, "kernel/client": 401, "kernel/kernel": 401}

    async def status() -> tuple[str, dict[str, object]]:
        async with DaemonClient(home) as client:
            detail = await client.call(HARNESS_SHOW, EntryRef(entry))
        return detail.entry.status, dict(detail.entry.review or {})

    state, review = asyncio.run(status())
    assert state == "proposed", review
    assert review.get("by") != "human"


def test_stop_revokes_the_kernel_token_before_it_returns(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    socket_kernels(home)
    server.push(Reply(tool_calls=[python(KEEP_ENV)]), Reply(text="kept"))
    session = run_detached(env, tmp_path, "keep your token")
    held = json.loads((tmp_path / "kernel.json").read_text())
    assert kernel_get(held, "/v1/kernel/subagents") == 200
    stopped = recursa(["stop", session], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    # At once: no grace period for what the kernel left behind.
    assert kernel_get(held, "/v1/kernel/subagents") == 401


def test_after_a_crash_the_kernel_socket_comes_back_in_the_same_directory(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    """A kernel sandbox has the directory mounted, not the socket: the next
    daemon binds a new socket inside the same directory, and the reattached
    kernel (which keeps its token) reaches it at the path it was given."""
    socket_kernels(home)
    server.push(Reply(tool_calls=[python(KEEP_ENV)]), Reply(text="kept"))
    run_detached(env, tmp_path, "keep your token")
    held = json.loads((tmp_path / "kernel.json").read_text())
    directory = Path(held["RECURSA_API_SOCKET"]).parent
    before = os.stat(directory).st_ino
    kill_daemon(home)
    assert Path(held["RECURSA_API_SOCKET"]).exists(), "a crash leaves the socket behind"
    started = recursa(["daemon", "start"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    assert os.stat(directory).st_ino == before
    assert sorted(p.name for p in directory.iterdir()) == ["kernel.sock"]
    assert kernel_get(held, "/v1/kernel/subagents") == 200

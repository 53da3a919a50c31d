"""A real daemon whose kernels reach the kernel API over their own Jupyter
channels (``[kernel] api = "comm"``): the real CLI, a real daemon process,
real kernels; only the model is scripted. The kernel holds no socket and no
token, and still runs ``rlm()``, its long poll, and ``agent_message``."""

from __future__ import annotations

import json
from pathlib import Path

from daemon_kit import recursa
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

CELL = """
import json, os
from recursa.api.client import configured
try:
    configured()
    held = "credentials"
except Exception as exc:
    held = type(exc).__name__
h = await rlm("echo me", name="kid", model="faux/echo")
answer = await h.result()
sent = await agent_message.send("hello child", to="child:kid")
json.dump({
    "held": held,
    "env": sorted(k for k in os.environ if k.startswith("RECURSA_")),
    "name": h.name,
    "answer": answer,
    "sent": sent.status,
}, open("comm.json", "w"))
"""


def test_a_comm_kernel_runs_rlm_and_messages_through_a_real_daemon(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "config.toml").write_text('[kernel]\napi = "comm"\n')
    server.push(Reply(tool_calls=[ToolCallSpec("python", {"code": CELL})]), Reply(text="done"))
    started = recursa(["run", "--detach", "--model", "openai/m", "delegate"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip().splitlines()[-1]
    idle = recursa(["attach", session, "--until-idle", "--after", "0"], env, tmp_path)
    assert idle.returncode == 0, idle.stderr
    found = json.loads((tmp_path / "comm.json").read_text())
    assert found["held"] == "RecursaError"  # no socket, no token in the kernel
    assert not {"RECURSA_API_SOCKET", "RECURSA_KERNEL_TOKEN"} & set(found["env"])
    assert found["name"] == "kid"
    assert found["answer"].endswith("] echo me")  # the echo model answers its task
    assert found["sent"] in {"queued", "delivered"}

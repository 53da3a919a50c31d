"""Daemon-owned sessions end to end: the real CLI, a real daemon on its socket,
real kernels, and the loopback fake model server. Only the model is scripted."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from daemon_kit import (
    agents,
    daemon_env,
    kill_daemon,
    kill_everything,
    recursa,
)
from recursa.daemon.client import DaemonClient
from recursa.testing import FakeModelServer, Reply, ToolCallSpec


def python(code: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": code})


def wait_idle(env: dict[str, str], cwd: Path, session: str) -> None:
    """Block (on the event stream, not a sleep) until the session is idle."""
    result = recursa(["attach", session, "--until-idle", "--after", "0"], env, cwd, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_detached_run_prints_its_id_and_finishes(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(tool_calls=[python("answer = 6 * 7")]), Reply(text="forty-two"))
    started = recursa(["run", "--detach", "--model", "openai/m", "compute"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip().splitlines()[-1]
    assert session.startswith("s-")
    wait_idle(env, tmp_path, session)
    [listed] = agents(env, tmp_path)
    assert {k: listed[k] for k in ("id", "name", "parent_id", "status")} == {
        "id": session,
        "name": None,
        "parent_id": None,
        "status": "idle",
    }
    logs = recursa(["logs", session], env, tmp_path)
    assert logs.returncode == 0, logs.stderr
    assert "compute" in logs.stdout
    assert "answer = 6 * 7" in logs.stdout
    assert "forty-two" in logs.stdout


def test_daemon_status_json_says_running_as_a_bool_and_counts_sessions_apart(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text="hello"))
    started = recursa(["run", "--detach", "--model", "openai/m", "hi"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    wait_idle(env, tmp_path, started.stdout.strip().splitlines()[-1])
    status = recursa(["daemon", "status", "--json"], env, tmp_path)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["running"] is True
    assert shown["running_sessions"] == 0
    assert shown["sessions"] == 1
    assert isinstance(shown["pid"], int)


def test_an_attached_run_prints_the_answer(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(tool_calls=[python("print(2 ** 8)")]), Reply(text="256"))
    result = recursa(["run", "--model", "openai/m", "2**8"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "256"
    assert "print(2 ** 8)" in result.stderr


def test_the_daemon_killed_mid_cell_recovers_the_session(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    """The acceptance check: kill -9 the daemon during a cell, restart it, and the
    session finishes; agents shows it idle; logs show the task, the work before
    the crash, and that it was recovered."""
    server.push(
        Reply(tool_calls=[python("import time\nprint('working', flush=True)\ntime.sleep(30)")]),
        Reply(text="finished after the crash"),
    )
    started = recursa(["run", "--detach", "--model", "openai/m", "long job"], env, tmp_path)
    session = started.stdout.strip().splitlines()[-1]

    async def wait_for_the_cell() -> None:
        async with DaemonClient(home) as client:
            # cell_started is stored, so a follower that subscribes late still
            # sees it (cell_output is transient and may have passed already).
            # The kernel may still be starting then (a sandboxed daemon keeps
            # no spare before its first session): wait for it to be ready too.
            seen: set[str] = set()
            async for record in client.events(session, follow=True):
                if record.event.type in ("cell_started", "kernel_status"):
                    seen.add(record.event.type)
                if seen == {"cell_started", "kernel_status"}:
                    return

    asyncio.run(asyncio.wait_for(wait_for_the_cell(), 60))
    kill_daemon(home)

    restarted = recursa(["daemon", "start"], env, tmp_path)
    assert restarted.returncode == 0, restarted.stderr
    wait_idle(env, tmp_path, session)
    [listed] = agents(env, tmp_path)
    assert listed["status"] == "idle"
    logs = recursa(["logs", session, "--json"], env, tmp_path)
    events = [json.loads(line) for line in logs.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert events[types.index("user_input")]["text"] == "long job"
    assert "time.sleep(30)" in next(e["code"] for e in events if e["type"] == "cell_started")
    assert any(e["type"] == "notice" and "recovered" in e["text"] for e in events)
    lost = next(e for e in events if e["type"] == "cell_finished")
    assert lost["status"] == "interrupted"
    assert events[types.index("turn_ended")]["answer"] == "finished after the crash"
    assert any(e["type"] == "kernel_status" and e["state"] == "reattached" for e in events)


def test_stop_unloads_and_a_message_brings_the_namespace_back(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(
        Reply(tool_calls=[python("kept = {'a': 1}")]),
        Reply(text="stored"),
        Reply(tool_calls=[python("print(kept['a'] + 1)")]),
        Reply(text="2"),
    )
    started = recursa(["run", "--detach", "--model", "openai/m", "store"], env, tmp_path)
    session = started.stdout.strip().splitlines()[-1]
    wait_idle(env, tmp_path, session)
    stopped = recursa(["stop", session], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"{session}: inactive"
    sent = recursa(["send", session, "use it"], env, tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert "delivered" in sent.stdout
    wait_idle(env, tmp_path, session)
    requests = server.requests
    last_results = [m["content"] for m in requests[-1].body["messages"] if m["role"] == "tool"]
    assert last_results[-1] == "2\n"


def test_shutdown_and_start_again_keep_queued_messages(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    server.push(Reply(text="one"), Reply(text="two"))
    started = recursa(["run", "--detach", "--model", "openai/m", "first"], env, tmp_path)
    session = started.stdout.strip().splitlines()[-1]
    wait_idle(env, tmp_path, session)
    down = recursa(["shutdown"], env, tmp_path)
    assert down.returncode == 0, down.stderr
    status = recursa(["daemon", "status", "--json"], env, tmp_path)
    assert json.loads(status.stdout) == {"running": False}
    assert status.returncode == 1
    # Any client command starts a daemon again; the session is there.
    sent = recursa(["send", session, "second"], env, tmp_path)
    assert sent.returncode == 0, sent.stderr
    wait_idle(env, tmp_path, session)
    logs = recursa(["logs", session, "--json"], env, tmp_path)
    answers = [
        json.loads(line)["answer"]
        for line in logs.stdout.splitlines()
        if json.loads(line)["type"] == "turn_ended"
    ]
    assert answers == ["one", "two"]


def test_after_a_restart_an_unloaded_session_still_shows_its_last_answer(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    server.push(Reply(text="the first answer"), Reply(text="the second answer"))
    ran = recursa(["run", "--model", "openai/m", "--name", "kept", "one"], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    sent = recursa(["send", "kept", "two"], env, tmp_path)
    assert sent.returncode == 0, sent.stderr
    wait_idle(env, tmp_path, "kept")
    down = recursa(["shutdown"], env, tmp_path)
    assert down.returncode == 0, down.stderr
    # A new daemon has not loaded the session: the answer comes from the store.
    logs = recursa(["logs", "kept"], env, tmp_path)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.rstrip().splitlines()[-1].endswith("last answer: the second answer")
    agents = recursa(["agents", "--json"], env, tmp_path)
    [info] = [i for i in json.loads(agents.stdout) if i["name"] == "kept"]
    assert info["status"] == "inactive"
    assert info["last_answer"] == "the second answer"


def test_an_unknown_session_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    result = recursa(["send", "s-nothing", "hi"], env, tmp_path)
    assert result.returncode == 6
    assert result.stderr.strip().count("\n") == 0
    assert "s-nothing" in result.stderr


FAN_OUT = (
    "handles = [await rlm(f'square {i}', name=f'sq{i}') for i in range(5)]\n"
    "print(len(handles), 'started')\n"
)


def fan_out_model(path: str, body: dict[str, object]) -> Reply:
    """A parent that starts five children and sums their answers; children that
    square their number in a cell. Decided from the request alone."""
    messages = body["messages"]
    assert isinstance(messages, list)
    users = [str(m.get("content")) for m in messages if m["role"] == "user"]
    if "] square " in users[0]:
        number = int(users[0].rsplit(" ", 1)[1])
        if messages[-1]["role"] == "tool":
            return Reply(text=str(number * number))
        return Reply(tool_calls=[python(f"print({number} ** 2)")])
    answers = [int(u.rsplit(": ", 1)[1]) for u in users if "finished: " in u]
    if len(answers) == 5:
        return Reply(text=f"the squares sum to {sum(answers)}")
    if not any(m["role"] == "tool" for m in messages):
        return Reply(tool_calls=[python(FAN_OUT)])
    return Reply(text=f"{len(answers)} of 5 answers so far")


def test_run_waits_for_the_whole_tree_and_usage_shows_it(home: Path, tmp_path: Path) -> None:
    # The acceptance of sub-agents: five children started in a loop, all five
    # answers back in the parent, which answers with them; then `recursa run`
    # exits (it used to hang when a child was still settling as the root idled).
    with FakeModelServer.in_thread(responder=fan_out_model) as server:
        env = daemon_env(home, server)
        try:
            result = recursa(["run", "--model", "openai/m", "sum five squares"], env, tmp_path)
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() == "the squares sum to 30"
            assert "5 sub-agents (5 idle)" in result.stderr
            listed = agents(env, tmp_path)
            [root] = [a for a in listed if a["parent_id"] is None]
            assert sorted(a["name"] for a in listed if a["parent_id"] == root["id"]) == [
                f"sq{i}" for i in range(5)
            ]
            usage = recursa(["usage", root["id"], "--json"], env, tmp_path)
            assert usage.returncode == 0, usage.stderr
            tree = json.loads(usage.stdout)["session"]
            assert len(tree["children"]) == 5
            assert all(c["own"]["output_tokens"] > 0 for c in tree["children"])
            assert tree["total"]["input_tokens"] > tree["own"]["input_tokens"]
            assert tree["total"]["input_tokens"] == tree["own"]["input_tokens"] + sum(
                c["total"]["input_tokens"] for c in tree["children"]
            )
        finally:
            kill_everything(home)


def _read_until(stream: IO[bytes], wanted: bytes, timeout: float) -> bytes:
    """What ``stream`` says until it contains ``wanted``; whatever came once
    ``timeout`` seconds pass without it."""
    seen = b""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        piece = os.read(fd, 4096)
        if not piece:
            break
        seen += piece
    return seen


def test_attach_during_a_streamed_reply_shows_it_from_its_start_once(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    """The second reply streams four pieces, then stalls. A watcher subscribed
    before it began waits for all four; only then does ``attach`` start, and it
    shows the reply in progress from its first piece, once."""
    pieces = [f"p{i:03d}-" for i in range(8)]
    shown = "".join(pieces[:4])
    server.push(Reply(text="one"), Reply(text="".join(pieces), chunk=5, stall_after=1 + 4))
    started = recursa(["run", "--detach", "--model", "openai/m", "first"], env, tmp_path)
    session = started.stdout.strip().splitlines()[-1]
    wait_idle(env, tmp_path, session)

    async def send_and_wait_for_the_pieces() -> None:
        async with DaemonClient(home) as client:
            last = await _last_seq(client, session)
            streamed = ""
            # From just before the last stored record: it comes at once, and
            # then the stream is subscribed.
            events = client.events(session, after=last - 1, follow=True)
            assert (await anext(events)).seq == last
            sent = recursa(["send", session, "second"], env, tmp_path)
            assert sent.returncode == 0, sent.stderr
            async for record in events:
                if record.event.type == "text_delta":
                    streamed += record.event.text
                if streamed == shown:
                    break
            await events.aclose()

    asyncio.run(asyncio.wait_for(send_and_wait_for_the_pieces(), 60))
    with subprocess.Popen(
        [sys.executable, "-m", "recursa", "attach", session],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,  # left open: attach reads typed lines
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stderr is not None
        try:
            seen = _read_until(proc.stderr, shown.encode(), timeout=30)
        finally:
            proc.kill()
    assert seen.count(shown.encode()) == 1, seen
    assert seen.count(pieces[0].encode()) == 1, seen
    stopped = recursa(["stop", session], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr


async def _last_seq(client: DaemonClient, session: str) -> int:
    last = 0
    async for record in client.events(session, after=0, follow=False):
        last = record.seq
    return last


def test_attach_until_idle_waits_for_the_turn_a_message_started(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    """Replayed from the start (``--after 0``), the idle status that ended the
    previous turn is history: ``--until-idle`` waits for the turn the message
    started. (It used to return at the old idle, before the new turn ran.)"""
    server.push(Reply(text="first"))
    started = recursa(["run", "--detach", "--model", "openai/m", "one"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip().splitlines()[-1]
    wait_idle(env, tmp_path, session)
    # The second turn's cell holds until the test says go, after attach is up.
    hold = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.01)\nprint('went')"
    server.push(Reply(tool_calls=[python(hold)]), Reply(text="second answer"))
    sent = recursa(["send", session, "two"], env, tmp_path)
    assert sent.returncode == 0, sent.stderr
    attach = subprocess.Popen(
        [sys.executable, "-m", "recursa", "attach", session, "--until-idle", "--after", "0"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert attach.stderr is not None
        header = attach.stderr.readline()
        assert "attached to" in header
        (tmp_path / "go").write_text("")
        _, rest = attach.communicate(timeout=120)
    finally:
        if attach.poll() is None:
            attach.kill()
    assert attach.returncode == 0, rest
    assert "first" in rest
    assert "went" in rest
    assert "second answer" in rest

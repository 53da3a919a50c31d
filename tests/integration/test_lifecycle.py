"""Session lifecycle on real kernels, in-process: unloading with a snapshot,
loading with a restore, restore hooks, idle unloading by the injected clock,
the durable inbox, and recovery of a session from its log."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from recursa.config import SessionsConfig
from recursa.errors import UncertainCommand
from recursa.models.faux import code, register_script, reply
from recursa.models.types import ToolCall
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    KernelStatus,
    ModelUsage,
    Notice,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.protocol.person_ops import SendTo, SessionRef
from recursa.protocol.wire import CommandKey
from recursa.runtime.host import RuntimeHost
from recursa.testing import make_runtime


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def outputs(session: object) -> list[str]:
    return [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]  # type: ignore[attr-defined]


def kernel_states(session: object) -> list[str]:
    return [r.event.state for r in session.history() if isinstance(r.event, KernelStatus)]  # type: ignore[attr-defined]


async def test_unload_snapshots_and_the_next_input_restores(home: Path, tmp_path: Path) -> None:
    register_script(
        "unload",
        [
            code("x = 41\nimport json\ndata = {'k': [1, 2]}"),
            reply("stored"),
            code("print(x + 1, json.dumps(data))"),
            reply("42"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/unload", cwd=tmp_path)
        await session.ask("store")
        pid = runtime.store.kernels.get(session.id)
        assert pid is not None
        await session.unload()
        assert session.status == "inactive"
        assert (
            not psutil.pid_exists(pid.pid)
            or psutil.Process(pid.pid).status() == psutil.STATUS_ZOMBIE
        )
        assert runtime.store.kernels.get(session.id) is None
        end = await session.ask("use it")
        assert end is not None and end.answer == "42"
        assert outputs(session)[-1] == '42 {"k": [1, 2]}\n'
        assert kernel_states(session)[-2:] == ["restored", "snapshotted"]


async def test_unpicklable_values_are_listed_and_restore_hooks_rebuild_them(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / "data.txt").write_text("from the file")
    setup = (
        "handle = open('data.txt')\n"
        "y = 2\n"
        "def reopen():\n"
        "    global handle\n"
        "    handle = open('data.txt')\n"
        "on_restore(reopen)"
    )
    register_script(
        "hooks", [code(setup), reply("ok"), code("print(y, handle.read())"), reply("done")]
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/hooks", cwd=tmp_path)
        await session.ask("open")
        await session.unload()
        snapshotted = [
            r.event.detail
            for r in session.history()
            if isinstance(r.event, KernelStatus) and r.event.state == "snapshotted"
        ]
        assert "handle" in snapshotted[-1]  # listed as not kept, not fatal
        await session.ask("read")
        assert outputs(session)[-1] == "2 from the file\n"


async def test_idle_sessions_unload_by_the_injected_clock(home: Path, tmp_path: Path) -> None:
    clock = Clock()
    register_script("idle", [code("z = 1"), reply("ok")])
    async with make_runtime(
        home, clock=clock, sessions=SessionsConfig(idle_timeout=60.0)
    ) as runtime:
        session = await runtime.create_session(model="faux/idle", cwd=tmp_path)
        await session.ask("go")
        clock.now += 59
        assert await runtime.unload_idle() == []
        clock.now += 2
        assert await runtime.unload_idle() == [session.id]
        assert session.status == "inactive"


async def test_a_kernel_killed_mid_cell_is_restarted_and_restored(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "kill",
        [
            code("x = 5"),
            reply("set"),
            code("import time\nprint('working', flush=True)\ntime.sleep(60)"),
            code("print(x)"),
            reply("survived"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/kill", cwd=tmp_path)
        await session.ask("set x")
        working = asyncio.Event()
        session.listen(lambda r: working.set() if r.event.type == "cell_output" else None)
        session.send("work")
        await asyncio.wait_for(working.wait(), 30)
        row = runtime.store.kernels.get(session.id)
        assert row is not None
        os.kill(row.pid, signal.SIGKILL)
        end = await asyncio.wait_for(session.wait_idle(), 30)
        assert end is not None and end.answer == "survived"
        cells = [r.event for r in session.history() if isinstance(r.event, CellFinished)]
        assert cells[1].status == "kernel_died"
        assert cells[2].output == "5\n"  # restored from the snapshot taken after turn 1
        assert "restored" in kernel_states(session)


async def test_messages_are_durable_and_delivered_once(home: Path, tmp_path: Path) -> None:
    register_script("inbox", [reply("first"), reply("second")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/inbox", cwd=tmp_path)
        message = session.send("hello")
        assert runtime.store.inbox.get(message.id) is not None  # stored before any turn
        await session.wait_idle()
        delivered = runtime.store.inbox.get(message.id)
        assert delivered is not None and delivered.status == "delivered"
        inputs = [r for r in session.history() if r.event.type == "user_input"]
        assert [r.seq for r in inputs] == [delivered.delivered_seq]


async def test_a_session_is_rebuilt_from_its_log(home: Path, tmp_path: Path) -> None:
    register_script("rebuild", [code("a = 1"), reply("one")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/rebuild", cwd=tmp_path)
        await session.ask("go")
        session_id = session.id
    script = register_script("rebuild", [code("print('again')"), reply("two")])
    async with make_runtime(home) as runtime:
        again = runtime.get(session_id)
        assert again.last_answer == "one"
        end = await again.ask("more")
        assert end is not None and end.answer == "two"
        # The model saw the earlier turn: the context came back from the log.
        assert "go" in str(script.requests[0].messages[0])
        assert [
            c.cell for c in (r.event for r in again.history()) if isinstance(c, CellFinished)
        ] == [1, 2]


async def test_a_turn_cut_short_resumes_and_its_lost_cell_is_not_rerun(
    home: Path, tmp_path: Path
) -> None:
    """Recovery of a log that ends mid-cell, exactly as a kill -9 leaves it."""
    ledger = tmp_path / "ledger.txt"
    cell = f"open({str(ledger)!r}, 'a').write('ran\\n')"
    call = ToolCall("call_1", "python", json.dumps({"code": cell}))
    register_script("cut", [])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/cut", cwd=tmp_path)
        runtime.store.append_many(
            session.id,
            [
                UserInput(text="write once"),
                TurnStarted(turn=1),
                AssistantReply(text="", tool_calls=(call,), step=1),
                ModelUsage(model="faux/cut", input_tokens=10, output_tokens=5),
                CellStarted(cell=1, call_id="call_1", code=cell),
            ],
        )
        session_id = session.id
    script = register_script("cut", [reply("resumed")])
    async with make_runtime(home) as runtime:
        [recovered] = await runtime.recover()
        assert recovered.id == session_id
        end = await asyncio.wait_for(recovered.wait_idle(), 30)
        assert end is not None and end.answer == "resumed"
        history = [r.event for r in recovered.history()]
        assert any(isinstance(e, Notice) and "recovered" in e.text for e in history)
        lost = [e for e in history if isinstance(e, CellFinished)]
        assert [(c.cell, c.status) for c in lost] == [(1, "interrupted")]
        assert not ledger.exists()  # the lost cell was never run again
        assert "was not run again" in str(script.requests[0].messages[-1])
        assert [e.reason for e in history if isinstance(e, TurnEnded)] == ["answered"]


async def test_host_commands_are_idempotent_and_pending_ones_uncertain(
    home: Path, tmp_path: Path
) -> None:
    register_script("idem", [reply("a"), reply("b"), reply("c")])
    async with make_runtime(home) as runtime:
        host = RuntimeHost(runtime)
        session = await runtime.create_session(model="faux/idem", cwd=tmp_path)
        key = CommandKey("client-1", "cmd-1")
        first = await host.people.send(SendTo(session.id, "once"), key)
        again = await host.people.send(SendTo(session.id, "once"), key)
        assert again == first
        await session.wait_idle()
        texts = [r.event.text for r in session.history() if r.event.type == "user_input"]
        assert texts == ["once"]
        runtime.store.commands.begin("client-1", "cmd-2", "stop")  # begun, never finished
        with pytest.raises(UncertainCommand, match="not run again"):
            await host.people.stop(SessionRef(session.id), CommandKey("client-1", "cmd-2"))
        assert session.status == "idle"  # the stop did not happen

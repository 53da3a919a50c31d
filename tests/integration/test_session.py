"""A whole session on real kernels, with the model scripted by the faux provider."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from recursa.config import Limits
from recursa.errors import ModelUnavailable
from recursa.models.faux import code, fault, register_script, reply
from recursa.protocol.events import CellFinished, EventRecord, KernelStatus, TurnEnded
from recursa.testing import make_runtime


async def test_a_later_turn_uses_a_variable_from_an_earlier_one(home: Path, tmp_path: Path) -> None:
    register_script(
        "two-turns",
        [code("secret = 6 * 7"), reply("stored"), code("print(secret + 1)"), reply("43")],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/two-turns", cwd=tmp_path)
        first = await session.ask("compute and store")
        second = await session.ask("now use it")
        assert first is not None
        assert first.answer == "stored"
        assert second is not None
        assert second.answer == "43"
        outputs = [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]
        assert outputs == ["", "43\n"]


async def test_events_are_stored_in_order_with_the_session_status(
    home: Path, tmp_path: Path
) -> None:
    register_script("order", [code("print('hi')"), reply("done")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/order", cwd=tmp_path)
        seen: list[EventRecord] = []
        session.listen(seen.append)
        await session.ask("go")
        stored = session.history()
        types = [r.event.type for r in stored]
        assert types[0] == "session_created"
        assert types[-1] == "status_changed"
        assert session.status == "idle"
        assert [r.seq for r in stored] == sorted(r.seq for r in stored)
        # Listeners see every stored event, in order, plus transient ones (seq 0).
        assert [r.seq for r in seen if r.seq] == [r.seq for r in stored[1:]]
        assert any(r.event.type == "cell_output" for r in seen if not r.seq)
        assert runtime.store.session(session.id).status == "idle"


async def test_cells_run_in_the_sessions_working_directory(home: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    register_script(
        "cwd",
        [code("import os; print(os.getcwd())"), code("%%bash\necho made > file.txt"), reply("ok")],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/cwd", cwd=workdir)
        await session.ask("where are you")
        outputs = [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]
        assert outputs[0].strip() == str(workdir.resolve())
        assert (workdir / "file.txt").read_text() == "made\n"


async def test_large_output_is_bounded_for_the_model_and_kept_in_full(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "big",
        [
            code("for i in range(20000): print(f'line {i:05d}')"),
            code("print(len(_out[1]))"),
            reply("ok"),
        ],
    )
    limits = Limits(output_chars=2000)
    async with make_runtime(home, limits=limits) as runtime:
        session = await runtime.create_session(model="faux/big", cwd=tmp_path)
        await session.ask("print a lot")
        cells = [r.event for r in session.history() if isinstance(r.event, CellFinished)]
        big = cells[0]
        full = "".join(f"line {i:05d}\n" for i in range(20000))
        assert big.truncated
        assert big.chars == len(full)
        assert len(big.output) < 2300
        assert big.output.startswith("line 00000")
        assert big.output.rstrip().endswith("line 19999")
        assert "_out[1]" in big.output
        assert f"{len(full):,}" in big.output
        assert runtime.store.cell_output(session.id, 1) == full
        # ... and the model can read it whole from the kernel.
        assert cells[1].output.strip() == str(len(full))


async def test_a_cell_that_times_out_is_reported_and_the_session_goes_on(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "slow", [code("x = 1"), code("import time; time.sleep(60)"), code("print(x)"), reply("ok")]
    )
    async with make_runtime(home, limits=Limits(cell_timeout=1.0)) as runtime:
        session = await runtime.create_session(model="faux/slow", cwd=tmp_path)
        end = await session.ask("sleep")
        assert end is not None
        assert end.reason == "answered"
        cells = [r.event for r in session.history() if isinstance(r.event, CellFinished)]
        assert cells[1].status == "timeout"
        assert "limit" in cells[1].output
        assert cells[2].output.strip() == "1"  # interrupted, not restarted: variables kept


async def test_a_dead_kernel_is_restarted_and_the_model_told(home: Path, tmp_path: Path) -> None:
    register_script(
        "die", [code("import os; os._exit(1)"), code("print('alive again')"), reply("ok")]
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/die", cwd=tmp_path)
        await asyncio.wait_for(session.ask("die"), 30)
        history = session.history()
        cells = [r.event for r in history if isinstance(r.event, CellFinished)]
        assert cells[0].status == "kernel_died"
        assert "restart" in cells[0].output
        assert cells[1].output.strip() == "alive again"
        assert any(isinstance(r.event, KernelStatus) for r in history)


async def test_interrupt_stops_the_turn_and_keeps_the_session(home: Path, tmp_path: Path) -> None:
    register_script(
        "long", [code("import time; time.sleep(60)"), code("print('after')"), reply("second")]
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/long", cwd=tmp_path)
        started = asyncio.Event()
        session.listen(lambda r: started.set() if r.event.type == "cell_started" else None)
        session.send("sleep")
        await asyncio.wait_for(started.wait(), 30)
        await session.interrupt()
        assert session.last_end is not None
        assert session.last_end.reason == "interrupted"
        end = await session.ask("carry on")
        assert end is not None
        assert end.answer == "second"
        ends = [r.event.reason for r in session.history() if isinstance(r.event, TurnEnded)]
        assert ends == ["interrupted", "answered"]


async def test_provider_failure_ends_the_turn_with_the_reason(home: Path, tmp_path: Path) -> None:
    register_script("down", [fault("server_error")] * 10)
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/down", cwd=tmp_path)
        end = await session.ask("hello")
        assert end is not None
        assert end.reason == "provider_error"
        assert len(runtime.retry_sleep.delays) == 4  # type: ignore[attr-defined]


async def test_unknown_model_is_refused_before_anything_is_written(
    home: Path, tmp_path: Path
) -> None:
    async with make_runtime(home) as runtime:
        with pytest.raises(ModelUnavailable):
            await runtime.create_session(model="nowhere/model", cwd=tmp_path)
        assert runtime.store.sessions() == []


async def test_agents_md_reaches_the_model(home: Path, tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Always answer in French.")
    script = register_script("ctx", [reply("d'accord")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/ctx", cwd=tmp_path)
        await session.ask("hi")
        assert "Always answer in French." in script.requests[0].system


async def test_an_interrupted_cell_is_recorded_with_what_it_printed(
    home: Path, tmp_path: Path
) -> None:
    src = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    register_script("partial", [code(src), reply("never")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/partial", cwd=tmp_path)
        printed = asyncio.Event()
        session.listen(lambda r: printed.set() if r.event.type == "cell_output" else None)
        session.send("run it")
        await asyncio.wait_for(printed.wait(), 30)
        printed_at = time.monotonic()  # the cell ran at least from its output to the interrupt
        interrupted_at = time.monotonic()
        await session.interrupt()
        cells = [r.event for r in session.history() if isinstance(r.event, CellFinished)]
        assert len(cells) == 1
        assert cells[0].status == "interrupted"
        assert "started" in cells[0].output
        assert "may have partly run" in cells[0].output
        # It reports the time it ran, not 0.00 s.
        assert cells[0].duration > 0
        assert cells[0].duration >= interrupted_at - printed_at


async def test_interrupt_leaves_follow_ups_queued_and_returns_at_once(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "queued", [code("import time; time.sleep(60)"), reply("first"), reply("follow-up answered")]
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/queued", cwd=tmp_path)
        started = asyncio.Event()
        session.listen(lambda r: started.set() if r.event.type == "cell_started" else None)
        session.send("sleep")
        await asyncio.wait_for(started.wait(), 30)
        session.send("then this", mode="follow_up")
        await asyncio.wait_for(session.interrupt(), 10)  # does not run the follow-up first
        assert session.status == "idle"
        ends = [r.event.reason for r in session.history() if isinstance(r.event, TurnEnded)]
        assert ends == ["interrupted"]
        end = await session.ask("go on")  # the queued follow-up runs with the next input
        assert end is not None and end.answer == "first"
        texts = [r.event.text for r in session.history() if r.event.type == "user_input"]
        assert texts[-2:] == ["then this", "go on"]


async def test_undecodable_text_is_stored_and_read_back(home: Path, tmp_path: Path) -> None:
    bad = "caf\udce9 \ud800"  # what non-UTF-8 bytes become in Python
    register_script("surrogates", [code(f"print({bad!r})"), reply(f"echo: {bad}")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/surrogates", cwd=tmp_path)
        end = await session.ask(f"task with {bad}")
        assert end is not None and end.answer == f"echo: {bad}"
        inputs = [r.event.text for r in session.history() if r.event.type == "user_input"]
        assert inputs == [f"task with {bad}"]


async def test_a_session_is_running_as_soon_as_send_returns(home: Path, tmp_path: Path) -> None:
    # Whoever sends and then waits for the session to settle must not take the
    # idle status from before the message for the end of its turn.
    register_script("running-at-once", [reply("first"), reply("second")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/running-at-once", cwd=tmp_path)
        await session.ask("one")
        assert runtime.store.session(session.id).status == "idle"
        session.send("two")  # no await between the send and the checks
        assert session.status == "running"
        assert runtime.store.session(session.id).status == "running"
        last = session.history()[-1].event
        assert last.type == "status_changed" and getattr(last, "status", None) == "running"
        await session.wait_idle()
        assert session.last_end is not None and session.last_end.answer == "second"

"""Autonomous mode end to end: real kernels and real gate processes with the
faux provider (in-process runtime), then the acceptance through the real CLI,
a real daemon and the loopback fake server."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon_kit import recursa as recursa_cli
from recursa.config import Limits
from recursa.control.autonomous import RunState, Spec
from recursa.models.faux import code, register_script, reply
from recursa.models.types import Request
from recursa.protocol.events import AutonomousEnded, GateChecked, TurnEnded, UserInput
from recursa.runtime import Runtime
from recursa.runtime.autonomy import run_gate
from recursa.session import Session
from recursa.testing import FakeModelServer, Reply, ToolCallSpec, make_runtime

GATE = "test -f done.txt"
CREATE_DONE = "open('done.txt', 'w').write('ok')"


def gates(session: Session) -> list[GateChecked]:
    return [r.event for r in session.history() if isinstance(r.event, GateChecked)]


def run_end(session: Session) -> AutonomousEnded:
    [end] = [r.event for r in session.history() if isinstance(r.event, AutonomousEnded)]
    return end


def gate_inputs(session: Session) -> list[str]:
    return [
        r.event.text
        for r in session.history()
        if isinstance(r.event, UserInput) and r.event.source == "gate"
    ]


def last_text(request: Request) -> str:
    return request.messages[-1].text


async def autonomous(runtime: Runtime, model: str, cwd: Path, spec: Spec, task: str) -> Session:
    """Start an autonomous run and wait (on the session, not a clock) until it is over."""
    spec = runtime.autonomy.check(spec, model, task=task)
    session = await runtime.create_session(model=model, cwd=cwd)
    runtime.autonomy.start(session, spec, task)
    await session.wait_idle()
    return session


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


# -- in-process, faux provider --------------------------------------------------------


async def test_a_gate_that_fails_then_passes(home: Path, work: Path) -> None:
    script = register_script(
        "auto-pass",
        [reply("I will look first"), code(CREATE_DONE), reply("created done.txt")],
    )
    async with make_runtime(home) as runtime:
        session = await autonomous(
            runtime, "faux/auto-pass", work, Spec(gates=(GATE,), max_turns=5), "make done.txt"
        )
        checked = gates(session)
        assert [(g.status, g.exit_code, g.turn) for g in checked] == [
            ("failed", 1, 1),
            ("passed", 0, 2),
        ]
        assert run_end(session) == AutonomousEnded(
            outcome="passed", detail="autonomous: gates passed (1/1)", turns=2
        )
        state = runtime.autonomy.state(session.id)
        assert state is not None
        assert (state.status, state.turns, state.outcome) == ("passed", 2, "passed")
        # The first turn was told how the run ends; the second, why it goes on.
        first = script.requests[0]
        assert any(GATE in m.text and "[gate]" in m.text for m in first.messages)
        assert "make done.txt" in str(first.messages)
        told = last_text(script.requests[1])
        assert told.startswith("[gate]")
        assert f"Gate 1 of 1, `{GATE}`, failed (exit 1" in told
        assert "1 turn of 5" in told
        assert (work / "done.txt").read_text() == "ok"
        assert session.status == "idle"


async def test_an_unchanged_workspace_does_not_rerun_the_gate(
    home: Path, work: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "gate-runs"  # outside the workspace: counting changes nothing there
    gate = f"echo run >> {runs}; {GATE}"
    script = register_script(
        "auto-unchanged",
        [reply("thinking"), reply("still thinking"), code(CREATE_DONE), reply("now it exists")],
    )
    async with make_runtime(home) as runtime:
        session = await autonomous(
            runtime, "faux/auto-unchanged", work, Spec(gates=(gate,), max_turns=5), "make it"
        )
        assert [g.status for g in gates(session)] == ["failed", "skipped", "passed"]
        assert runs.read_text().splitlines() == ["run", "run"]  # not three times
        told = gate_inputs(session)
        assert "has not changed since gate 1 of 1" in told[2]
        assert "not run again" in told[2]
        assert "has not changed" in last_text(script.requests[2])
        assert run_end(session).outcome == "passed"


async def test_max_turns_reached_is_not_success(home: Path, work: Path) -> None:
    register_script("auto-limit", [reply("one"), code("x = 1"), reply("two")])
    async with make_runtime(home) as runtime:
        session = await autonomous(
            runtime,
            "faux/auto-limit",
            work,
            Spec(gates=("test -f never.txt",), max_turns=2),
            "try",
        )
        end = run_end(session)
        assert end == AutonomousEnded(
            outcome="max_turns",
            detail="autonomous: stopped, max_turns 2 reached; gate 'test -f never.txt' "
            "still failing",
            turns=2,
        )
        turns = [r.event for r in session.history() if isinstance(r.event, TurnEnded)]
        assert [t.answer for t in turns] == ["one", "two"]  # answered, yet not success
        state = runtime.autonomy.state(session.id)
        assert state is not None
        assert state.status == "stopped"


async def test_a_token_limit_of_the_run_stops_it_through_the_budget(home: Path, work: Path) -> None:
    script = register_script("auto-tokens", [reply("never called")])
    async with make_runtime(home) as runtime:
        session = await autonomous(
            runtime, "faux/auto-tokens", work, Spec(gates=(GATE,), max_tokens=100), "go"
        )
        assert script.requests == []  # the budget refused the first call: it cannot fit
        [turn] = [r.event for r in session.history() if isinstance(r.event, TurnEnded)]
        assert turn.reason == "budget"
        end = run_end(session)
        assert end.outcome == "max_tokens"
        assert end.detail.startswith("autonomous: stopped, max_tokens 100 reached")


async def test_gate_output_is_bounded_for_the_model(home: Path, work: Path) -> None:
    script = register_script("auto-loud", [reply("a"), reply("b")])
    gate = "seq 1 200000; echo last line; exit 3"
    async with make_runtime(home, limits=Limits(output_chars=2000)) as runtime:
        session = await autonomous(
            runtime, "faux/auto-loud", work, Spec(gates=(gate,), max_turns=2), "go"
        )
        first = gates(session)[0]
        assert (first.status, first.exit_code, first.truncated) == ("failed", 3, True)
        assert first.chars > 1_000_000
        assert len(first.output) < 2300
        assert first.output.startswith("1\n2\n3\n")
        assert first.output.rstrip().endswith("200000\nlast line")
        told = last_text(script.requests[1])
        assert len(told) < 3500
        assert "last line" in told
        assert "omitted" in told


async def test_the_gate_cannot_see_credentials(
    home: Path, work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's environment holds a provider key; the gate gets the kernel's
    allow-listed environment, so neither the key nor an unlisted variable reach it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-gate-0001")
    monkeypatch.setenv("RECURSA_TEST_UNLISTED", "unlisted-canary")
    seen = tmp_path / "gate-env.txt"
    register_script("auto-env", [reply("done")])
    gate = f'env > {seen}; test -z "$OPENAI_API_KEY" && test -n "$PATH"'
    async with make_runtime(home, env={"OPENAI_API_KEY": "sk-canary-gate-0001"}) as runtime:
        session = await autonomous(runtime, "faux/auto-env", work, Spec(gates=(gate,)), "go")
        assert run_end(session).outcome == "passed"
    env = seen.read_text()
    assert "sk-canary" not in env
    assert "unlisted-canary" not in env
    assert "PATH=" in env


async def test_a_restart_checks_a_turn_whose_gates_never_ran(home: Path, work: Path) -> None:
    """The daemon stopped after a turn ended and before its gates ran: when the
    runtime comes back, that turn is checked and the run goes on."""
    register_script("auto-restart", [reply("first"), code(CREATE_DONE), reply("made it")])
    spec = Spec(gates=(GATE,), max_turns=5)
    async with make_runtime(home) as runtime:
        runtime.controls.clear()  # as if the daemon died before the control ran
        session = await autonomous(runtime, "faux/auto-restart", work, spec, "go")
        assert gates(session) == []
        session_id = session.id
    async with make_runtime(home) as runtime:
        await runtime.recover()
        await runtime.autonomy.join()
        session = runtime.get(session_id)
        await session.wait_idle()
        assert [g.status for g in gates(session)] == ["failed", "passed"]
        assert run_end(session).outcome == "passed"
        state = RunState.from_json(runtime.store.session(session_id).meta["autonomous"])
        assert state is not None
        assert state.turns == 2


async def test_after_a_restart_a_gate_and_a_goal_do_not_both_continue(
    home: Path, work: Path
) -> None:
    """A session with an autonomous run and a goal, stopped before its gates
    ran: on recovery the controls run in order, so the failed gate continues
    it alone (the goal sees input waiting), and the goal continues it after
    the run ended."""
    register_script(
        "auto-goal",
        [
            reply("first"),
            code(CREATE_DONE),
            reply("made it"),
            code("await goal.complete()"),
            reply("goal done"),
        ],
    )
    spec = Spec(gates=(GATE,), max_turns=5)
    async with make_runtime(home) as runtime:
        runtime.controls.clear()  # as if the daemon died before the controls ran
        session = await autonomous(runtime, "faux/auto-goal", work, spec, "go")
        runtime.store.goals.create(session.id, "make done.txt", None)  # set, not yet prompted
        session_id = session.id
    async with make_runtime(home) as runtime:
        await runtime.recover()
        await runtime.autonomy.join()
        session = runtime.get(session_id)
        while session.running:
            await session.wait_idle()
        batches: list[list[str]] = [[]]
        for record in session.history():
            if isinstance(record.event, UserInput):
                batches[-1].append(record.event.source)
            elif isinstance(record.event, TurnEnded):
                batches.append([])
        continued = [b for b in batches[1:] if "gate" in b or "goal" in b]  # after the task
        assert continued[0] == ["gate"]  # the gate alone, not the goal beside it
        assert [g.status for g in gates(session)] == ["failed", "passed"]
        assert run_end(session).outcome == "passed"
        assert continued[1] == ["goal"]
        assert session.last_answer == "goal done"


# -- the gate runner ---------------------------------------------------------------------


async def test_a_gate_past_its_time_limit_is_killed(work: Path) -> None:
    result = await run_gate(
        "echo started; sleep 60", cwd=work, env={}, time_limit=0.5, output_chars=1000
    )
    assert result.status == "timeout"
    assert result.exit_code is None
    assert result.output == "started\n"


async def test_what_a_gate_leaves_running_is_killed(work: Path) -> None:
    """A background process keeps the output pipe open; the gate still ends
    when its shell does, and leaves nothing behind (the fixture checks)."""
    result = await run_gate(
        "sleep 60 & echo bye; exit 2", cwd=work, env={}, time_limit=30, output_chars=1000
    )
    assert (result.status, result.exit_code, result.output) == ("failed", 2, "bye\n")
    assert result.duration < 10


async def test_a_gate_in_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    result = await run_gate("true", cwd=tmp_path / "gone", env={}, time_limit=5, output_chars=1000)
    assert result.status == "error"
    assert "could not start the gate" in result.output


# -- the acceptance: the real CLI, a real daemon -----------------------------------------


def python(source: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": source})


def test_the_cli_runs_until_the_gate_passes(
    server: FakeModelServer, env: dict[str, str], work: Path
) -> None:
    server.push(
        Reply(text="I looked around"),
        Reply(tool_calls=[python(CREATE_DONE)]),
        Reply(text="created done.txt"),
    )
    result = recursa_cli(
        ["run", "--autonomous", "--gate", GATE, "--max-turns", "5", "-m", "openai/m", "make it"],
        env,
        work,
    )
    assert result.returncode == 0, result.stderr
    assert "autonomous: gates passed (1/1)" in result.stderr
    assert result.stdout.strip() == "created done.txt"
    assert (work / "done.txt").exists()
    bodies = [str(r.body) for r in server.requests]
    assert len(bodies) == 3
    assert f"Gate 1 of 1, `{GATE}`, failed" in bodies[1]


def test_the_cli_exits_non_zero_at_max_turns(
    server: FakeModelServer, env: dict[str, str], work: Path
) -> None:
    server.push(Reply(text="one"), Reply(text="two"))
    result = recursa_cli(
        [
            "run",
            "--autonomous",
            "--gate",
            'test -z "$OPENAI_API_KEY"',  # the daemon has one; its gates must not
            "--gate",
            "test -f never.txt",
            "--max-turns",
            "2",
            "-m",
            "openai/m",
            "try",
        ],
        env,
        work,
    )
    assert result.returncode == 8, result.stderr
    assert (
        "autonomous: stopped, max_turns 2 reached; gate 'test -f never.txt' still failing "
        "(1/2 passed)" in result.stderr
    )
    assert "gates passed" not in result.stderr


def test_the_cli_without_the_daemon_runs_until_the_gate_passes(
    server: FakeModelServer, env: dict[str, str], work: Path
) -> None:
    server.push(Reply(tool_calls=[python(CREATE_DONE)]), Reply(text="done at once"))
    result = recursa_cli(
        ["run", "--no-daemon", "--autonomous", "--gate", GATE, "-m", "openai/m", "make it"],
        env,
        work,
    )
    assert result.returncode == 0, result.stderr
    assert "recursa: autonomous: gates passed (1/1)" in result.stderr
    assert result.stdout.strip() == "done at once"


def test_autonomous_flags_are_checked(env: dict[str, str], work: Path) -> None:
    alone = recursa_cli(["run", "--gate", GATE, "-m", "openai/m", "x"], env, work)
    assert alone.returncode == 2
    assert "--gate needs --autonomous" in alone.stderr
    gateless = recursa_cli(["run", "--autonomous", "-m", "openai/m", "x"], env, work)
    assert gateless.returncode == 2
    assert "needs at least one --gate" in gateless.stderr

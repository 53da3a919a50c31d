"""Goals and schedules in a real runtime: real kernels, the kernel-side API
served in-process (make_runtime), faux models. Restarts are a runtime closed
and another opened on the same home; schedules tick at the times the tests
give them (``scheduler.tick(now)``): nothing sleeps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from recursa.errors import UsageError
from recursa.models.faux import code, register_script, reply
from recursa.models.types import Usage
from recursa.protocol.control import AddSchedule
from recursa.protocol.events import CellFinished, CellStarted, Notice, TurnEnded, UserInput
from recursa.protocol.person_ops import GoalChange, SessionRef
from recursa.runtime.host import RuntimeHost
from recursa.session import Session
from recursa.testing import make_runtime

TIMEOUT = 120
T0 = 1_750_000_000.0
HOUR = 3600.0
CALL = Usage(input_tokens=300, output_tokens=100)
"""What each scripted model call reports: 400 tokens."""


def inputs(session: Session) -> list[UserInput]:
    return [r.event for r in session.history() if isinstance(r.event, UserInput)]


def notices(session: Session) -> list[str]:
    return [r.event.text for r in session.history() if isinstance(r.event, Notice)]


def ends(session: Session) -> list[TurnEnded]:
    return [r.event for r in session.history() if isinstance(r.event, TurnEnded)]


def outputs(session: Session) -> list[str]:
    return [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]


async def idle(session: Session) -> None:
    await asyncio.wait_for(session.wait_idle(), TIMEOUT)


# -- goals -------------------------------------------------------------------------------


async def test_a_goal_is_continued_until_the_agent_completes_it(home: Path, tmp_path: Path) -> None:
    register_script(
        "achiever",
        [
            code("g = await goal.get()\nprint(g['status'], g['objective'], g['budget'])"),
            reply("read it"),
            reply("still going"),
            code("done = await goal.complete('all three steps')\nprint(done['status'])"),
            reply("finished"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/achiever", cwd=tmp_path)
        info = runtime.goals.set(session.id, "take three steps", budget=1_000_000)
        assert (info.status, info.continued) == ("active", 1)
        await idle(session)

        # Three turns, each prompted by the goal; none after the completing one.
        prompts = inputs(session)
        assert [p.source for p in prompts] == ["goal", "goal", "goal"]
        assert prompts[0].text.startswith("You have a goal: take three steps")
        assert "Continue working toward your goal: take three steps" in prompts[1].text
        assert " of 1,000,000 left." in prompts[1].text
        assert [e.answer for e in ends(session)] == ["read it", "still going", "finished"]
        assert outputs(session) == ["active take three steps 1000000\n", "completed\n"]

        goal = runtime.goals.info(session.id)
        assert goal is not None
        assert (goal.status, goal.continued) == ("completed", 3)
        assert goal.detail == "goal completed: take three steps (all three steps)"
        assert goal.used > 0 and goal.remaining == 1_000_000 - goal.used
        assert any(text.startswith("goal completed") for text in notices(session))


async def test_a_goal_pauses_resumes_and_stops_when_its_budget_is_spent(
    home: Path, tmp_path: Path
) -> None:
    register_script("spender", [reply(f"step {n}", usage=CALL) for n in range(1, 6)])
    async with make_runtime(home) as runtime:
        host = RuntimeHost(runtime)
        session = await runtime.create_session(model="faux/spender", cwd=tmp_path)
        runtime.goals.set(session.id, "spend wisely", budget=1000)
        # Paused before its first turn ends: that turn runs, no other follows.
        paused = await host.people.change_goal(GoalChange(session.id, "pause"), None)
        assert paused.status == "paused"
        await idle(session)
        assert len(ends(session)) == 1
        with pytest.raises(UsageError, match="paused, not active"):
            runtime.goals.pause(session.id)

        # The turn that ran while paused counts: usage is everything since the set.
        resumed = runtime.goals.resume(session.id)
        assert (resumed.status, resumed.used, resumed.remaining) == ("active", 400, 600)
        await idle(session)
        # 400 tokens a turn: after the third (1,200 used) the budget is spent.
        assert [e.answer for e in ends(session)] == ["step 1", "step 2", "step 3"]
        goal = runtime.goals.info(session.id)
        assert goal is not None
        assert (goal.status, goal.used, goal.remaining) == ("exhausted", 1200, 0)
        said = notices(session)
        assert "goal paused by a person" in said
        assert any(
            text.startswith("goal resumed: Token budget: 600 of 1,000 left") for text in said
        )
        assert any(text.startswith("goal budget spent (1,200 of 1,000 tokens)") for text in said)
        assert "Token budget: 200 of 1,000 left." in inputs(session)[-1].text
        with pytest.raises(UsageError, match="set a new goal"):
            runtime.goals.resume(session.id)

        cleared = runtime.goals.clear(session.id)
        assert cleared.status == "cleared"
        assert runtime.goals.info(session.id) is None
        with pytest.raises(UsageError, match="has no goal"):
            runtime.goals.pause(session.id)


async def test_an_interrupt_by_a_person_pauses_the_goal(home: Path, tmp_path: Path) -> None:
    register_script("sleeper", [code("import asyncio\nawait asyncio.sleep(3600)")])
    async with make_runtime(home) as runtime:
        host = RuntimeHost(runtime)
        session = await runtime.create_session(model="faux/sleeper", cwd=tmp_path)
        started = asyncio.Event()
        session.listen(lambda r: started.set() if isinstance(r.event, CellStarted) else None)
        runtime.goals.set(session.id, "wait forever")
        await asyncio.wait_for(started.wait(), TIMEOUT)
        await host.people.interrupt(SessionRef(session.id))
        await idle(session)
        goal = runtime.goals.info(session.id)
        assert goal is not None and goal.status == "paused"
        assert [e.reason for e in ends(session)] == ["interrupted"]


async def test_a_goal_is_continued_across_a_restart(home: Path, tmp_path: Path) -> None:
    """The daemon stops while a goal's second turn runs; the next one recovers
    the session and continues the goal, with the usage from before counted."""
    register_script(
        "marathon",
        [
            code("leg = 1", usage=CALL),
            reply("leg one", usage=CALL),
            code("import asyncio\nawait asyncio.sleep(3600)", usage=CALL),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/marathon", cwd=tmp_path)
        session_id = session.id
        cells = 0
        second_leg = asyncio.Event()

        def watch(record: object) -> None:
            nonlocal cells
            if isinstance(getattr(record, "event", None), CellStarted):
                cells += 1
                if cells == 2:
                    second_leg.set()

        session.listen(watch)
        runtime.goals.set(session_id, "run the marathon", budget=10_000)
        await asyncio.wait_for(second_leg.wait(), TIMEOUT)
        # make_runtime's exit stops every session, as a daemon's stop does.

    script = register_script(
        "marathon",
        [
            code("done = await goal.complete()\nprint(done['status'])", usage=CALL),
            reply("crossed the line", usage=CALL),
        ],
    )
    async with make_runtime(home) as runtime:
        await runtime.recover()
        again = runtime.get(session_id)
        await idle(again)
        prompts = inputs(again)
        assert [p.source for p in prompts] == ["goal", "goal", "goal"]
        # 1,200 tokens before the restart, still counted after it.
        assert "Token budget: 8,800 of 10,000 left." in prompts[-1].text
        assert "run the marathon" in str(script.requests[0].messages[-1])
        assert "goal resumed after a restart" in notices(again)
        assert [e.reason for e in ends(again)] == ["answered", "interrupted", "answered"]
        goal = runtime.goals.info(session_id)
        assert goal is not None
        # Counted until goal.complete() ran: the final reply's call is not the goal's.
        assert (goal.status, goal.used) == ("completed", 1600)


# -- schedules ---------------------------------------------------------------------------


async def test_a_schedule_fires_once_after_downtime(home: Path, tmp_path: Path) -> None:
    register_script("watcher", [reply("checked"), reply("checked again")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/watcher", cwd=tmp_path)
        session_id = session.id
        job = runtime.scheduler.add(session_id, AddSchedule("every 10m", "check the build"), now=T0)
        assert (job.next_at, job.kind, job.created_by) == (T0 + 600, "every", "user")
        assert runtime.scheduler.tick(T0 + 599) == []

    # The daemon was down for five hours.
    now = T0 + 5 * HOUR + 30
    async with make_runtime(home) as runtime:
        await runtime.recover()
        [delivery] = runtime.scheduler.tick(now)
        assert (delivery.job, delivery.due_at, delivery.missed) == (job.id, T0 + 600, 29)
        assert runtime.scheduler.tick(now) == []  # the same moment again: nothing
        session = runtime.get(session_id)
        await idle(session)
        [prompt] = inputs(session)
        assert prompt.source == "schedule"
        assert prompt.text.startswith("check the build\n\n(This stands for 30 ticks")
        [listed] = runtime.scheduler.jobs(session_id)
        assert (listed.fired, listed.missed, listed.last_at) == (1, 29, now)
        assert listed.next_at == T0 + 31 * 600  # its own phase, the first tick after now
        # The next tick comes at its time, once.
        [later] = runtime.scheduler.tick(T0 + 31 * 600)
        assert later.missed == 0
        await idle(session)
        assert [p.text for p in inputs(session)][-1] == "check the build"


async def test_the_host_delivers_missed_ticks_when_it_starts(home: Path, tmp_path: Path) -> None:
    """The daemon's loop: at start, after recovery, one tick for the missed ones;
    a job added later wakes it. Its clock is injected; nothing sleeps."""
    register_script("host", [reply("caught up"), reply("soon")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/host", cwd=tmp_path)
        runtime.scheduler.add(session.id, AddSchedule("0 9 * * *", "morning"), now=T0)
        runtime.scheduler.wall = lambda: T0 + 72 * HOUR  # three days of downtime
        host = RuntimeHost(runtime)
        await host.start()  # recovery rebuilds the session; the loop has not run yet
        arrived: asyncio.Queue[str] = asyncio.Queue()
        runtime.get(session.id).listen(
            lambda r: arrived.put_nowait(r.event.text) if isinstance(r.event, UserInput) else None
        )
        try:
            first = await asyncio.wait_for(arrived.get(), TIMEOUT)
            assert first.startswith("morning\n\n(This stands for 3 ticks")
            runtime.scheduler.add(session.id, AddSchedule("in 1m", "soon"), now=T0)
            assert await asyncio.wait_for(arrived.get(), TIMEOUT) == "soon"
        finally:
            await host.shutdown(force=True)


async def test_a_deleted_sessions_jobs_are_cancelled(home: Path, tmp_path: Path) -> None:
    async with make_runtime(home, api=False) as runtime:
        session = await runtime.create_session(model="faux/echo", cwd=tmp_path)
        job = runtime.scheduler.add(session.id, AddSchedule("every 1h", "hello"), now=T0)
        runtime.store.set_status(session.id, "deleted")
        assert runtime.scheduler.tick(T0 + 2 * HOUR) == []
        gone = runtime.store.schedules.get(job.id)
        assert (gone.status, gone.detail, gone.fired) == ("cancelled", "its session was deleted", 0)
        with pytest.raises(UsageError, match="was deleted"):
            runtime.scheduler.add(session.id, AddSchedule("every 1h", "again"))


async def test_a_crash_after_the_claim_never_delivers_twice(home: Path, tmp_path: Path) -> None:
    """The tick is claimed and its prompt queued in one transaction; the process
    dies before the session takes it. After the restart it is delivered once."""
    register_script("once", [reply("reminded")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/once", cwd=tmp_path)
        session_id = session.id
        runtime.scheduler.add(session_id, AddSchedule("in 30m", "stand up"), now=T0)
        [delivery] = runtime.scheduler.tick(T0 + HOUR)
        # No await since the tick: the session's turn has not begun when it stops.
        assert runtime.store.inbox.pending_count(session_id) == 1

    async with make_runtime(home) as runtime:
        assert runtime.scheduler.tick(T0 + HOUR) == []
        [recovered] = await runtime.recover()
        assert recovered.id == session_id
        await idle(recovered)
        assert runtime.scheduler.tick(T0 + 2 * HOUR) == []
        [prompt] = inputs(recovered)
        assert (prompt.source, prompt.text) == ("schedule", "stand up")
        [done] = runtime.scheduler.jobs(session_id, finished=True)
        assert (done.status, done.fired, done.next_at) == ("done", 1, None)
        message = runtime.store.inbox.get(delivery.message_id)
        assert message is not None and message.status == "delivered"


async def test_a_failed_delivery_leaves_its_tick_due_and_others_go_on(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register_script("pair", [reply("a"), reply("b"), reply("c")])
    async with make_runtime(home) as runtime:
        first = await runtime.create_session(model="faux/pair", cwd=tmp_path)
        second = await runtime.create_session(model="faux/pair", cwd=tmp_path)
        broken = runtime.scheduler.add(first.id, AddSchedule("in 1m", "one"), now=T0)
        runtime.scheduler.add(second.id, AddSchedule("in 1m", "two"), now=T0)
        send = first.send

        def failing(*args: object, **kwargs: object) -> object:
            raise RuntimeError("the disk is full")

        monkeypatch.setattr(first, "send", failing)
        [delivered] = runtime.scheduler.tick(T0 + 120)
        assert delivered.session_id == second.id
        job = runtime.store.schedules.get(broken.id)
        assert (job.status, job.fired, job.next_at) == ("active", 0, T0 + 60)  # rolled back
        assert runtime.store.inbox.pending_count(first.id) == 0

        monkeypatch.setattr(first, "send", send)
        [retried] = runtime.scheduler.tick(T0 + 180)
        assert retried.job == broken.id
        assert runtime.scheduler.tick(T0 + 180) == []
        await idle(first)
        await idle(second)
        assert [p.text for p in inputs(first)] == ["one"]
        assert [p.text for p in inputs(second)] == ["two"]


HEARTBEATS = """
made = []
for kwargs in ({'every': '10m', 'label': 'pulse'}, {'cron': '0 9 * * 1-5'}, {'after': 3600}):
    made.append(await heartbeat.create('look around', **kwargs))
print([(j['spec'], j['kind'], j['label'], j['created_by']) for j in made])
print([j['id'] for j in await heartbeat.list()] == [j['id'] for j in made])
u = await heartbeat.update('pulse', every='1h', prompt='look harder', mode='steer')
print(u['spec'], u['prompt'], u['mode'], u['next_at'] > made[0]['next_at'])
d = await heartbeat.delete(made[1]['id'])
print(d['status'], len(await heartbeat.list()))
for call in (
    lambda: heartbeat.create('x', every='10m', cron='* * * * *'),
    lambda: heartbeat.create('x'),
    lambda: heartbeat.create('x', every='5s'),
    lambda: heartbeat.create('x', cron='0 9 * *'),
    lambda: heartbeat.create('x', every='10m', label='pulse'),
    lambda: heartbeat.update('nightly', prompt='mine now'),
    lambda: heartbeat.delete(999),
    lambda: heartbeat.create('x', every='10m', mode='auto'),
):
    try:
        await call()
    except Exception as exc:
        print(type(exc).__name__ + ':', exc)
print(await goal.get())
try:
    await goal.complete()
except Exception as exc:
    print(type(exc).__name__ + ':', exc)
"""


async def test_heartbeats_from_a_kernel(home: Path, tmp_path: Path) -> None:
    register_script("beat", [code(HEARTBEATS), reply("scheduled")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/beat", cwd=tmp_path)
        person = runtime.scheduler.add(
            session.id, AddSchedule("every 1d", "daily review", label="nightly")
        )
        await asyncio.wait_for(session.ask("set up heartbeats"), TIMEOUT)
        lines = outputs(session)[0].splitlines()
        assert lines[0] == (
            "[('every 10m', 'every', 'pulse', 'model'), ('0 9 * * 1-5', 'cron', None, 'model'),"
            " ('in 1h', 'once', None, 'model')]"
        )
        assert lines[1] == "False"  # the person's job is listed too
        assert lines[2] == "every 1h look harder steer True"
        assert lines[3] == "cancelled 3"
        assert lines[4:12] == [
            "ValueError: give one of every=, cron= or after=, not every and cron",
            "ValueError: give exactly one of every=, cron= or after=",
            "UsageError: the shortest interval is 1m, not 5s",
            'UsageError: \'0 9 * *\' is not a schedule: give "every 10m", "in 30m" or a cron'
            ' expression such as "0 9 * * 1-5" (cron has five fields: minute hour day month'
            " weekday)",
            "UsageError: this session already has a scheduled job labelled 'pulse'",
            f"UsageError: job {person.id} was scheduled by a person; only a person changes it"
            " (recursa schedule cancel)",
            "NotFound: no scheduled job '999' for this session",
            "ValueError: mode must be 'steer' or 'follow_up', not 'auto'",
        ]
        assert lines[12:] == ["None", "UsageError: this session has no goal to complete"]
        jobs = runtime.scheduler.jobs(session.id)
        assert [(j.label, j.created_by) for j in jobs] == [
            ("nightly", "user"),
            ("pulse", "model"),
            (None, "model"),
        ]


async def test_ticks_while_a_prompt_still_waits_do_not_pile_up(home: Path, tmp_path: Path) -> None:
    register_script("slow", [reply("one check")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/slow", cwd=tmp_path)
        job = runtime.scheduler.add(session.id, AddSchedule("every 10m", "check"), now=T0)
        # Three ticks come due before the session has taken the first prompt
        # (no await in between: its worker has not run yet).
        delivered = [runtime.scheduler.tick(T0 + n * 600) for n in (1, 2, 3)]
        assert [len(d) for d in delivered] == [1, 0, 0]
        assert [m.sender for m in runtime.store.inbox.pending(session.id)] == [f"schedule:{job.id}"]
        await idle(session)
        assert [p.text for p in inputs(session)] == ["check"]
        assert len(runtime.scheduler.tick(T0 + 4 * 600)) == 1  # taken: the next one goes out


async def test_a_cron_that_never_comes_due_is_a_one_line_error(home: Path, tmp_path: Path) -> None:
    register_script("never", [])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/never", cwd=tmp_path)
        with pytest.raises(UsageError, match="never comes due") as caught:
            runtime.scheduler.add(session.id, AddSchedule("0 0 30 2 *", "leap"), now=T0)
        assert "\n" not in str(caught.value)
        assert runtime.scheduler.jobs(session.id) == []

"""Sub-agents and agent messages on real kernels, with the kernel API served
in-process (make_runtime does that); the models are faux scripts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from recursa.config import AgentsConfig
from recursa.models.faux import code, per_session, register_script, reply
from recursa.models.types import Request, Usage
from recursa.protocol.events import CellFinished, InboxRead, TurnEnded, UserInput
from recursa.runtime import Runtime
from recursa.testing import make_runtime

TIMEOUT = 120


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    session = runtime.get(session_id)
    return [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]


def inputs(runtime: Runtime, session_id: str) -> list[UserInput]:
    session = runtime.get(session_id)
    return [r.event for r in session.history() if isinstance(r.event, UserInput)]


async def settle(runtime: Runtime, root: str) -> None:
    assert await asyncio.wait_for(runtime.tree.wait_quiet(root, None), TIMEOUT)


async def test_rlm_returns_a_handle_at_once_and_the_result_comes_back(
    home: Path, tmp_path: Path
) -> None:
    register_script("kid", [], fallback=per_session(code("print(6 * 7)"), reply("42")))
    register_script(
        "boss",
        [
            code(
                "h = await rlm('compute six times seven', name='calc', model='faux/kid')\n"
                "print(h.name, h.status, h.depth, h.workspace.endswith(h.id))"
            ),
            code("print(await h.result())"),
            reply("the child said 42"),
        ],
    )
    async with make_runtime(home) as runtime:
        boss = await runtime.create_session(model="faux/boss", cwd=tmp_path)
        end = await asyncio.wait_for(boss.ask("delegate"), TIMEOUT)
        assert end is not None and end.answer == "the child said 42"
        first, second = outputs(runtime, boss.id)[:2]
        assert first.startswith("calc ") and first.rstrip().endswith(" 1 True")
        assert second == "42\n"
        [child] = runtime.store.sessions(parent_id=boss.id)
        assert child.model == "faux/kid"
        assert child.cwd == str(boss.cwd)
        # The child's answer reached the parent exactly once: taken by the cell
        # that waited for it, or (if it came before the wait) put in the context.
        reads = [
            m for r in boss.history() if isinstance(r.event, InboxRead) for m in r.event.messages
        ]
        steered = [i for i in inputs(runtime, boss.id) if i.source == "child"]
        assert len([m for m in reads if m.sender == child.id]) + len(steered) == 1


async def test_five_children_started_in_a_loop_all_answer_the_parent(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "worker",
        [],
        fallback=lambda request: reply(f"result for {request.messages[0].text.split()[-1]}"),  # type: ignore[union-attr]
    )

    def boss(request: Request) -> object:
        answers = [
            m.text for m in request.messages if "finished: result for" in getattr(m, "text", "")
        ]
        if len(request.messages) == 1:
            return code(
                "hs = [await rlm(f'investigate part {i}', name=f'w{i}', model='faux/worker') "
                "for i in range(5)]\nprint(len(hs))"
            )
        if len(answers) < 5:
            return reply(f"waiting ({len(answers)} of 5)")
        return reply("all five: " + ", ".join(sorted(a.rsplit(" ", 1)[-1] for a in answers)))

    register_script("boss5", [], fallback=boss)  # type: ignore[arg-type]
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/boss5", cwd=tmp_path)
        root.send("split the work")
        await settle(runtime, root.id)
        assert root.last_answer == "all five: 0, 1, 2, 3, 4"
        children = runtime.store.sessions(parent_id=root.id)
        assert sorted(c.meta["name"] for c in children) == ["w0", "w1", "w2", "w3", "w4"]
        tree = runtime.tree.usage(root.id)
        assert len(tree.children) == 5
        assert all(child.own.calls > 0 for child in tree.children)
        assert tree.total.input_tokens > tree.own.input_tokens


async def test_twenty_children_run_concurrently(home: Path, tmp_path: Path) -> None:
    register_script(
        "sleeper", [], fallback=per_session(code("import time; time.sleep(1.0)"), reply("rested"))
    )
    register_script(
        "many",
        [
            code("hs = [await rlm(f'rest {i}', model='faux/sleeper') for i in range(20)]"),
            code("rs = [await h.result() for h in hs]\nprint(rs.count('rested'))"),
            reply("done"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/many", cwd=tmp_path)
        began = time.monotonic()
        end = await asyncio.wait_for(root.ask("go"), TIMEOUT)
        elapsed = time.monotonic() - began
        assert end is not None and end.answer == "done"
        assert outputs(runtime, root.id)[-1] == "20\n"
        assert elapsed < 20 * 1.0  # 20 one-second cells did not run one after another


async def test_a_finished_child_is_woken_with_its_state_intact(home: Path, tmp_path: Path) -> None:
    register_script(
        "keeper",
        [],
        fallback=per_session(
            code("secret = 21"), reply("stored"), code("print(secret * 2)"), reply("42")
        ),
    )
    register_script(
        "asker",
        [
            code(
                "h = await rlm('remember a number', name='k', model='faux/keeper')\nprint(await h.result())"
            ),
            code("await h.send('now double it')\nh2 = await h.wait(timeout=60)\nprint(h2.answer)"),
            reply("ok"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/asker", cwd=tmp_path)
        await asyncio.wait_for(root.ask("go"), TIMEOUT)
        assert outputs(runtime, root.id)[:2] == ["stored\n", "42\n"]


async def test_siblings_message_each_other(home: Path, tmp_path: Path) -> None:
    register_script(
        "talker",
        [],
        fallback=per_session(
            code("await agent_message.send('hello from a', to='sibling:b')"),
            reply("sent"),
        ),
    )
    register_script(
        "listener",
        [],
        fallback=per_session(
            code("msgs = await agent_message.inbox(wait=60)\nprint(msgs[0].text, msgs[0].sender)"),
            reply("heard"),
        ),
    )
    register_script(
        "pair",
        [
            code(
                "b = await rlm('listen', name='b', model='faux/listener')\n"
                "a = await rlm('talk', name='a', model='faux/talker')\n"
                "print(await b.result(), await a.result())"
            ),
            reply("done"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/pair", cwd=tmp_path)
        await asyncio.wait_for(root.ask("go"), TIMEOUT)
        assert outputs(runtime, root.id)[0] == "heard sent\n"
        b = runtime.store.session(f"{root.id}:b")
        assert outputs(runtime, b.id)[0] == "hello from a a\n"


async def test_no_deadlock_waiting_in_a_cell_for_a_reply(home: Path, tmp_path: Path) -> None:
    """The parent blocks in a cell until its child answers a question; the reply
    reaches the blocked cell (it does not wait for the cell to end)."""
    register_script(
        "responder",
        [],
        fallback=per_session(
            code(
                "q = await agent_message.inbox(wait=60)\nawait agent_message.send('pong: ' + q[0].text, to='parent')"
            ),
            reply("answered"),
        ),
    )
    register_script(
        "questioner",
        [
            code(
                "h = await rlm('answer my question', name='r', model='faux/responder')\n"
                "await agent_message.send('ping', to='child:r')\n"
                "replies = await agent_message.inbox(wait=60)\n"
                "print([m.text for m in replies])"
            ),
            reply("got it"),
        ],
        fallback=reply("noted"),  # the child's own answer comes later and starts a turn
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/questioner", cwd=tmp_path)
        root.send("go")
        await settle(runtime, root.id)
        ends = [r.event for r in root.history() if isinstance(r.event, TurnEnded)]
        assert ends[0].answer == "got it"
        assert outputs(runtime, root.id)[0] == "['pong: ping']\n"


async def test_steer_joins_the_running_turn_and_follow_up_waits(home: Path, tmp_path: Path) -> None:
    register_script(
        "busy",
        [],
        fallback=per_session(
            code("import time; time.sleep(2)"),
            reply("first turn done"),
            reply("second turn done"),
        ),
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/busy", cwd=tmp_path)
        started = asyncio.Event()
        root.listen(lambda r: started.set() if r.event.type == "cell_started" else None)
        root.send("work")
        await asyncio.wait_for(started.wait(), TIMEOUT)
        root.send("after this turn", mode="follow_up")
        root.send("look at this now", mode="steer")
        await settle(runtime, root.id)
        events = [r.event for r in root.history()]
        ends = [i for i, e in enumerate(events) if isinstance(e, TurnEnded)]
        steer = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, UserInput) and e.text == "look at this now"
        )
        follow = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, UserInput) and e.text == "after this turn"
        )
        assert steer < ends[0] < follow < ends[1]


async def test_the_depth_limit_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    register_script(
        "nester",
        [],
        fallback=per_session(
            code(
                "try:\n    await rlm('deeper', model='faux/nester')\nexcept Exception as e:\n    print(type(e).__name__, e)"
            ),
            reply("stopped"),
        ),
    )
    register_script(
        "top",
        [
            code("h = await rlm('go deeper', model='faux/nester')\nprint(await h.result())"),
            reply("ok"),
        ],
    )
    async with make_runtime(home, agents=AgentsConfig(max_depth=1)) as runtime:
        root = await runtime.create_session(model="faux/top", cwd=tmp_path)
        await asyncio.wait_for(root.ask("go"), TIMEOUT)
        [child] = runtime.store.sessions(parent_id=root.id)
        refused = outputs(runtime, child.id)[0]
        assert refused.startswith("UsageError sub-agents nest at most 1 deep")
        assert runtime.store.sessions(parent_id=child.id) == []


async def test_a_budget_covers_the_whole_subtree(home: Path, tmp_path: Path) -> None:
    heavy = Usage(input_tokens=150, output_tokens=50)
    register_script(
        "spender", [], fallback=lambda request: code(f"x = {len(request.messages)}", usage=heavy)
    )
    register_script(
        "funder",
        [
            code(
                "h = await rlm('spend', name='s', model='faux/spender', budget={'tokens': 2000})\n"
                "w = await h.wait(timeout=100)\nprint(w.reason)"
            ),
            reply("seen"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/funder", cwd=tmp_path)
        await asyncio.wait_for(root.ask("go"), TIMEOUT)
        assert outputs(runtime, root.id)[0] == "budget\n"
        [child] = runtime.store.sessions(parent_id=root.id)
        spent = runtime.store.usage_totals(child.id, tree=True)
        assert spent.input_tokens + spent.output_tokens <= 2000
        ends = [r.event for r in runtime.get(child.id).history() if isinstance(r.event, TurnEnded)]
        assert ends[-1].reason == "budget"
        assert "exhausted" in ends[-1].detail


async def test_a_deleted_child_is_tombstoned_and_its_history_kept(
    home: Path, tmp_path: Path
) -> None:
    register_script("forever", [], fallback=per_session(code("import time; time.sleep(60)")))
    register_script(
        "deleter",
        [
            code(
                "h = await rlm('run forever', name='f', model='faux/forever')\n"
                "await rlm.delete_subagent(h)\n"
                "print((await h.status()).status)\n"
                "try:\n    await agent_message.send('hi', to='child:f')\nexcept Exception as e:\n    print(type(e).__name__)"
            ),
            reply("deleted"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/deleter", cwd=tmp_path)
        await asyncio.wait_for(root.ask("go"), TIMEOUT)
        assert outputs(runtime, root.id)[0] == "deleted\nUsageError\n"
        [child] = runtime.store.sessions(parent_id=root.id)
        assert child.status == "deleted"
        assert runtime.store.events(child.id)  # history stays
        assert runtime.store.kernels.get(child.id) is None

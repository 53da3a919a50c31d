"""``llm()`` and ``llm.batch()`` on real kernels, with the kernel API served
in-process by a real runtime (real SQLite, real unix socket); only the models
are faux scripts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from recursa.config import AgentsConfig, Limits
from recursa.models.faux import code, fault, per_session, register_script, reply
from recursa.models.types import Request, Usage
from recursa.protocol.events import CellFinished, ModelUsage, Notice
from recursa.runtime import Runtime
from recursa.runtime.light_calls import DEFAULT_SYSTEM
from recursa.testing import make_runtime

TIMEOUT = 120


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    session = runtime.get(session_id)
    return [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]


def usages(runtime: Runtime, session_id: str) -> list[ModelUsage]:
    session = runtime.get(session_id)
    return [r.event for r in session.history() if isinstance(r.event, ModelUsage)]


def notices(runtime: Runtime, session_id: str) -> list[str]:
    session = runtime.get(session_id)
    return [r.event.text for r in session.history() if isinstance(r.event, Notice)]


def prompt_of(request: Request) -> str:
    return request.messages[0].text


def arrivals(name: str, delay: float) -> list[float]:
    """Register ``faux/NAME``: it answers each prompt in upper case after
    ``delay`` seconds; the returned list gets the time each request arrived."""
    times: list[float] = []

    def answer(request: Request) -> object:
        times.append(time.monotonic())
        return reply(prompt_of(request).upper())

    register_script(name, [], delay=delay, fallback=answer)  # type: ignore[arg-type]
    return times


async def test_a_cell_gets_the_reply_and_the_call_is_in_the_books(
    home: Path, tmp_path: Path
) -> None:
    script = register_script(
        "solo",
        [
            code("r = await llm('Say hi to Ada.', max_tokens=50)\nprint(type(r).__name__, r)"),
            reply("Hi, Ada!"),  # the llm() call: the session's own model by default
            reply("done"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/solo", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("greet"), TIMEOUT)
        assert end is not None and end.answer == "done"
        assert outputs(runtime, session.id) == ["str Hi, Ada!\n"]
        light = script.requests[1]
        assert (light.tools, light.system, prompt_of(light)) == (
            (),
            DEFAULT_SYSTEM,
            "Say hi to Ada.",
        )
        assert light.max_output_tokens == 50
        assert light.cache_key is None  # not the session's conversation
        kinds = [(u.kind, u.step) for u in usages(runtime, session.id)]
        assert kinds == [("call", 1), ("llm", 0), ("call", 2)]
        [line] = [n for n in notices(runtime, session.id) if n.startswith("llm()")]
        assert "faux/solo" in line and "'Say hi to Ada.'" in line and "'Hi, Ada!'" in line
        totals = runtime.store.usage_totals(session.id)
        assert totals.calls == 3
        assert totals.input_tokens == sum(u.input_tokens for u in usages(runtime, session.id))


async def test_a_childs_llm_calls_count_in_the_trees_totals(home: Path, tmp_path: Path) -> None:
    register_script("helper", [], fallback=reply("forty-two"))
    register_script(
        "kid",
        [],
        fallback=per_session(
            code("print(await llm('What is six times seven?', model='faux/helper'))"),
            reply("42"),
        ),
    )
    register_script(
        "root",
        [
            code("h = await rlm('ask the helper', name='k', model='faux/kid')"),
            code("print(await h.result(timeout=60))"),
            reply("ok"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/root", cwd=tmp_path)
        end = await asyncio.wait_for(root.ask("delegate"), TIMEOUT)
        assert end is not None and end.answer == "ok"
        [child] = runtime.store.sessions(parent_id=root.id)
        assert outputs(runtime, child.id) == ["forty-two\n"]
        [light] = [u for u in usages(runtime, child.id) if u.kind == "llm"]
        assert light.model == "faux/helper" and light.output_tokens > 0
        tree = runtime.tree.usage(root.id)
        [node] = tree.children
        assert node.own.calls == 3  # two steps and the llm() call
        assert tree.total.calls == tree.own.calls + 3
        assert tree.total.output_tokens >= tree.own.output_tokens + light.output_tokens


async def test_batch_keeps_the_order_and_at_most_concurrency_calls_in_flight(
    home: Path, tmp_path: Path
) -> None:
    delay = 1.0
    times = arrivals("upper", delay)
    register_script(
        "mapper",
        [
            code(
                "out = await llm.batch([f'p{i}' for i in range(6)], concurrency=3, "
                "model='faux/upper')\nprint(out)"
            ),
            reply("mapped"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/mapper", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("map"), TIMEOUT)
        assert end is not None and end.answer == "mapped"
        assert outputs(runtime, session.id) == ["['P0', 'P1', 'P2', 'P3', 'P4', 'P5']\n"]
        assert len(times) == 6
        # Three start before any has ended; the fourth only once one has.
        assert times[2] - times[0] < delay
        assert times[3] - times[0] >= delay * 0.99
        assert len([u for u in usages(runtime, session.id) if u.kind == "llm"]) == 6


async def test_the_configured_cap_bounds_a_batchs_concurrency(home: Path, tmp_path: Path) -> None:
    delay = 1.0
    times = arrivals("capped", delay)
    register_script(
        "wide",
        [
            code("print(await llm.batch(['a', 'b', 'c'], concurrency=8, model='faux/capped'))"),
            reply("done"),
        ],
    )
    async with make_runtime(home, agents=AgentsConfig(llm_concurrency=2)) as runtime:
        session = await runtime.create_session(model="faux/wide", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("go"), TIMEOUT)
        assert end is not None and end.answer == "done"
        assert outputs(runtime, session.id) == ["['A', 'B', 'C']\n"]
        assert times[1] - times[0] < delay
        assert times[2] - times[0] >= delay * 0.99


async def test_a_spent_budget_refuses_the_call_in_the_cell(home: Path, tmp_path: Path) -> None:
    helper = register_script("unused", [], fallback=reply("never"))
    register_script(
        "thrifty",
        [],
        fallback=per_session(
            code(
                "try:\n    await llm('hello', model='faux/unused')\n"
                "except Exception as exc:\n    print(type(exc).__name__, exc)"
            ),
            reply("after"),
        ),
    )
    register_script(
        "parent",
        [
            code(
                "h = await rlm('try it', name='t', model='faux/thrifty', budget={'steps': 1})\n"
                "v = await h.wait(timeout=60)"
            ),
            reply("ok"),
        ],
    )
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/parent", cwd=tmp_path)
        end = await asyncio.wait_for(root.ask("go"), TIMEOUT)
        assert end is not None and end.answer == "ok"
        [child] = runtime.store.sessions(parent_id=root.id)
        [out] = outputs(runtime, child.id)
        assert out.startswith("ModelUnavailable llm(): the call was refused: the budget of session")
        assert "1 model calls are spent" in out and out.count("\n") == 1
        assert helper.requests == []
        assert [u.kind for u in usages(runtime, child.id)] == ["call"]


async def test_the_turns_token_limit_counts_llm_calls_and_caps_their_replies(
    home: Path, tmp_path: Path
) -> None:
    cell = (
        "print(await llm('first'))\n"
        "try:\n    await llm('second')\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)"
    )
    script = register_script(
        "metered",
        [
            code(cell, usage=Usage(100, 10)),
            reply("one", usage=Usage(30, 20)),
            reply("done", usage=Usage(5, 5)),
        ],
    )
    async with make_runtime(home, limits=Limits(max_tokens=150)) as runtime:
        session = await runtime.create_session(model="faux/metered", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("go"), TIMEOUT)
        assert end is not None and end.answer == "done"
        assert script.requests[1].max_output_tokens == 40  # 150 less the step's 110
        assert len(script.requests) == 3  # the second llm() was never sent
        assert outputs(runtime, session.id) == [
            "one\nModelUnavailable llm(): the call was refused: this turn used 160 tokens,"
            " over the limit of 150 (--max-tokens)\n"
        ]


async def test_bad_arguments_and_failures_are_one_line_errors_in_the_cell(
    home: Path, tmp_path: Path
) -> None:
    register_script("tiny", [], context_window=100, fallback=reply("small"))

    def flaky(request: Request) -> object:
        if "bad" in prompt_of(request):
            return fault("invalid_request", "no such thing")
        return reply(prompt_of(request) + "!")

    register_script("flaky", [], fallback=flaky)  # type: ignore[arg-type]
    checks = (
        "async def show(coro):\n"
        "    try:\n"
        "        print('ok', await coro)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__ + ':', exc)\n"
        "await show(llm(123))\n"
        "await show(llm('  '))\n"
        "await show(llm('x', max_tokens=0))\n"
        "await show(llm('x', model='faux/nobody'))\n"
        "await show(llm.batch('abc'))\n"
        "await show(llm.batch(['a'], concurrency=0))\n"
        "await show(llm.batch(['a', 7]))\n"
        "await show(llm('y' * 1000, model='faux/tiny'))\n"
        "await show(llm('fits', model='faux/tiny'))\n"
        "try:\n"
        "    await llm.batch(['one', 'bad', 'three'], model='faux/flaky')\n"
        "except llm.BatchError as exc:\n"
        "    print(type(exc).__name__ + ':', exc)\n"
        "    print(exc.results, sorted(exc.errors))\n"
    )
    register_script("checker", [code(checks), reply("checked")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/checker", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("check"), TIMEOUT)
        assert end is not None and end.answer == "checked"
        [out] = outputs(runtime, session.id)
        lines = out.splitlines()
        assert lines[:9] == [
            "TypeError: prompt must be a str, not int",
            "ValueError: prompt is empty",
            "ValueError: max_tokens must be from 1 to 16384, not 0",
            "ModelUnavailable: no faux script named 'nobody' (register one with recursa.testing.faux)",
            "TypeError: prompts must be a list of str, not str",
            "ValueError: concurrency must be from 1 to 64, not 0",
            "TypeError: prompts[1] must be a str, not int",
            "UsageError: llm(): the prompt (1,000 characters, about 268 tokens) does not fit"
            " faux/tiny's context window of 100 tokens; split it into smaller prompts"
            " (llm.batch over chunks)",
            "ok small",
        ]
        assert lines[9].startswith("LlmBatchError: llm.batch(): 1 of 3 prompts failed (prompts[1]:")
        assert "no such thing" in lines[9]
        assert lines[10] == "['one!', None, 'three!'] [1]"
        assert len(lines) == 11

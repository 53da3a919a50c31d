"""Typed boundaries end to end: settings in config.toml take effect in a real
runtime (real kernels, faux models); a wrong-typed body is a 400 with one line
from the real app on a real unix socket (a fake host); the CLI takes every
duration form against the loopback model server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from fake_kernel_host import FakeKernelHost
from recursa.daemon.embedded import serve_embedded
from recursa.models.faux import code, per_session, register_script, reply
from recursa.protocol.events import CellFinished, ModelUsage
from recursa.protocol.wire import Spawn
from recursa.runtime import Runtime
from recursa.testing import FakeModelServer, Reply, make_runtime

TIMEOUT = 120
SKILL = "async def cube(n):\n    return n ** 3\n"
LEARN = (
    f"s = await harness.create('skill', 'cube', 'n cubed', code={SKILL!r},"
    " scope='global', reason='used twice')\nprint(s['entry_id'])"
)
APPROVE = '{"decision": "approve", "reasons": "a pure function with no side effects"}'


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text, encoding="utf-8")


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    history = runtime.get(session_id).history()
    return [r.event.output for r in history if isinstance(r.event, CellFinished)]


async def test_review_skill_model_and_reviewer_model_from_the_file_take_effect(
    home: Path, tmp_path: Path
) -> None:
    """By default a global skill waits for a person; with the [harness] table
    it is reviewed by the model named there, not the proposing session's."""
    write_config(home, '[harness]\nreview_skill = "model"\nreviewer_model = "faux/judge"\n')
    judge = register_script("judge", [], fallback=reply(APPROVE))
    learner = register_script("learner", [code(LEARN), reply("learned")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/learner", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("learn"), TIMEOUT)
        assert end is not None and end.answer == "learned"
        await asyncio.wait_for(runtime.learning.wait_reviews(), TIMEOUT)
        skill = runtime.learning.harness.find("cube")
        assert (skill.status, skill.actor, skill.version) == ("active", "reviewer", 2)
        [review] = judge.requests
        assert "n ** 3" in str(review.messages)
        assert len(learner.requests) == 2  # its two turns' calls; no review went to it
        usages = [r.event for r in session.history() if isinstance(r.event, ModelUsage)]
        assert [u.model for u in usages].count("faux/judge") == 1


async def test_max_depth_from_the_file_takes_effect(home: Path, tmp_path: Path) -> None:
    """[agents] max_depth = 1: a child (depth 1) may not start a grandchild."""
    write_config(home, "[agents]\nmax_depth = 1\n")
    register_script(
        "nest",
        [],
        fallback=per_session(
            code(
                "try:\n    await rlm('deeper', model='faux/nest')\n"
                "except Exception as e:\n    print(type(e).__name__, e)"
            ),
            reply("stopped"),
        ),
    )
    register_script(
        "root",
        [
            code("h = await rlm('go deeper', model='faux/nest')\nprint(await h.result())"),
            reply("ok"),
        ],
    )
    async with make_runtime(home) as runtime:
        assert runtime.config.agents.max_depth == 1
        root = await runtime.create_session(model="faux/root", cwd=tmp_path)
        await asyncio.wait_for(root.ask("go"), TIMEOUT)
        [child] = runtime.store.sessions(parent_id=root.id)
        assert outputs(runtime, child.id)[0].startswith("UsageError sub-agents nest at most 1 deep")
        assert runtime.store.sessions(parent_id=child.id) == []


async def test_a_wrong_typed_body_is_a_400_with_one_line(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """From a person's client and from a kernel alike; the host never sees it."""
    host = FakeKernelHost()
    root, _ = host.add_root("root")
    kernel_token = host.token_of(root)
    directory = tmp_path_factory.mktemp("api")
    async with serve_embedded(host, directory=directory, token="person") as sockets:

        def client(token: str) -> httpx2.AsyncClient:
            path = sockets.people if token == "person" else sockets.kernel
            return httpx2.AsyncClient(
                transport=httpx2.AsyncHTTPTransport(uds=str(path)),
                base_url="http://recursa",
                headers={"authorization": f"Bearer {token}"},
            )

        cases = [
            (
                "person",
                "/v1/sessions",
                {"task": "x", "model": 7, "cwd": 3},
                "model must be a string, not 7 (and 1 more problem)",
            ),
            (
                "person",
                "/v1/sessions",
                {"task": "x", "max_steps": "5"},
                "max_steps must be a whole number, not '5'",
            ),
            (
                kernel_token,
                "/v1/kernel/rlm",
                {"task": "t", "budget": {"tokens": "lots"}},
                "budget.tokens must be a whole number, not 'lots'",
            ),
            (
                kernel_token,
                "/v1/kernel/heartbeats",
                {"spec": "every 1h", "prompt": "p", "mode": 5},
                "mode must be 'steer' or 'follow_up', not 5",
            ),
        ]
        for token, route, body, message in cases:
            async with client(token) as http:
                answer = await http.post(route, json=body)
            assert answer.status_code == 400, (route, answer.text)
            assert answer.json() == {"error": {"kind": "invalid", "message": message}}
        # A right-typed body with a duration in the Duration grammar is admitted.
        async with client(kernel_token) as http:
            answer = await http.post(
                "/v1/kernel/rlm", json={"task": "t", "budget": {"time": "1h30m"}}
            )
        assert answer.status_code == 201, answer.text
    [(operation, caller, spawn)] = host.kernel_calls
    assert (operation, caller) == ("spawn", root)
    assert isinstance(spawn, Spawn) and spawn.budget is not None and spawn.budget.time == 5400
    assert [name for name, _ in host.calls if name == "create"] == []


def test_the_cli_takes_every_duration_form(home: Path, tmp_path: Path) -> None:
    """`--max-time 1h30m` was refused while schedules and rlm() accepted it."""
    env = {
        **os.environ,
        "RECURSA_HOME": str(home),
        "OPENAI_API_KEY": "x",
    }

    def run(*args: str, base_url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "recursa", "run", "--no-daemon", *args],
            env={**env, "OPENAI_BASE_URL": base_url},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )

    with FakeModelServer.in_thread() as server:
        server.push(Reply(text="done"))
        result = run(
            "--max-time", "1h30m", "--model", "openai/m", "hi", base_url=server.openai_base_url
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "done"
        refused = run(
            "--max-time", "soon", "--model", "openai/m", "hi", base_url=server.openai_base_url
        )
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "recursa: --max-time: cannot read the duration 'soon': use a number and a unit"
        " (s, m, h, d), e.g. 10m or 1h30m"
    )

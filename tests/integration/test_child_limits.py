"""Limits on what one session's cells may admit, on real kernels with the kernel
API served in-process: ``[agents] max_children`` and the session-name rule.
A refusal goes back to the model as the cell's result, in one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

from recursa.config import AgentsConfig
from recursa.models.faux import code, register_script, reply
from recursa.protocol.events import CellFinished
from recursa.runtime import Runtime
from recursa.testing import make_runtime

TIMEOUT = 120

TRY_SPAWN = """
try:
    h = await rlm('wait here', name={name!r}, model='faux/idler')
    print('admitted', h.name)
except Exception as exc:
    print('refused:', exc)
"""


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    session = runtime.get(session_id)
    return [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]


async def test_a_session_admits_no_more_live_children_than_max_children(
    home: Path, tmp_path: Path
) -> None:
    register_script("idler", [], fallback=reply("idle"))
    cell = (
        "admitted, refused = [], []\n"
        "for i in range(5):\n"
        "    try:\n"
        "        admitted.append(await rlm(f'task {i}', model='faux/idler'))\n"
        "    except Exception as exc:\n"
        "        refused.append(str(exc))\n"
        "print(len(admitted), len(refused))\n"
        "print(refused[0])"
    )
    register_script(
        "spawner",
        [
            code(cell),
            code("await rlm.delete_subagent(admitted[0])\n" + TRY_SPAWN.format(name="again")),
            reply("done"),
        ],
    )
    async with make_runtime(home, agents=AgentsConfig(max_children=3)) as runtime:
        root = await runtime.create_session(model="faux/spawner", cwd=tmp_path)
        end = await asyncio.wait_for(root.ask("spawn five"), TIMEOUT)
        assert end is not None and end.answer == "done"
        first, second = outputs(runtime, root.id)[:2]
        counts, message = first.rstrip("\n").split("\n")
        assert counts == "3 2"
        assert "max_children = 3" in message and "delete" in message
        # Deleting a child frees its place.
        assert second == "admitted again\n"
        live = [r for r in runtime.store.sessions(parent_id=root.id) if r.status != "deleted"]
        assert len(live) == 3
        assert await asyncio.wait_for(runtime.tree.wait_quiet(root.id, None), TIMEOUT)


async def test_rlm_refuses_a_name_that_is_not_a_plain_word(home: Path, tmp_path: Path) -> None:
    register_script("idler", [], fallback=reply("idle"))
    # 95 characters is a name, but too long once qualified by the parent's id.
    bad = ["../../etc", "..", ".", "a/b", "x" * 101, "y" * 95, "名前", "tab\there", ""]
    cells = [code(TRY_SPAWN.format(name=name)) for name in bad]
    register_script("namer", [*cells, code(TRY_SPAWN.format(name="ok-1.2_x")), reply("done")])
    async with make_runtime(home) as runtime:
        root = await runtime.create_session(model="faux/namer", cwd=tmp_path)
        end = await asyncio.wait_for(root.ask("name them"), TIMEOUT)
        assert end is not None and end.answer == "done"
        results = outputs(runtime, root.id)
        for name, output in zip(bad, results, strict=False):
            assert output.startswith("refused:"), (name, output)
            assert output.count("\n") == 1, (name, output)  # one line
        assert "at most" in results[bad.index("y" * 95)]  # ours, not the store's failure
        assert results[len(bad)] == "admitted ok-1.2_x\n"
        [child] = runtime.store.sessions(parent_id=root.id)
        assert child.meta["name"] == "ok-1.2_x"
        assert await asyncio.wait_for(runtime.tree.wait_quiet(root.id, None), TIMEOUT)

"""The kernel-side ``harness`` and ``refine`` objects from real kernels, over the
kernels' routes served in-process (make_runtime does that); the models are
faux scripts. (The harness itself is tested in test_harness.py; the CLI in
test_harness_cli.py.)"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from recursa.errors import UsageError
from recursa.models.faux import code, register_script, reply
from recursa.protocol.events import CellFinished
from recursa.protocol.harness import Edit
from recursa.protocol.person_ops import Decision
from recursa.protocol.wire import CommandKey
from recursa.runtime import Runtime
from recursa.runtime.host import RuntimeHost
from recursa.testing import make_runtime

TIMEOUT = 120
ENTRY_KEYS = (
    "id", "version", "kind", "title", "scope", "status", "content", "code", "meta", "reason",
    "effect", "review", "created_at", "session_id", "action", "actor", "source_events",
    "refinement_id",
)  # fmt: skip

NOTE = "run the tests before answering"
LEARN = f"""
r = await harness.create('prompt_note', 'tests first', {NOTE!r}, reason='forgot once',
                         effect='fewer wrong answers')
print(r['op'], '|', r['applies'], '|', r['entry_id'].startswith('h-'))
print([e['id'] for e in await harness.list()])
try:
    await harness.get(r['entry_id'])
except Exception as exc:
    print(type(exc).__name__, exc)
"""
READ_AND_UPDATE = """
e = await harness.get('tests first')
print(e['status'], e['scope'], e['version'], e['kind'], e['id'] == r['entry_id'], e['actor'])
print(sorted(e))
print([x['title'] for x in await harness.list(kind='prompt_note', scope='local')])
print(await harness.list(kind='memory'))
u = await harness.update(e['id'], content='run pytest -q before answering', reason='be specific')
print(u['op'], u['entry_id'] == e['id'])
"""
HISTORY_AND_ROLLBACK = """
h = await harness.history(r['entry_id'])
print([(v['version'], v['action'], v['status']) for v in h])
print(await harness.diff(r['entry_id']), end='')
b = await harness.rollback(r['entry_id'], 1, reason='too narrow')
print(b['op'])
"""
AFTER_ROLLBACK = """
e = await harness.get(r['entry_id'])
print(e['version'], e['action'], e['status'], e['content'] == {NOTE!r}, e['reason'])
""".replace("{NOTE!r}", repr(NOTE))
MISTAKES = """
for call in (
    lambda: harness.create('bogus', 'x', 'y'),
    lambda: harness.create('memory', 'x', 'y', colour='red'),
    lambda: harness.create('memory', '', 'y'),
    lambda: harness.rollback('tests first', '1'),
    lambda: harness.create('skill', 'not a name', code='x = 1'),
    lambda: harness.update('no such entry', content='z'),
):
    try:
        await call()
    except Exception as exc:
        print(type(exc).__name__ + ':', exc)
"""


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    return [
        r.event.output
        for r in runtime.get(session_id).history()
        if isinstance(r.event, CellFinished)
    ]


async def test_edits_are_staged_until_the_turn_ends_then_read_back_and_rolled_back(
    home: Path, tmp_path: Path
) -> None:
    script = register_script(
        "curator",
        [
            code(LEARN),
            reply("noted"),
            code(READ_AND_UPDATE),
            reply("updated"),
            code(HISTORY_AND_ROLLBACK),
            reply("rolled back"),
            code(AFTER_ROLLBACK),
            reply("checked"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/curator", cwd=tmp_path)
        for task in ("learn", "read", "roll back", "check"):
            end = await asyncio.wait_for(session.ask(task), TIMEOUT)
            assert end is not None
        learn, read, history, after = outputs(runtime, session.id)

        # Staged, not applied: the turn that made it neither lists nor gets it.
        op, empty, staged = learn.splitlines()
        assert op == "create | at the end of this turn | True"
        assert empty == "[]"
        assert staged.startswith("NotFound no harness entry 'h-")
        assert staged.endswith(" yet: it is staged, and applies when this turn ends")

        # The next turn sees it active (local: no gate), by title too; the
        # model's next call had it in its prompt.
        lines = read.splitlines()
        assert lines[0] == "active local 1 prompt_note True model"
        assert set(ast.literal_eval(lines[1])) == set(ENTRY_KEYS)
        assert lines[2:] == ["['tests first']", "[]", "update True"]
        assert NOTE in script.requests[2].system

        # History, diff, rollback: every change a new version.
        entry = runtime.learning.harness.find("tests first")
        rows, *diff, op = history.splitlines()
        assert rows == "[(1, 'create', 'active'), (2, 'update', 'active')]"
        assert diff[:2] == [f"--- {entry.entry_id} v1", f"+++ {entry.entry_id} v2"]
        assert f"-{NOTE}" in diff and "+run pytest -q before answering" in diff
        assert op == "rollback"
        assert after == "3 rollback active True too narrow\n"
        v1, v3 = (runtime.store.harness.version(entry.entry_id, n) for n in (1, 3))
        assert v1 is not None and v3 is not None
        assert (v3.content, v3.code, v3.title) == (v1.content, v1.code, v1.title)
        # The model's edits carry their evidence: the event of the cell that made them.
        assert v1.source_events and v1.actor == "model" and v1.effect == "fewer wrong answers"


async def test_mistakes_are_one_line_errors_in_the_cell(home: Path, tmp_path: Path) -> None:
    register_script("clumsy", [code(MISTAKES), reply("done")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/clumsy", cwd=tmp_path)
        await asyncio.wait_for(session.ask("try"), TIMEOUT)
        [out] = outputs(runtime, session.id)
    assert out.splitlines() == [
        "ValueError: kind must be one of prompt_note, memory, skill, subagent_spec, not 'bogus'",
        "TypeError: HarnessApi.create() got an unexpected keyword argument 'colour'",
        "ValueError: title is empty",
        "TypeError: to_version must be an int, not str",
        "UsageError: a skill's title is the name it is called by: a Python identifier,"
        " not 'not a name'",
        "NotFound: no harness entry 'no such entry'",
    ]


async def test_a_session_cannot_see_or_change_another_sessions_local_entry(
    home: Path, tmp_path: Path
) -> None:
    register_script(
        "owner",
        [
            code(
                "m = await harness.create('memory', 'secret', 'the staging password rotates')\n"
                "g = await harness.create('memory', 'shared', 'the CI runs nightly',"
                " scope='global')\n"
            ),
            reply("kept"),
        ],
    )
    async with make_runtime(home) as runtime:
        owner = await runtime.create_session(model="faux/owner", cwd=tmp_path)
        await asyncio.wait_for(owner.ask("remember"), TIMEOUT)
        secret = runtime.learning.harness.find("secret")
        assert (secret.status, secret.session_id) == ("active", owner.id)
        probe = f"""
for call in (
    lambda: harness.get({secret.entry_id!r}),
    lambda: harness.get('secret'),
    lambda: harness.history({secret.entry_id!r}),
    lambda: harness.diff({secret.entry_id!r}),
    lambda: harness.update({secret.entry_id!r}, content='mine now'),
    lambda: harness.delete({secret.entry_id!r}),
):
    try:
        await call()
        print('reached')
    except Exception as exc:
        print(type(exc).__name__)
print(sorted(e['title'] for e in await harness.list()))
"""
        register_script("stranger", [code(probe), reply("nothing")])
        stranger = await runtime.create_session(model="faux/stranger", cwd=tmp_path)
        await asyncio.wait_for(stranger.ask("look"), TIMEOUT)
        [out] = outputs(runtime, stranger.id)
        assert out.splitlines() == ["NotFound"] * 6 + ["['shared']"]
        assert runtime.store.harness.staged(stranger.id) == []
        assert len(runtime.store.harness.history(secret.entry_id)) == 1


async def test_refine_run_stages_the_proposals_for_the_turn_boundary(
    home: Path, tmp_path: Path
) -> None:
    proposals = (
        '[{"op": "create", "kind": "memory", "title": "port", "content": "the app listens on'
        ' 8080", "scope": "local", "reason": "seen in a cell"}]'
    )
    script = register_script(
        "reflective",
        [
            code("print(8080)"),
            code(
                "out = await refine.run('look for facts')\n"
                "print(out['refinement_id'], len(out['staged']), out['problems'])\n"
                "print(await harness.list())"
            ),
            reply(proposals),  # the refinement's own model call, made during the cell
            reply("refined"),
        ],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/reflective", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("work, then refine"), TIMEOUT)
        assert end is not None and end.answer == "refined"
        _, out = outputs(runtime, session.id)
        assert out == "1 1 []\n[]\n"  # staged: not applied while the turn runs
        refine_call = script.requests[2]
        assert refine_call.tools == () and "look for facts" in str(refine_call.messages[-1])
        memory = runtime.learning.harness.find("port")
        assert (memory.status, memory.actor, memory.refinement_id) == ("active", "refine", 1)
        assert memory.session_id == session.id


async def test_a_persons_change_repeated_by_its_command_id_is_not_run_twice(
    home: Path, tmp_path: Path
) -> None:
    async with make_runtime(home, api=False) as runtime:
        host = RuntimeHost(runtime)
        session = await runtime.create_session(model="faux/echo", cwd=tmp_path)
        harness = runtime.learning.harness
        edit = Edit(op="create", entry_id="", kind="skill", title="twice", scope="global",
                    code="def twice(x):\n    return 2 * x\n")  # fmt: skip
        receipt = harness.stage(session.id, edit)
        [proposed] = harness.apply_staged(session.id).written
        assert proposed.status == "proposed"
        key = CommandKey("client", "approve-1")
        first = await host.people.harness_approve(Decision(str(receipt["entry_id"]), "fine"), key)
        again = await host.people.harness_approve(Decision(str(receipt["entry_id"]), "fine"), key)
        assert first == again and (first.version, first.status) == (2, "active")
        assert len(runtime.store.harness.history(first.id)) == 2
        # A refused change records nothing, so its retry is refused the same way.
        refused = CommandKey("client", "approve-2")
        for _ in range(2):
            with pytest.raises(UsageError, match="is active, not proposed"):
                await host.people.harness_approve(Decision(first.id), refused)

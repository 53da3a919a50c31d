"""Compaction with real kernels: automatic compaction near the window (more
than once in a turn), the kernel's ``history`` finding what it removed and
reading turns, events and full outputs, ``compact.run()`` from a cell, a
provider's context overflow, a reload that rebuilds the compacted context from
the log, and ``recursa run --context-window 8000`` through a real daemon.

The faux model (and the fake server's responder) answers the summary calls by
their system prompt, so the agent's own steps are never consumed by them.
(Named apart from tests/unit/test_compaction.py: test modules share one namespace.)"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daemon_kit import daemon_env, kill_everything, recursa, unanswered_calls
from recursa.models.faux import (
    FauxFault,
    FauxReply,
    FauxScript,
    code,
    fault,
    register_script,
    reply,
)
from recursa.models.types import AssistantMessage, Message, Request, ToolResult, UserMessage
from recursa.protocol.events import CellFinished, Compacted, Event, EventRecord, ModelUsage
from recursa.runtime import Runtime
from recursa.session.compaction import SUMMARY_SYSTEM
from recursa.testing import FakeModelServer, Reply, ToolCallSpec, make_runtime

TIMEOUT = 120
BIG = 6000
"""Characters each big cell prints: under the 8,000 shown, so the model sees them whole."""

EARLY = "FIRST_OUTPUT_alpha"
SEARCH = f"""
hits = await history.search({EARLY.lower()!r})
compactions = await history.events(type="compacted")
first = compactions[0]["seq"]
before = [h for h in hits if h["seq"] < first]
print(len(compactions), "compactions;", [(h["type"], h["turn"]) for h in before])
print(before[0]["text"][:40])
"""


class Model:
    """A faux model: the agent's steps in order, and numbered summaries for the
    summary calls (recognized by their system prompt)."""

    def __init__(self, name: str, steps: Sequence[FauxReply | FauxFault]) -> None:
        self.steps = list(steps)
        self.summaries: list[Request] = []
        self._lock = threading.Lock()
        self.script: FauxScript = register_script(name, [], fallback=self.respond)

    def respond(self, request: Request) -> FauxReply | FauxFault:
        with self._lock:
            if request.system == SUMMARY_SYSTEM:
                self.summaries.append(request)
                n = len(self.summaries)
                return reply(
                    f"Here is the summary.\n## Task\nprint things (summary #{n})\n"
                    f"## Progress\nprinted {n} big outputs\n## State\nnothing\n"
                    "## Errors and lessons\nnone\n## Next steps\ngo on"
                )
            return self.steps.pop(0) if self.steps else reply("(out of steps)")

    @property
    def turns(self) -> list[Request]:
        """The agent's own requests (not the summary calls)."""
        return [r for r in self.script.requests if r.system != SUMMARY_SYSTEM]


def big(label: str) -> FauxReply:
    return code(f"print({label!r} + 'x' * {BIG})")


def assert_paired(messages: Sequence[Message]) -> None:
    """Every tool call is answered right after its message, and every result
    answers a call made just before it: a cut never separated the two."""
    open_calls: list[str] = []
    for message in messages:
        if isinstance(message, ToolResult):
            assert message.call_id in open_calls, f"a result without its call: {message.call_id}"
            open_calls.remove(message.call_id)
            continue
        assert not open_calls, f"calls left unanswered: {open_calls}"
        if isinstance(message, AssistantMessage):
            open_calls = [call.id for call in message.tool_calls]
    assert not open_calls, f"calls left unanswered: {open_calls}"


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    return [
        r.event.output
        for r in runtime.get(session_id).history()
        if isinstance(r.event, CellFinished)
    ]


def events_of(runtime: Runtime, session_id: str, kind: type[Event]) -> list[EventRecord]:
    return [r for r in runtime.get(session_id).history() if isinstance(r.event, kind)]


async def ask(runtime: Runtime, session_id: str, text: str) -> None:
    end = await asyncio.wait_for(runtime.get(session_id).ask(text), TIMEOUT)
    assert end is not None and end.reason == "answered", end


async def test_compacting_twice_keeps_everything_searchable(home: Path, tmp_path: Path) -> None:
    model = Model(
        "compacting",
        [big(EARLY), big("second"), big("third"), big("fourth"), code(SEARCH), reply("done")],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(
            model="faux/compacting", cwd=tmp_path, context_window=4000
        )
        await ask(runtime, session.id, "print four big outputs, then search for the first")
        compactions = events_of(runtime, session.id, Compacted)
        assert len(compactions) >= 2
        for record in compactions:
            event = record.event
            assert event.reason == "auto" and event.tokens_after < event.tokens_before
            assert event.summary.startswith("## Task\nprint things")

        # The later cell found the early output, from before the first compaction.
        found = outputs(runtime, session.id)[-1]
        assert f"{len(compactions)} compactions;" in found
        assert "('cell_finished', 1)" in found and "('cell_started', 1)" in found
        assert EARLY in found

        # Each summary call saw the previous summary; none saw a split step.
        assert len(model.summaries) == len(compactions)
        for request in model.summaries[1:]:
            assert "[summary of the earlier work]" in request.messages[0].text
        for request in model.turns:
            assert_paired(request.messages)
        # After the first compaction the early output left the context (the
        # summary and the request of the turn stand in for it) ...
        last = model.turns[-1].messages
        assert last[0].text.startswith("[context compacted]")
        assert "print four big outputs" in last[0].text
        assert not any(m.text.startswith(EARLY) for m in last if isinstance(m, ToolResult))
        # ... and each summary call is a model call of the session, counted.
        calls = events_of(runtime, session.id, ModelUsage)
        assert sum(1 for r in calls if r.event.step == 0) == len(compactions)
        assert runtime.store.usage_totals(session.id).calls == len(model.script.requests)


async def test_compact_run_from_a_cell_keeps_the_step_in_progress(
    home: Path, tmp_path: Path
) -> None:
    run = 'r = await compact.run("keep the printed labels")\nprint(r)'
    model = Model("asked", [big("one"), big("two"), code(run), reply("compacted")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/asked", cwd=tmp_path)
        await ask(runtime, session.id, "print, then compact")
        [record] = events_of(runtime, session.id, Compacted)
        event = record.event
        assert event.reason == "agent" and event.instructions == "keep the printed labels"
        assert event.tokens_after < event.tokens_before
        assert "'compacted': True" in outputs(runtime, session.id)[-1]
        assert "keep the printed labels" in model.summaries[0].messages[0].text

        # The next call: the summary, then the step that asked, whole.
        after = model.turns[-1].messages
        assert after[0].text.startswith("[context compacted]")
        assert "print, then compact" in after[0].text  # the turn's request, verbatim
        assert isinstance(after[1], AssistantMessage)
        assert "compact.run" in after[1].tool_calls[0].arguments
        assert isinstance(after[2], ToolResult) and "'compacted': True" in after[2].text
        assert len(after) == 3


async def test_a_context_overflow_compacts_and_tries_again(home: Path, tmp_path: Path) -> None:
    Model(
        "overflowing",
        [big("one"), big("two"), fault("context_overflow", "prompt too long"), reply("fits now")],
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/overflowing", cwd=tmp_path)
        await ask(runtime, session.id, "print a lot")
        [record] = events_of(runtime, session.id, Compacted)
        assert record.event.reason == "auto"
        assert runtime.get(session.id).last_answer == "fits now"


async def test_a_reload_rebuilds_the_compacted_context(home: Path, tmp_path: Path) -> None:
    model = Model(
        "reloaded", [big("one"), big("two"), big("three"), reply("first done"), reply("again")]
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(
            model="faux/reloaded", cwd=tmp_path, context_window=3000
        )
        await ask(runtime, session.id, "print three")
        assert events_of(runtime, session.id, Compacted)
        context = runtime.get(session.id).context
        tokens = runtime.get(session.id).context_tokens
        session_id = session.id
    async with make_runtime(home) as runtime:
        reloaded = runtime.get(session_id)
        assert reloaded.context == context
        assert reloaded.context[0].text.startswith("[context compacted]")
        assert reloaded.context_tokens <= tokens + 10
        # The window came back with the session (it is kept in its row).
        await ask(runtime, session_id, "and now?")
        sent = model.turns[-1].messages
        assert sent[: len(context)] == context
        assert sent[-1] == UserMessage("and now?")


READS = """
print(len(await history.output(1)), (await history.search("tail_mark"))[0]["full"])
t = await history.turn(1)
print([e["type"] for e in t][:3], t[-1]["type"], {e["turn"] for e in t})
print([e["type"] for e in await history.events(after=0, limit=2)])
print([e["answer"] for e in await history.events(type="turn_ended")])
for bad in (lambda: history.turn(99), lambda: history.search(""), lambda: history.events(limit=0)):
    try:
        await bad()
    except Exception as exc:
        print(type(exc).__name__, exc)
"""


async def test_history_reads_turns_events_and_full_outputs(home: Path, tmp_path: Path) -> None:
    long = "print('h' * 20000 + 'TAIL_MARK')"
    Model("reader", [code(long), reply("first"), code(READS), reply("second")])
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/reader", cwd=tmp_path)
        await ask(runtime, session.id, "one")
        await ask(runtime, session.id, "two")
        lines = outputs(runtime, session.id)[-1].splitlines()
    assert lines[0] == "20010 True"  # the full output, though the model saw 8,000 characters
    assert lines[1] == "['user_input', 'turn_started', 'assistant_reply'] turn_ended {1}"
    assert lines[2] == "['session_created', 'status_changed']"
    assert lines[3] == "['first']"
    assert lines[4] == "NotFound this session has no turn 99"
    assert lines[5] == "ValueError query is empty"
    assert lines[6] == "ValueError limit must be from 1 to 1000, not 0"


# ----------------------------------------------------- the daemon and the CLI

MARKER = "EARLY_MARKER_zeta"
CLI_SEARCH = f"""
hits = await history.search({MARKER.lower()!r})
compactions = await history.events(type="compacted")
old = [h for h in hits if compactions and h["seq"] < compactions[0]["seq"]]
print("found %d old hits" % len([h for h in old if h["type"] == "cell_finished"]))
"""


class CliModel:
    """The fake server's responder: summaries for summary calls; the agent's
    steps in order (six big outputs, a search, an answer) for the others."""

    def __init__(self) -> None:
        big_prints = [f"print({MARKER + ' '!r} + 'q' * 7000)"]
        big_prints += [f"print('step {n} ' + 'r' * 7000)" for n in range(2, 7)]
        self.steps: list[Reply] = [Reply(tool_calls=[python(src)]) for src in big_prints]
        self.steps += [Reply(tool_calls=[python(CLI_SEARCH)]), Reply(text="finished")]
        self.summaries = 0
        self.turn_requests: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        messages: list[dict[str, Any]] = body["messages"]
        with self._lock:
            if messages[0]["content"] == SUMMARY_SYSTEM:
                self.summaries += 1
                return Reply(text=f"## Task\nprint and search (summary {self.summaries})")
            self.turn_requests.append(messages)
            return self.steps.pop(0) if self.steps else Reply(text="(out of steps)")


def python(source: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": source})


def test_recursa_run_with_a_small_window_compacts_and_finds_the_early_output(
    home: Path, tmp_path: Path
) -> None:
    model = CliModel()
    with FakeModelServer.in_thread(responder=model) as server:
        env = daemon_env(home, server)
        try:
            result = recursa(
                ["run", "--context-window", "8000", "--model", "openai/m", "print, then search"],
                env,
                tmp_path,
            )
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() == "finished"
            assert "context compacted near the context window" in result.stderr
            assert re.search(r"found [1-9]\d* old hits", result.stderr), result.stderr[-3000:]
            assert model.summaries >= 1
            for messages in model.turn_requests:
                assert unanswered_calls(messages) == []
            assert str(model.turn_requests[-1][1]["content"]).startswith("[context compacted]")
            too_small = recursa(["run", "--context-window", "100", "x"], env, tmp_path)
            assert too_small.returncode == 2
            assert "too small" in too_small.stderr
        finally:
            kill_everything(home)

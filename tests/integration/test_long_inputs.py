"""Long inputs become kernel variables (issue 12, the RLM move), with real
kernels, a real store and, for ``--context-file``, the real CLI against a real
daemon over HTTP to the fake server. Only the model's replies are scripted.

- An input past the window's share is placed as ``context`` before the first
  model call, the model reads a short description instead, and the variable
  survives an unload; a later long input gets its own name.
- ``recursa run --context-file`` places each file beside the task; bad files
  are one line and exit 2.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from daemon_kit import daemon_env, fails, kill_everything, recursa
from recursa.models.faux import code, register_script, reply
from recursa.models.types import UserMessage
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    InputPlaced,
    TurnEnded,
    UserInput,
)
from recursa.runtime import Runtime
from recursa.testing import FakeModelServer, Reply, ToolCallSpec, make_runtime

TIMEOUT = 120
NEEDLE = "The special magic number for tulips is 4817263."
QUESTION = "What is the special magic number for tulips mentioned in the text above?"
DIGEST = "import hashlib; print(hashlib.sha256({}.encode()).hexdigest())"


def haystack(chars: int) -> str:
    """``chars`` characters of filler lines with the needle in the middle and the question last."""
    line = "The grass is green. The sky is blue. The sun is yellow. Here we go.\n"
    filler = line * (chars // len(line) + 1)
    half = (chars - len(NEEDLE) - len(QUESTION) - 2) // 2
    rest = chars - half - len(NEEDLE) - len(QUESTION) - 2
    text = filler[:half] + NEEDLE + "\n" + filler[:rest] + "\n" + QUESTION
    assert len(text) == chars
    return text


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def outputs(runtime: Runtime, session_id: str) -> list[str]:
    return [
        r.event.output
        for r in runtime.get(session_id).history()
        if isinstance(r.event, CellFinished)
    ]


async def test_an_oversize_input_is_placed_as_context_not_refused(
    home: Path, tmp_path: Path
) -> None:
    text = haystack(200_000)
    later = haystack(60_000).replace("tulips", "roses")
    script = register_script(
        "long-input",
        [
            code(DIGEST.format("context"), "print(context[context.find('magic'):][:35])"),
            reply("4817263"),
            code(DIGEST.format("context") + "; " + DIGEST.format("context_2")),
            reply("both there"),
        ],
        context_window=4000,
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/long-input", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask(text), TIMEOUT)
        assert isinstance(end, TurnEnded) and end.reason == "answered", end
        assert end.answer == "4817263"

        # The model got a description, never the text; the first cell found it whole.
        first = script.requests[0].messages[-1]
        assert isinstance(first, UserMessage)
        assert "`context`" in first.text and "200,000 characters" in first.text
        assert QUESTION[:40] in first.text  # the tail shows the question
        assert len(first.text) < 1500 and NEEDLE not in first.text
        assert outputs(runtime, session.id)[:2] == [
            sha(text) + "\n",
            "magic number for tulips is 4817263.\n",
        ]

        # Recorded: placed (name, size) before the first model call, the text kept once.
        history = [r.event for r in runtime.get(session.id).history()]
        placed = [e for e in history if isinstance(e, InputPlaced)]
        lines = text.count("\n") + 1
        assert placed == [
            InputPlaced(name="context", origin="oversize", chars=200_000, lines=lines)
        ]
        kinds = [type(e) for e in history]
        assert kinds.index(InputPlaced) < kinds.index(UserInput) < kinds.index(AssistantReply)
        inputs = [e for e in history if isinstance(e, UserInput)]
        assert inputs[0].text == first.text

        # Unloaded (snapshot, kernel stopped) and loaded again: both names hold their text.
        await runtime.get(session.id).unload()
        end = await asyncio.wait_for(runtime.get(session.id).ask(later), TIMEOUT)
        assert end is not None and end.reason == "answered", end
        assert outputs(runtime, session.id)[-1] == f"{sha(text)}\n{sha(later)}\n"
        assert "`context_2`" in str(script.requests[2].messages[-1].text)


async def test_a_short_input_stays_in_the_prompt(home: Path, tmp_path: Path) -> None:
    script = register_script("short-input", [reply("fine")], context_window=4000)
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/short-input", cwd=tmp_path)
        end = await asyncio.wait_for(session.ask("hello " * 500), TIMEOUT)
        assert end is not None and end.reason == "answered"
        assert script.requests[0].messages[-1] == UserMessage("hello " * 500)
        history = runtime.get(session.id).history()
        assert not [r for r in history if isinstance(r.event, InputPlaced)]


# ------------------------------------------------------------------ the CLI


class Responder:
    """The fake server's model: one cell reading both files, then an answer."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        cell = (
            "print(len(context_1), len(context_2)); "
            + DIGEST.format("context_1")
            + "; "
            + DIGEST.format("context_2")
        )
        again = "print(len(context_3), context_3[:5])"
        self.steps = [
            Reply(tool_calls=[ToolCallSpec("python", {"code": cell})]),
            Reply("done"),
            Reply(tool_calls=[ToolCallSpec("python", {"code": again})]),
            Reply("done again"),
        ]

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        self.requests.append(body["messages"])
        return self.steps.pop(0) if self.steps else Reply(text="(out of steps)")


def test_context_files_through_the_cli_and_the_daemon(home: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text(haystack(50_000), encoding="utf-8")
    data = tmp_path / "data.csv"
    data.write_text("a,b\n" + "1,2\n" * 3000, encoding="utf-8")
    model = Responder()
    with FakeModelServer.in_thread(responder=model) as server:
        env = daemon_env(home, server)
        try:
            task = "Sum column b of the CSV."
            args = ["run", "--model", "openai/m", "--context-file", "notes.txt"]
            result = recursa([*args, "--context-file", "data.csv", "--json", task], env, tmp_path)
            assert result.returncode == 0, result.stderr
            first = model.requests[0][-1]["content"]
            assert first.startswith(task)
            assert "notes.txt is in your kernel as the Python variable `context_1`" in first
            assert "data.csv is in your kernel as the Python variable `context_2`" in first
            assert NEEDLE not in first and len(first) < 2000
            tool = [m["content"] for m in model.requests[1] if m["role"] == "tool"]
            expected = [f"50000 12004\n{sha(notes.read_text())}\n{sha(data.read_text())}\n"]
            assert tool == expected
            placed = [
                json.loads(line) for line in result.stdout.splitlines() if '"input_placed"' in line
            ]
            assert [(p["name"], p["label"]) for p in placed] == [
                ("context_1", "notes.txt"),
                ("context_2", "data.csv"),
            ], result.stdout[:2000]

            # `recursa send --context-file`: numbered on, in the same kernel.
            session = placed[0]["session_id"]
            (tmp_path / "more.txt").write_text("hello again", encoding="utf-8")
            sent = recursa(
                ["send", session, "--context-file", "more.txt", "Read the new file."], env, tmp_path
            )
            assert sent.returncode == 0, sent.stderr
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:  # the turn the message started, to its end
                log = recursa(["logs", session, "--json"], env, tmp_path).stdout
                if log.count('"turn_ended"') == 2:
                    break
            assert '"answer":"done again"' in log
            assert "`context_3`" in model.requests[2][-1]["content"]
            assert [m["content"] for m in model.requests[3] if m["role"] == "tool"][-1] == (
                "11 hello\n"
            )

            missing = fails([*args[:3], "--context-file", "nope.txt", task], env, tmp_path, 2)
            assert "nope.txt: no such file" in missing
            (tmp_path / "bin.dat").write_bytes(b"ok\xff\xfe")
            binary = fails([*args[:3], "--context-file", "bin.dat", task], env, tmp_path, 2)
            assert "bin.dat: not UTF-8 text" in binary
            alone = fails(["run", "--context-file", "notes.txt"], env, tmp_path, 2)
            assert "needs a TASK" in alone
        finally:
            kill_everything(home)


WAIT_FOR_GO = """
import pathlib, time
while not pathlib.Path('go').exists():
    time.sleep(0.02)
print('went on')
"""


async def test_a_long_message_sent_during_a_turn_waits_for_the_next(
    home: Path, tmp_path: Path
) -> None:
    text = haystack(30_000)
    script = register_script(
        "long-steer",
        [code(WAIT_FOR_GO), reply("first done"), code(DIGEST.format("context")), reply("read")],
        context_window=4000,
    )
    async with make_runtime(home) as runtime:
        session = await runtime.create_session(model="faux/long-steer", cwd=tmp_path)
        started = asyncio.Event()
        session.listen(lambda r: started.set() if isinstance(r.event, CellStarted) else None)
        session.send("wait for go")
        await asyncio.wait_for(started.wait(), TIMEOUT)
        session.send(text, mode="auto")  # would steer the running turn, were it short
        (tmp_path / "go").touch()
        end = await asyncio.wait_for(session.wait_idle(), TIMEOUT)
        assert end is not None and end.answer == "read", end
        # The first turn never saw it; the second was started by it, placed first.
        assert all(text not in str(m) for r in script.requests[:2] for m in r.messages)
        inputs = [r.event for r in session.history() if isinstance(r.event, UserInput)]
        assert [i.mode for i in inputs] == ["turn", "turn"]
        assert "`context`" in inputs[1].text
        assert outputs(runtime, session.id)[-1] == sha(text) + "\n"


class Searcher:
    """The fake server's model: runs the search cell the first message offers."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        self.requests.append(body["messages"])
        if len(self.requests) > 1:
            return Reply("4817263")
        first = body["messages"][-1]["content"]
        offered = next(line for line in first.splitlines() if line.startswith("search("))
        return Reply(tool_calls=[ToolCallSpec("python", {"code": offered})])


def test_a_question_about_a_context_file_is_offered_a_search_that_finds_it(
    home: Path, tmp_path: Path
) -> None:
    (tmp_path / "doc.txt").write_text(haystack(40_000), encoding="utf-8")
    model = Searcher()
    with FakeModelServer.in_thread(responder=model) as server:
        env = daemon_env(home, server)
        try:
            args = ["run", "--model", "openai/m", "--context-file", "doc.txt", QUESTION]
            result = recursa(args, env, tmp_path)
            assert result.returncode == 0, result.stderr
            assert result.stdout.strip() == "4817263"
            tool = [m["content"] for m in model.requests[1] if m["role"] == "tool"]
            best = tool[0].splitlines()[0]
            assert best.startswith("[1] line ") and "4 of 4 words" in best, best
            assert NEEDLE in best  # the best passage is the needle's
        finally:
            kill_everything(home)

"""``recursa eval`` as a user runs it: the real CLI in a subprocess, a real
daemon per configuration, real kernels, real HTTP to the loopback fake model
server (only the model is scripted), a custom suite given as a file."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon_kit import daemon_env, kill_everything
from recursa.daemon.paths import DaemonPaths, read_state
from recursa.testing import FakeModelServer, Reply

SUITE = '''
"""Three questions whose answer is in the material."""
from recursa.evals.scoring import exact_match
from recursa.evals.trials import Item

name = "colours"
COLOURS = ["red", "green", "blue"]


def items(lengths, n, seed):
    out = []
    for index, colour in enumerate(COLOURS[:n]):
        context = f"Item {index}. The colour is {colour}."
        out.append(Item(id=f"colour/0/{index}", task="colour", question="Which colour?",
                        context=context, prompt=context + " Which colour?",
                        references=(colour,), metric="exact_match"))
    return out


def score(item, answer):
    return exact_match(answer, item.references)
'''


def answer(body: dict[str, Any]) -> str:
    text = json.dumps(body["messages"])
    return re.findall(r"The colour is (\w+)", text)[-1]


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "colours.py"
    path.write_text(SUITE)
    return path


@pytest.fixture
def out(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "run"
    yield out
    for home in (out / "homes").glob("*"):
        kill_everything(home)


def eval_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "recursa", "eval", *args]


def daemon_running(home: Path) -> bool:
    return read_state(DaemonPaths.for_home(home)) is not None


def test_ctrl_c_keeps_the_finished_trials_and_resume_runs_the_rest(
    server: FakeModelServer, home: Path, tmp_path: Path, suite: Path, out: Path
) -> None:
    held = {"on": True}

    def respond(path: str, body: dict[str, Any]) -> Reply:
        colour = answer(body)
        if held["on"] and colour != "red":
            return Reply(text="thinking", stall_after=1)  # holds the stream open
        return Reply(text=colour)

    server.responder = respond
    env = daemon_env(home, server)
    args = [str(suite), "--model", "openai/m", "--mode", "context", "--n", "3", "--out", str(out)]
    run = subprocess.Popen(
        eval_cmd("run", *args), env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        # Item 0 is answered; item 1 is under way (its request is held).
        server.wait_until(lambda: any("green" in json.dumps(r.body) for r in server.requests), 60)
        results = out / "results.jsonl"
        assert results.read_text().count("\n") == 1
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, stderr
    assert f"recursa eval run --resume {out.resolve()}" in stderr
    [kept] = [json.loads(line) for line in results.read_text().splitlines()]
    assert kept["item"] == "colour/0/0" and kept["score"] == 1.0
    homes = list((out / "homes").glob("*"))
    assert len(homes) == 1 and not daemon_running(homes[0])  # its daemon was stopped

    held["on"] = False
    done = subprocess.run(
        eval_cmd("run", "--resume", str(out)),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(line["item"] for line in lines) == [f"colour/0/{i}" for i in range(3)]
    assert all(line["score"] == 1.0 and line["status"] == "ok" for line in lines)
    # The report follows the run: the table, and the plots in the run's directory.
    assert "openai/m · context" in done.stdout and "1.00" in done.stdout
    assert (out / "score-vs-total-tokens.png").read_bytes().startswith(b"\x89PNG")
    assert not daemon_running(homes[0])

    # Every trial exports as a chat conversation with its score (the fake model
    # speaks OpenAI's tool calls, so there are none here: it answered at once).
    exported = tmp_path / "trials.jsonl"
    export = subprocess.run(
        [sys.executable, "-m", "recursa", "export", str(out), "--out", str(exported)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert export.returncode == 0, export.stderr
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert sorted((r["item"], r["score"]) for r in records) == [
        (f"colour/0/{i}", 1.0) for i in range(3)
    ]
    for record in records:
        roles = [m["role"] for m in record["messages"]]
        assert roles == ["system", "user", "assistant"], roles
        assert "The colour is" in record["messages"][1]["content"]

    compare = subprocess.run(
        eval_cmd("compare", str(out)), env=env, capture_output=True, text=True, check=False
    )
    assert compare.returncode != 0 and "1 configuration" in compare.stderr

"""recursa as the solver of a small Inspect task on local data: real kernels,
a runtime hosted in the eval's process, and a faux script as recursa's model.
Inspect's own model (mockllm) is never called; nothing leaves the machine."""

from __future__ import annotations

import gc
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import match

from recursa.evals.inspect_agent import STORE_KEY, recursa_agent
from recursa.models.faux import FauxReply, code, register_script, reply
from recursa.models.types import AssistantMessage, Request

SAMPLES = [
    Sample(id="mul", input="What is 6 times 7?", target="42"),
    Sample(id="capital", input="What is the capital of France?", target="Paris"),
    Sample(
        id="lines",
        input="How many lines does the document have?",
        target="3",
        metadata={"document": "alpha\nbeta\ngamma\n"},
    ),
    Sample(id="wrong", input="What is 2 plus 2?", target="4"),
    Sample(
        id="file",
        input="What is the last word of notes.txt?",
        target="delta",
        files={"notes.txt": "alpha beta\ngamma delta\n"},
    ),
]


def respond(request: Request) -> FauxReply:
    """Each sample's session, told apart by its task: a cell, then an answer
    (or an answer at once); the "wrong" one answers 5."""
    task = request.messages[0].text
    steps = sum(isinstance(m, AssistantMessage) for m in request.messages)
    if "notes.txt" in task:
        # The file from the sample's sandbox is in the kernel too.
        return code("print(context.split()[-1])") if steps == 0 else reply("delta")
    if "6 times 7" in task:
        return code("print(6 * 7)") if steps == 0 else reply("42")
    if "document" in task:
        # The sample's metadata text is the kernel variable `context`.
        return code("print(len(context.splitlines()))") if steps == 0 else reply("3")
    if "capital" in task:
        return reply("Paris")
    return reply("5")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuse, and record, any connection to an address off this machine
    (unix sockets and loopback are how recursa's own parts talk)."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = str(address[0])
            if not (host.startswith("127.") or host in ("::1", "localhost")):
                attempts.append(address)
                raise OSError("network is unreachable in this test")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


INSPECT_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <function MemoryObjectReceiveStream.__del__"
    ":pytest.PytestUnraisableExceptionWarning"
)
"""Inspect's per-sample event emitter (inspect_ai/hooks/_hooks.py,
start_sample_event_emitter) leaves its receive stream for the collector to
close, and anyio warns then, once per sample. Only that warning is let
through; each test collects before it ends, so the warning falls in its scope."""


@INSPECT_LEAK
def test_an_inspect_task_runs_with_recursa_as_its_solver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: list[Any]
) -> None:
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    script = register_script("inspect", [], fallback=respond)
    task = Task(dataset=MemoryDataset(SAMPLES), scorer=match(), sandbox="local")
    solver = recursa_agent(
        model="faux/inspect", in_process=True, context_keys=["document"], files=["notes.txt"]
    )

    [log] = eval(
        task, model="mockllm/model", solver=solver, log_dir=str(tmp_path / "logs"), display="none"
    )

    assert log.status == "success", log.error
    assert log.samples is not None
    scores = {sample.id: sample.scores["match"].value for sample in log.samples}  # type: ignore[index]
    assert scores == {"mul": "C", "capital": "C", "lines": "C", "wrong": "I", "file": "C"}
    assert log.results is not None
    assert log.results.scores[0].metrics["accuracy"].value == 0.8

    by_id = {sample.id: sample for sample in log.samples}
    assert by_id["lines"].output.completion == "3"
    assert by_id["wrong"].output.completion == "5"
    # Two model calls for a sample with a cell, one for the others: recursa's
    # accounting of each tree, in the store, the metadata and the output's usage.
    calls = {sid: sample.store[STORE_KEY]["calls"] for sid, sample in by_id.items()}
    assert calls == {"mul": 2, "capital": 1, "lines": 2, "wrong": 1, "file": 2}
    for sample in log.samples:
        summary = sample.store[STORE_KEY]
        assert sample.metadata[STORE_KEY] == summary
        assert summary["status"] == "answered" and summary["model"] == "faux/inspect"
        assert summary["subagents"] == 0 and summary["input_tokens"] > 0
        usage = sample.output.usage
        assert usage is not None
        assert usage.output_tokens == summary["output_tokens"] > 0
        assert usage.total_tokens == summary["input_tokens"] + summary["output_tokens"]
    # recursa's model saw each task once as its first message; Inspect's never ran.
    firsts = [r.messages[0].text for r in script.requests if len(r.messages) == 1]
    assert len(firsts) == 5
    assert "mockllm/model" not in log.stats.model_usage or (
        log.stats.model_usage["mockllm/model"].total_tokens == 0
    )
    assert no_network == []
    gc.collect()


@INSPECT_LEAK
def test_a_sample_not_quiet_in_time_scores_as_unanswered_and_its_session_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    register_script("stuck", [code("import time\ntime.sleep(60)"), reply("never")])
    task = Task(
        dataset=MemoryDataset([Sample(id="slow", input="wait", target="x")]), scorer=match()
    )
    solver = recursa_agent(model="faux/stuck", in_process=True, timeout=1.0)
    began = time.monotonic()

    [log] = eval(
        task, model="mockllm/model", solver=solver, log_dir=str(tmp_path / "logs"), display="none"
    )

    assert time.monotonic() - began < 40  # the 60 s cell was stopped, not waited for
    assert log.status == "success", log.error
    assert log.samples is not None
    [sample] = log.samples
    assert sample.scores is not None and sample.scores["match"].value == "I"
    summary = sample.store[STORE_KEY]
    assert (summary["status"], summary["answer"], summary["calls"]) == ("timeout", None, 1)
    assert sample.output.completion == ""
    gc.collect()

"""Running a task through recursa for the benchmarks: in process, or through the CLI.

In process (:class:`RecursaArm`): one :class:`~recursa.runtime.Runtime` for the
whole benchmark run, so the embedded model is loaded once per process and
shared with the bare loop (the engine caches loaded models per process). Each
task gets a fresh session in its own workspace, with the run's step and time
limits; a follow-up is a second ``ask`` on the same session. The kernel is
sandboxed as recursa configures it by default.

Through the CLI (:func:`cli_run`): ``recursa run --no-daemon --json`` as a
subprocess, for options only the CLI has (``--context-file``); the model is
loaded by that process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from bare_loop import Outcome

from recursa.config import load_config
from recursa.protocol.events import ModelUsage
from recursa.runtime import Runtime
from recursa.session.session import Session


def add_home_option(parser: argparse.ArgumentParser) -> None:
    """The ``--home`` option every benchmark that runs recursa arms takes."""
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help="RECURSA_HOME for the recursa arms (default: a temporary one); reuse one to "
        "keep what recursa prepares on first use, such as its kernel environment",
    )


class RecursaArm:
    """A runtime under ``home`` whose sessions run ``model`` with the given limits."""

    def __init__(self, home: Path, model: str, *, max_steps: int, max_time: float) -> None:
        self.home, self.model = home, model
        os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
        config = load_config(overrides={"RECURSA_HOME": str(home)})
        self.limits = replace(config.limits, max_steps=max_steps, max_time=max_time)
        self.config = replace(config, limits=self.limits)
        self.runtime: Runtime | None = None

    @property
    def output_chars(self) -> int:
        return self.limits.output_chars

    @property
    def cell_timeout(self) -> float:
        return self.limits.cell_timeout

    async def __aenter__(self) -> RecursaArm:
        self.runtime = await Runtime.open(self.config, warm_kernels=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()

    async def session(self, cwd: Path) -> Session:
        assert self.runtime is not None
        return await self.runtime.create_session(model=self.model, cwd=cwd, limits=self.limits)

    async def ask(self, session: Session, text: str, timeout: float) -> Outcome:
        """One turn of ``session``: its answer, end reason, model calls and tokens."""
        before = max((r.seq for r in session.history()), default=0)
        started = time.monotonic()
        try:
            end = await asyncio.wait_for(session.ask(text), timeout)
        except TimeoutError:
            await session.interrupt()
            end = None
        out = Outcome(seconds=time.monotonic() - started)
        out.reason = end.reason if end else "timeout"
        out.answer = end.answer if end and end.reason == "answered" else None
        for record in session.history(after=before):
            if isinstance(record.event, ModelUsage) and record.event.step > 0:
                out.steps += 1
                out.input_tokens += record.event.input_tokens
                out.output_tokens += record.event.output_tokens
        return out


def has_context_file() -> bool:
    """Whether this recursa's ``run`` takes ``--context-file`` (helper C's feature)."""
    help_text = subprocess.run(
        [sys.executable, "-m", "recursa", "run", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    ).stdout
    return "--context-file" in help_text


def cli_run(
    home: Path,
    cwd: Path,
    model: str,
    question: str,
    extra: list[str],
    *,
    max_steps: int,
    timeout: float,
) -> Outcome:
    """``recursa run --no-daemon --json`` in ``cwd``; the result line as an :class:`Outcome`."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[limits]\nmax_steps = {max_steps}\nmax_time = "{int(timeout)}s"\n'
    )
    env = {**os.environ, "RECURSA_HOME": str(home), "JUPYTER_PLATFORM_DIRS": "1"}
    command = [sys.executable, "-m", "recursa", "run", "--no-daemon", "--json", "--model", model]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [*command, *extra, question],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome(reason="timeout", seconds=time.monotonic() - started)
    out = Outcome(reason=f"exit {done.returncode}", seconds=time.monotonic() - started)
    for line in done.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("type") == "result":
            out.reason = record.get("reason") or out.reason
            out.answer = record.get("answer")
            usage = record.get("usage") or {}
            out.input_tokens = int(usage.get("input_tokens", 0))
            out.output_tokens = int(usage.get("output_tokens", 0))
            out.steps = int(usage.get("calls", 0))
    if out.reason.startswith("exit"):
        out.reason += ": " + (done.stderr.strip().splitlines() or [""])[-1][:200]
    return out

"""``recursa run``: one session in the current directory, start to answer.

Exit codes: 0 answered; 4 the provider failed; 8 a limit was reached;
9 the model made no progress (empty or cut-off replies, one cell repeated);
130 interrupted; 1 anything else.
(Configuration and usage errors exit 2, see :mod:`recursa.errors`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from recursa.cli import app
from recursa.cli.render import LIMIT_REASONS, TranscriptPrinter, json_line, usage_dict
from recursa.config import Config, color_enabled, load_config, parse_duration
from recursa.errors import UsageError
from recursa.protocol.events import EventRecord, StatusChanged, TurnEnded, record_to_dict
from recursa.runtime import Runtime
from recursa.session import Session
from recursa.store import UsageTotals

EXIT_BY_REASON = {
    "answered": 0,
    "provider_error": 4,
    "max_steps": 8,
    "max_tokens": 8,
    "max_time": 8,
    "empty_reply": 9,
    "stuck": 9,
    "interrupted": 130,
    "internal_error": 1,
}


@app.command()
def run(
    task: Annotated[str | None, typer.Argument(help="The task. '-' reads it from stdin.")] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="PROVIDER/MODEL, e.g. openai/gpt-4o-mini.")
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option(help="Model calls per turn (0 = no limit).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Input+output tokens per turn (0 = no limit).")
    ] = None,
    max_time: Annotated[
        str | None, typer.Option(help="Wall clock per turn, e.g. 90s, 30m (0 = no limit).")
    ] = None,
    cell_timeout: Annotated[str | None, typer.Option(help="Per-cell time limit, e.g. 2m.")] = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON object per event on stdout.")
    ] = False,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive", "-i", help="Keep the session; read more messages from stdin."
        ),
    ] = False,
    cwd: Annotated[
        Path | None, typer.Option(help="Working directory (default: the current one).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="A name for the session.")] = None,
) -> None:
    """Run an agent on TASK in a persistent kernel and print its answer."""
    if task == "-":
        task = sys.stdin.read()
    if not interactive and not (task and task.strip()):
        raise UsageError("recursa run needs a TASK (or --interactive)")
    config = load_config()
    limits = config.limits
    if max_steps is not None:
        limits = replace(limits, max_steps=max_steps or None)
    if max_tokens is not None:
        limits = replace(limits, max_tokens=max_tokens or None)
    if max_time is not None:
        limits = replace(limits, max_time=parse_duration(max_time, key="--max-time"))
    if cell_timeout is not None:
        limits = replace(
            limits,
            cell_timeout=parse_duration(cell_timeout, key="--cell-timeout") or limits.cell_timeout,
        )
    if cwd is not None and not cwd.is_dir():
        raise UsageError(f"--cwd {cwd}: not a directory")
    config = replace(config, limits=limits)
    code = asyncio.run(_run(config, task, model, json_lines, interactive, cwd, name))
    raise typer.Exit(code)


async def _run(
    config: Config,
    task: str | None,
    model: str | None,
    json_lines: bool,
    interactive: bool,
    cwd: Path | None,
    name: str | None,
) -> int:
    started = time.monotonic()
    printer = TranscriptPrinter(color=color_enabled(sys.stderr))
    async with await Runtime.open(config, warm_kernels=0) as runtime:
        session = await runtime.create_session(model=model, cwd=cwd, name=name)
        for record in session.history():  # what was recorded before we listened
            _show(record, printer, json_lines)
        session.listen(lambda record: _show(record, printer, json_lines))
        interrupts = _Interrupts(session)
        interrupts.install()
        end: TurnEnded | None = None
        try:
            if task and task.strip():
                end = await _turn(session, task, json_lines)
            if interactive:
                printer.echo_user = False  # what is typed at the prompt is on screen already
                async for line in _stdin_lines():
                    if line.strip():
                        end = await _turn(session, line, json_lines)
        except asyncio.CancelledError:
            if not interrupts.hard:
                raise
            end = session.last_end
        finally:
            interrupts.remove()
        totals = runtime.store.usage_totals(session.id)
        _finish(session, end, totals, printer, json_lines, time.monotonic() - started)
        if interrupts.hard:
            return 130
        return EXIT_BY_REASON.get(end.reason, 1) if end is not None else 0


async def _turn(session: Session, text: str, json_lines: bool) -> TurnEnded | None:
    """One turn; its answer goes to stdout as soon as it is known."""
    session.send(text, mode="follow_up")
    end = await session.wait_idle()
    if not json_lines and end is not None and end.reason == "answered" and end.answer is not None:
        sys.stdout.write(end.answer.rstrip() + "\n")
        sys.stdout.flush()
    return end


def _show(record: EventRecord, printer: TranscriptPrinter, json_lines: bool) -> None:
    if json_lines:
        if record.seq:
            json_line(record_to_dict(record), sys.stdout)
    elif not isinstance(record.event, StatusChanged):
        printer.handle(record)
        sys.stderr.flush()


def _finish(
    session: Session,
    end: TurnEnded | None,
    totals: UsageTotals,
    printer: TranscriptPrinter,
    json_lines: bool,
    elapsed: float,
) -> None:
    if json_lines:
        result: dict[str, object] = {
            "type": "result",
            "session_id": session.id,
            "reason": end.reason if end else None,
            "answer": end.answer if end else None,
            "detail": end.detail if end else "",
            "usage": usage_dict(totals),
            "elapsed": round(elapsed, 3),
        }
        json_line(result, sys.stdout)
        return
    printer.summary(totals, elapsed)
    if end is None or end.reason == "answered":
        return
    if end.reason in LIMIT_REASONS:
        print(f"recursa: stopped without an answer: {end.detail}", file=sys.stderr)
    else:
        print(f"recursa: stopped without an answer ({end.reason}): {end.detail}", file=sys.stderr)


async def _stdin_lines() -> AsyncIterator[str]:
    """Lines typed at a ``you ▸`` prompt, until end of input.

    A daemon thread does the blocking reads, so Ctrl-C at the prompt can end
    the program at once (a thread from the default executor would be joined
    at exit and keep it waiting for a line).
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        while True:
            line = sys.stdin.readline()
            loop.call_soon_threadsafe(lines.put_nowait, line or None)
            if not line:
                return

    threading.Thread(target=read, name="stdin", daemon=True).start()
    while True:
        sys.stderr.write("you ▸ ")
        sys.stderr.flush()
        line = await lines.get()
        if line is None:
            return
        yield line


class _Interrupts:
    """Ctrl-C interrupts the running turn (the session stays); Ctrl-C while no
    turn runs, or a second one before the turn has stopped, quits, shutting the
    kernel down cleanly."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.hard = False
        self._main = asyncio.current_task()
        self._pending: asyncio.Task[None] | None = None

    def install(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint)

    def remove(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    def _on_sigint(self) -> None:
        interrupting = self._pending is not None and not self._pending.done()
        if interrupting or self.session.status != "running":
            self.hard = True
            if self._main is not None:
                self._main.cancel()
            return
        sys.stderr.write("\n(interrupting the turn; press Ctrl-C again to quit)\n")
        self._pending = asyncio.get_running_loop().create_task(self.session.interrupt())

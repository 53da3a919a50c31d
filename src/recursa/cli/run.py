"""``recursa run``: one session in the current directory, start to answer.

By default the session lives in the daemon (started when none runs): the
command follows it and exits when it is idle; ``--detach`` returns at once
with the session id; Ctrl-C interrupts the turn, a second Ctrl-C detaches.
``--no-daemon`` runs everything in this process instead.

``--autonomous`` goes on, turn after turn, until every ``--gate`` passes or
a limit of the whole run is reached, and then exits (:mod:`recursa.runtime.autonomy`).

Exit codes: 0 answered (with ``--autonomous``: every gate passed, and only
then); 4 the provider failed; 8 a limit was reached; 9 the model made no
progress (empty or cut-off replies, one cell repeated); 130 interrupted;
1 anything else.
(Configuration and usage errors exit 2, see :mod:`recursa.errors`.)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from recursa.cli import app
from recursa.cli import autonomous as autonomous_run
from recursa.cli.autonomous import EXIT_BY_REASON
from recursa.cli.follow import Follow, follow_until_idle, show, stdin_lines
from recursa.cli.render import (
    LIMIT_REASONS,
    TranscriptPrinter,
    json_line,
    result_line,
    usage_line,
    usage_of,
)
from recursa.config import Config, color_enabled, environment, load_config, parse_duration
from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.daemon.embedded import serve_embedded
from recursa.errors import UsageError
from recursa.protocol.events import AutonomousEnded, TurnEnded
from recursa.protocol.wire import (
    Autonomous,
    CreateSession,
    SendMessage,
    SessionInfo,
    Usage,
    UsageNode,
)
from recursa.runtime import Runtime
from recursa.runtime.autonomy import spec_of
from recursa.runtime.host import RuntimeHost
from recursa.session import Session
from recursa.session.compaction import check_context_window


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
        int | None,
        typer.Option(
            help="Input+output tokens per turn; with --autonomous, over the whole run "
            "(0 = no limit)."
        ),
    ] = None,
    max_time: Annotated[
        str | None,
        typer.Option(
            help="Wall clock per turn, e.g. 90s, 30m; with --autonomous, over the whole run "
            "(0 = no limit)."
        ),
    ] = None,
    cell_timeout: Annotated[str | None, typer.Option(help="Per-cell time limit, e.g. 2m.")] = None,
    context_window: Annotated[
        int | None,
        typer.Option(
            help="The model's context window in tokens, over the catalog's: the context "
            "is compacted as it nears it."
        ),
    ] = None,
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
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Start it in the daemon; print the session id.")
    ] = False,
    no_daemon: Annotated[
        bool, typer.Option("--no-daemon", help="Run in this process, without the daemon.")
    ] = False,
    autonomous: Annotated[
        bool,
        typer.Option(
            "--autonomous",
            help="Go on, turn after turn, until every --gate passes or a limit is reached.",
        ),
    ] = False,
    gate: Annotated[
        list[str] | None,
        typer.Option(
            "--gate",
            help="With --autonomous: a shell command that must exit 0 for the run to end "
            "(repeatable; run in order after every turn).",
        ),
    ] = None,
    max_turns: Annotated[
        int | None, typer.Option(help="With --autonomous: turns of the whole run.")
    ] = None,
    max_cost: Annotated[
        float | None, typer.Option(help="With --autonomous: USD over the whole run.")
    ] = None,
    gate_timeout: Annotated[
        str | None, typer.Option(help="With --autonomous: time limit per gate (default 10m).")
    ] = None,
) -> None:
    """Run an agent on TASK in a persistent kernel and print its answer."""
    if task == "-":
        task = sys.stdin.read()
    if not interactive and not (task and task.strip()):
        raise UsageError("recursa run needs a TASK (or --interactive)")
    config = load_config()
    plan = autonomous_run.plan(
        autonomous, gate, max_turns, max_tokens, max_cost, max_time, gate_timeout, interactive
    )
    if plan is not None:  # --max-tokens and --max-time bound the whole run, not each turn
        max_tokens = max_time = None
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
    check_context_window(context_window)
    if cwd is not None and not cwd.is_dir():
        raise UsageError(f"--cwd {cwd}: not a directory")
    if detach and (no_daemon or interactive):
        raise UsageError("--detach needs the daemon and no --interactive")
    if no_daemon:
        config = replace(config, limits=limits)
        code = asyncio.run(
            _run(
                config,
                task,
                model,
                json_lines,
                interactive,
                cwd,
                name,
                plan,
                context_window=context_window,
            )
        )
    else:
        request = CreateSession(
            task=task if task and task.strip() else None,
            model=model,
            cwd=str((cwd or Path.cwd()).resolve()),
            name=name,
            max_steps=max_steps,
            max_tokens=max_tokens,
            max_time=parse_duration(max_time, key="--max-time") or 0.0
            if max_time is not None
            else None,
            cell_timeout=limits.cell_timeout if cell_timeout is not None else None,
            autonomous=plan,
            context_window=context_window,
        )
        code = asyncio.run(_run_in_daemon(config, request, json_lines, interactive, detach))
    raise typer.Exit(code)


async def _run_in_daemon(
    config: Config, request: CreateSession, json_lines: bool, interactive: bool, detach: bool
) -> int:
    """Create the session in the daemon (started when none runs) and follow it."""
    started = time.monotonic()
    await process.ensure_running(config.home, env=environment())
    async with DaemonClient(config.home) as client:
        info = await client.create_session(request)
        if detach:
            print(f"started; follow it with: recursa attach {info.id}", file=sys.stderr)
            print(info.id)
            return 0
        printer = TranscriptPrinter(color=color_enabled(sys.stderr))
        state = Follow()
        if request.task is not None:
            state = await _until_quiet(client, info.id, state, printer, json_lines)
            _answer(state.last_end, json_lines)
        if interactive and not state.detached:
            printer.echo_user = False
            async for line in stdin_lines():
                if not line.strip():
                    continue
                await client.send(info.id, SendMessage(line, mode="follow_up"))
                state.seen_turn = False
                state = await _until_quiet(client, info.id, state, printer, json_lines)
                _answer(state.last_end, json_lines)
                if state.detached:
                    break
        tree = await client.usage(info.id)
        children = [c for c in await client.sessions() if c.parent_id is not None]
        usage = tree.own
    if state.detached:
        print(f"\ndetached; the session goes on: recursa attach {info.id}", file=sys.stderr)
        return 130
    elapsed = time.monotonic() - started
    if request.autonomous is not None:
        autonomous_run.finish(
            info.id, state.autonomous_end, state.last_end, usage, printer, json_lines, elapsed
        )
        _children_summary(tree, children, json_lines)
        return autonomous_run.exit_code(state.autonomous_end, state.last_end)
    _finish(info.id, state.last_end, usage, printer, json_lines, elapsed)
    _children_summary(tree, children, json_lines)
    return EXIT_BY_REASON.get(state.last_end.reason, 1) if state.last_end is not None else 0


async def _until_quiet(
    client: DaemonClient, session: str, state: Follow, printer: TranscriptPrinter, json_lines: bool
) -> Follow:
    """Follow the root until its whole tree is quiet: a sub-agent's answer starts
    another turn of the root, so its idling is not the end while children work.

    After each idle, two waits race: the tree going quiet, and the root's next
    turn. A child can still be settling (its snapshot) when the root idles for
    the last time, so asking "quiet now?" once would miss the end and wait for
    a turn that never comes."""
    state = await follow_until_idle(client, session, state, printer, json_lines=json_lines)
    while not state.detached:
        quiet = asyncio.ensure_future(client.wait_quiet(session))
        state.seen_turn = False
        turn = asyncio.ensure_future(
            follow_until_idle(client, session, state, printer, json_lines=json_lines)
        )
        try:
            await asyncio.wait({quiet, turn}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in (quiet, turn):
                if not waiting.done():
                    waiting.cancel()
            await asyncio.gather(quiet, turn, return_exceptions=True)
        if turn.done() and not turn.cancelled():
            state = turn.result()  # raises what the follower raised
        if quiet.done() and not quiet.cancelled() and quiet.result():
            # Quiet: the root's log is complete up to its idle; print what the
            # cancelled follower had not shown yet.
            async for record in client.events(session, after=state.cursor, follow=False):
                if record.seq:
                    state.cursor = record.seq
                show(record, printer, json_lines)
                if isinstance(record.event, TurnEnded):
                    state.last_end = record.event
                elif isinstance(record.event, AutonomousEnded):
                    state.autonomous_end = record.event
            return state
    return state


def _children_summary(tree: UsageNode, children: list[SessionInfo], json_lines: bool) -> None:
    """One line about the sub-agents of the tree, when it has any."""
    ids = set(_descendants(tree))
    mine = [c for c in children if c.id in ids]
    if json_lines or not mine:
        return
    statuses = collections.Counter(c.status for c in mine)
    states = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    subtree = usage_line(tree.total)
    print(
        f"── {len(mine)} sub-agent{'s' * (len(mine) != 1)} ({states}) · tree: {subtree}",
        file=sys.stderr,
    )


def _descendants(node: UsageNode) -> list[str]:
    return [d for child in node.children for d in (child.id, *_descendants(child))]


async def _run(
    config: Config,
    task: str | None,
    model: str | None,
    json_lines: bool,
    interactive: bool,
    cwd: Path | None,
    name: str | None,
    autonomous: Autonomous | None = None,
    *,
    context_window: int | None = None,
) -> int:
    started = time.monotonic()
    printer = TranscriptPrinter(color=color_enabled(sys.stderr))
    async with (
        await Runtime.open(config, warm_kernels=0) as runtime,
        serve_embedded(RuntimeHost(runtime), directory=config.home / "api") as api_socket,
    ):
        runtime.api_socket = api_socket  # kernels reach rlm() and agent_message here
        spec = None
        if autonomous is not None:  # checked before the session exists
            spec = runtime.autonomy.check(
                spec_of(autonomous), runtime.default_model(model), task=task
            )
        session = await runtime.create_session(
            model=model, cwd=cwd, name=name, context_window=context_window
        )
        for record in session.history():  # what was recorded before we listened
            show(record, printer, json_lines)
        session.listen(lambda record: show(record, printer, json_lines))
        interrupts = _Interrupts(session)
        interrupts.install()
        end: TurnEnded | None = None
        try:
            if spec is not None:
                runtime.autonomy.start(session, spec, task)
                end = await _settle(runtime, session, json_lines)
            elif task and task.strip():
                end = await _turn(runtime, session, task, json_lines)
            if interactive:
                printer.echo_user = False  # what is typed at the prompt is on screen already
                async for line in stdin_lines():
                    if line.strip():
                        end = await _turn(runtime, session, line, json_lines)
        except asyncio.CancelledError:
            if not interrupts.hard:
                raise
            end = session.last_end
        finally:
            interrupts.remove()
        totals = usage_of(runtime.store.usage_totals(session.id))
        elapsed = time.monotonic() - started
        run_end = autonomous_run.run_end(runtime, session.id) if spec is not None else None
        if spec is not None:
            autonomous_run.finish(session.id, run_end, end, totals, printer, json_lines, elapsed)
        else:
            _finish(session.id, end, totals, printer, json_lines, elapsed)
        tree = runtime.tree.usage(session.id)
        children = [
            SessionInfo(
                id=row.id,
                name=row.name,
                parent_id=row.parent_id,
                status=row.status,
                model=row.model,
                cwd=row.cwd,
                created_at=row.created_at,
                last_activity=row.updated_at,
            )
            for row in runtime.store.sessions()
            if row.parent_id is not None
        ]
        _children_summary(tree, children, json_lines)
        if interrupts.hard:
            return 130
        if spec is not None:
            return autonomous_run.exit_code(run_end, end)
        return EXIT_BY_REASON.get(end.reason, 1) if end is not None else 0


async def _turn(
    runtime: Runtime, session: Session, text: str, json_lines: bool
) -> TurnEnded | None:
    """One message, and the work it causes down the tree; then its answer goes
    to stdout. (A sub-agent's answer starts another turn of the root, so the
    root's idling is not the end while sub-agents work.)"""
    session.send(text, mode="follow_up")
    return await _settle(runtime, session, json_lines)


async def _settle(runtime: Runtime, session: Session, json_lines: bool) -> TurnEnded | None:
    """Wait until the session and its tree are quiet (an autonomous run's turns
    follow each other without an idle between them); its last answer to stdout."""
    await session.wait_idle()
    await runtime.tree.wait_quiet(session.id, None)
    end = session.last_end
    _answer(end, json_lines)
    return end


def _answer(end: TurnEnded | None, json_lines: bool) -> None:
    """A turn's answer on stdout, as soon as it is known (not in --json mode)."""
    if not json_lines and end is not None and end.reason == "answered" and end.answer is not None:
        sys.stdout.write(end.answer.rstrip() + "\n")
        sys.stdout.flush()


def _finish(
    session_id: str,
    end: TurnEnded | None,
    totals: Usage,
    printer: TranscriptPrinter,
    json_lines: bool,
    elapsed: float,
) -> None:
    if json_lines:
        detail = end.detail if end else ""
        json_line(result_line(session_id, end, detail, totals, elapsed), sys.stdout)
        return
    printer.summary(totals, elapsed)
    if end is None or end.reason == "answered":
        return
    if end.reason in LIMIT_REASONS:
        print(f"recursa: stopped without an answer: {end.detail}", file=sys.stderr)
    else:
        print(f"recursa: stopped without an answer ({end.reason}): {end.detail}", file=sys.stderr)


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

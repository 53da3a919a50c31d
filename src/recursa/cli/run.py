"""``recursa run``: one session in the current directory, start to answer.

By default the session lives in the daemon (started when none runs): the
command follows it and exits when it is idle; ``--detach`` returns at once
with the session id; Ctrl-C interrupts the turn, a second Ctrl-C detaches.
``--no-daemon`` hosts the runtime in this process for this run only, and
follows the session the same way, through the same client.

``--autonomous`` goes on, turn after turn, until every ``--gate`` passes or
a limit of the whole run is reached, and then exits (:mod:`recursa.runtime.autonomy`).

Exit codes: 0 answered (with ``--autonomous``: every gate passed, and only
then); 4 the provider failed; 8 a limit was reached; 9 the model made no
progress (empty or cut-off replies, one cell repeated); 130 interrupted or
detached; the whole table is :data:`recursa.cli.exits.EXIT_CODES`.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from recursa.cli import autonomous as autonomous_run
from recursa.cli.autonomous import EXIT_BY_REASON
from recursa.cli.common import typed_text
from recursa.cli.context_files import ContextFileOpt, read_context_files
from recursa.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, epilog
from recursa.cli.follow import Follow, follow_until_idle, show, stdin_lines
from recursa.cli.render import (
    LIMIT_REASONS,
    TranscriptPrinter,
    json_line,
    result_line,
    usage_line,
)
from recursa.cli.root import app
from recursa.cli.terminal import printable
from recursa.environ import color_enabled
from recursa.errors import UsageError
from recursa.protocol.events import AutonomousEnded, TurnEnded
from recursa.protocol.fields import check_session_name
from recursa.protocol.wire import (
    CreateSession,
    SendMessage,
    SessionInfo,
    Usage,
    UsageNode,
)

if TYPE_CHECKING:
    from recursa.config import Config
    from recursa.daemon.client import DaemonClient


IDS_PER_CALL = 200
"""The most sub-agents asked for by id in one call (about 4 KB of query);
a larger tree asks for every session, filtered here: the daemon's HTTP server
takes a request line and headers of at most 16 KiB (h11's limit)."""


@app.command(epilog=epilog())
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
    context_file: ContextFileOpt = None,
    kernel_backend: Annotated[
        str | None,
        typer.Option(
            "--kernel-backend",
            help="Where the session's kernels run: local, or gateway ([kernel.gateway] in "
            "config.toml). Default: [kernel] backend.",
        ),
    ] = None,
) -> None:
    """Run an agent on TASK in a persistent kernel and print its answer.

    Ctrl-C interrupts the running turn; a second Ctrl-C detaches: the session
    goes on in the daemon."""
    if task == "-":
        task = sys.stdin.read()
    if task is not None:
        task = typed_text(task)
    if not interactive and not (task and task.strip()):
        raise UsageError("recursa run needs a TASK (or --interactive)")
    if context_file and not (task and task.strip()):
        raise UsageError("--context-file needs a TASK: it is what the agent is asked")
    files = read_context_files(context_file)
    # The configuration is read here only when this process hosts the runtime
    # (--no-daemon): a running daemon has its own, and one started for this
    # run reads it (a malformed file fails the start, in one line). Reading
    # it here cost a run ~15 ms (the schema's build; measured in the note of
    # issue 15).
    config = None
    if no_daemon:
        from recursa.config import load_config

        config = load_config()
    plan = autonomous_run.plan(
        autonomous, gate, max_turns, max_tokens, max_cost, max_time, gate_timeout, interactive
    )
    if plan is not None:  # --max-tokens and --max-time bound the whole run, not each turn
        max_tokens = max_time = None
    # --cell-timeout 0 is the default: None leaves it to the runtime's configuration.
    cell_limit = _seconds(cell_timeout, "--cell-timeout") if cell_timeout is not None else None
    if cwd is not None and not cwd.is_dir():
        raise UsageError(f"--cwd {cwd}: not a directory")
    if kernel_backend is not None and kernel_backend not in ("local", "gateway"):
        raise UsageError(f"--kernel-backend is local or gateway, not {kernel_backend!r}")
    if detach and (no_daemon or interactive):
        raise UsageError("--detach needs the daemon and no --interactive")
    if name is not None:
        try:
            check_session_name(name)
        except ValueError as exc:
            raise UsageError(f"--name: {exc}") from None
    request = CreateSession(
        task=task if task and task.strip() else None,
        model=model,
        cwd=str((cwd or Path.cwd()).resolve()),
        name=name,
        max_steps=max_steps,
        max_tokens=max_tokens,
        max_time=_seconds(max_time, "--max-time") or 0.0 if max_time is not None else None,
        cell_timeout=cell_limit,
        autonomous=plan,
        context_window=context_window,
        context_files=files,
        kernel_backend=kernel_backend,  # type: ignore[arg-type]  # checked above
    )
    code = asyncio.run(_run(config, request, json_lines, interactive, detach, local=no_daemon))
    raise typer.Exit(code)


def _seconds(value: str, key: str) -> float | None:
    """Seconds from a duration flag; 0 means no limit (None)."""
    from recursa.config import parse_duration

    return parse_duration(value, key=key)


async def _run(
    config: Config | None,
    request: CreateSession,
    json_lines: bool,
    interactive: bool,
    detach: bool,
    *,
    local: bool,
) -> int:
    """Create the session and follow it: in the daemon (started when none runs),
    or, ``local``, in a daemon hosted by this process for this run only."""
    from recursa.daemon.client import connect

    started = time.monotonic()
    async with connect(config, in_process=local) as client:
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
        # Asked only when the tree has sub-agents and the summary is printed: a
        # call less at the end of most runs.
        below = [] if json_lines else _descendants(tree)
        named = below if len(below) <= IDS_PER_CALL else None
        children = await client.sessions(named) if below else []
        usage = tree.own
    if state.detached:
        if not local:
            print(f"\ndetached; the session goes on: recursa attach {info.id}", file=sys.stderr)
        return EXIT_INTERRUPTED
    elapsed = time.monotonic() - started
    if request.autonomous is not None:
        word = autonomous_run.last_word(info.id, state.autonomous_end, state.last_end)
        _finish(info.id, state.last_end, usage, printer, json_lines, elapsed, word)
        _children_summary(tree, children, json_lines)
        return autonomous_run.exit_code(state.autonomous_end, state.last_end)
    _finish(info.id, state.last_end, usage, printer, json_lines, elapsed)
    _children_summary(tree, children, json_lines)
    if state.last_end is None:
        return EXIT_OK
    return EXIT_BY_REASON.get(state.last_end.reason, EXIT_FAILED)


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


def _answer(end: TurnEnded | None, json_lines: bool) -> None:
    """A turn's answer on stdout, as soon as it is known (not in --json mode, where
    the result line carries it unchanged). It is the model's text: printed without
    its control sequences (:mod:`recursa.cli.terminal`), to a terminal or not."""
    if not json_lines and end is not None and end.reason == "answered" and end.answer is not None:
        sys.stdout.write(printable(end.answer).rstrip() + "\n")
        sys.stdout.flush()


def _finish(
    session_id: str,
    end: TurnEnded | None,
    totals: Usage,
    printer: TranscriptPrinter,
    json_lines: bool,
    elapsed: float,
    autonomous: tuple[str, dict[str, object]] | None = None,
) -> None:
    """How the run ended: the result line (``--json``), else the usage summary
    and, for a run without an answer, why; ``autonomous``: the last word and
    outcome of an autonomous run (:func:`recursa.cli.autonomous.last_word`)."""
    if json_lines:
        extra = {} if autonomous is None else {"autonomous": autonomous[1]}
        detail = autonomous[0] if autonomous is not None else (end.detail if end else "")
        json_line(result_line(session_id, end, detail, totals, elapsed, **extra), sys.stdout)
        return
    printer.summary(totals, elapsed)
    if autonomous is not None:
        print(f"recursa: {printable(autonomous[0])}", file=sys.stderr)
        return
    if end is None or end.reason == "answered":
        return
    if end.reason in LIMIT_REASONS:
        print(f"recursa: stopped without an answer: {printable(end.detail)}", file=sys.stderr)
    else:
        print(
            f"recursa: stopped without an answer ({end.reason}): {printable(end.detail)}",
            file=sys.stderr,
        )

"""Commands on daemon-owned sessions: ``agents``, ``attach``, ``send``, ``stop``, ``logs``.

Sessions are named by id, a unique id prefix, or name. Every command here
talks to the daemon (starting one when none runs, since it owns the sessions).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from recursa.cli.common import SessionArg, print_listing, typed_text, with_client
from recursa.cli.context_files import ContextFileOpt, read_context_files
from recursa.cli.listing import AGENT_COLUMNS, NO_SESSIONS, agent_rows, print_usage
from recursa.cli.root import app
from recursa.environ import color_enabled
from recursa.protocol.wire import SendMessage, SendMode

if TYPE_CHECKING:
    from recursa.daemon.client import DaemonClient


def _client() -> contextlib.AbstractAsyncContextManager[DaemonClient]:
    from recursa.daemon.client import connect

    return connect()


@app.command()
def agents(
    json_out: Annotated[bool, typer.Option("--json", help="A JSON list of sessions.")] = False,
) -> None:
    """The session tree: status, model, usage and last activity of every session."""
    infos = with_client(lambda client: client.sessions())
    rows = agent_rows(infos, time.time())
    print_listing(infos, json_out, NO_SESSIONS, AGENT_COLUMNS, rows)


@app.command()
def attach(
    session: SessionArg,
    mode: Annotated[
        str, typer.Option(help="How typed lines are sent: auto, steer or follow_up.")
    ] = "auto",
    after: Annotated[
        int | None, typer.Option(help="Show events after this seq (default: from the last turn).")
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Return when the session is idle.")
    ] = False,
    json_lines: Annotated[bool, typer.Option("--json", help="JSON lines on stdout.")] = False,
) -> None:
    """Watch a session live and talk to it; Ctrl-C interrupts its turn, twice detaches."""
    if mode not in ("auto", "steer", "follow_up"):
        raise typer.BadParameter("mode must be auto, steer or follow_up")
    raise typer.Exit(asyncio.run(_attach(session, mode, after, until_idle, json_lines)))  # type: ignore[arg-type]


async def _attach(
    ref: str, mode: SendMode, after: int | None, until_idle: bool, json_lines: bool
) -> int:
    from recursa.cli.follow import Follow, follow_until_idle, stdin_lines
    from recursa.cli.render import TranscriptPrinter

    async with _client() as client:
        info = await client.session(ref)
        marks = await _history_marks(client, info.id)
        cursor = after if after is not None else marks.turn
        state = Follow(cursor=cursor, running=info.status == "running")
        # Replayed idle statuses are history: only the one the session is in
        # now (its last stored status, when settled) or a later one ends the
        # wait. The status is read from the same scan as the marks: ``info``
        # can be older than the scan, and a turn that ended between the two
        # reads would otherwise leave the wait for an idle already passed.
        status = marks.status or info.status
        settled = status in ("idle", "inactive")
        settled_from = marks.status_seq if settled else marks.last_seq + 1
        printer = TranscriptPrinter(color=color_enabled(sys.stderr))
        print(f"── attached to {info.id} ({info.status}); Ctrl-C twice to detach", file=sys.stderr)

        async def typing() -> None:
            async for line in stdin_lines(prompt=""):
                if line.strip():
                    receipt = await client.send(info.id, SendMessage(line.rstrip("\n"), mode=mode))
                    print(f"   (message {receipt.message_id} {receipt.status})", file=sys.stderr)

        typer_task = asyncio.create_task(typing())
        try:
            while not state.detached:
                state = await follow_until_idle(
                    client,
                    info.id,
                    state,
                    printer,
                    json_lines=json_lines,
                    need_turn=False,
                    stop_at_idle=until_idle,
                    in_progress=True,
                    settled_from=settled_from,
                )
                if until_idle:
                    break
        finally:
            typer_task.cancel()
    if state.detached:
        print(f"\ndetached; the session goes on: recursa attach {info.id}", file=sys.stderr)
    return 0


@dataclass(frozen=True, slots=True)
class _Marks:
    """Where a session's stored history stands, read in one scan."""

    turn: int
    """The cursor just before the last turn (attaching shows that turn whole)."""
    last_seq: int
    """The sequence number of the last stored event."""
    status_seq: int
    """That of the last stored status change (0: none yet)."""
    status: str
    """The status it set ("" when there is none)."""


async def _history_marks(client: DaemonClient, session: str) -> _Marks:
    from recursa.protocol.events import StatusChanged, TurnStarted

    cursor = previous = status_seq = 0
    status = ""
    events = client.events(session, after=0, follow=False)
    async for record in events:
        if isinstance(record.event, TurnStarted):
            cursor = previous
        elif isinstance(record.event, StatusChanged):
            status_seq, status = record.seq, record.event.status
        previous = record.seq
    return _Marks(turn=cursor, last_seq=previous, status_seq=status_seq, status=status)


@app.command()
def send(
    session: SessionArg,
    text: Annotated[str, typer.Argument(help="The message.")],
    mode: Annotated[
        str, typer.Option(help="auto (steer a running turn, else start one), steer or follow_up.")
    ] = "auto",
    context_file: ContextFileOpt = None,
) -> None:
    """Send a message to a session; it is stored before this returns."""
    if mode not in ("auto", "steer", "follow_up"):
        raise typer.BadParameter("mode must be auto, steer or follow_up")
    files = read_context_files(context_file)

    async def go() -> None:
        async with _client() as client:
            message = SendMessage(typed_text(text), mode=mode, context_files=files)  # type: ignore[arg-type]
            receipt = await client.send(session, message)
            print(f"message {receipt.message_id} {receipt.status}: {receipt.session_id}")

    asyncio.run(go())


@app.command()
def stop(session: SessionArg) -> None:
    """Interrupt a session and unload it (its namespace is snapshotted); any new
    message brings it back."""
    info = with_client(lambda client: client.stop(session))
    print(f"{info.id}: {info.status}")


@app.command()
def logs(
    session: SessionArg,
    json_lines: Annotated[bool, typer.Option("--json", help="JSON lines on stdout.")] = False,
) -> None:
    """The session's whole history, readable (or as JSON lines)."""
    from recursa.cli.follow import show
    from recursa.cli.render import TranscriptPrinter, session_footer

    async def go() -> None:
        async with _client() as client:
            printer = TranscriptPrinter(out=sys.stdout, color=color_enabled(sys.stdout))
            async for record in client.events(session, after=0, follow=False):
                if json_lines:
                    show(record, printer, json_lines=True)
                elif record.seq:
                    printer.handle(record)
            info = await client.session(session)
            if not json_lines:
                print(session_footer(info))

    asyncio.run(go())


@app.command()
def usage(
    session: SessionArg,
    json_out: Annotated[bool, typer.Option("--json", help="The tree as JSON.")] = False,
) -> None:
    """Tokens and cost of a session and of its whole tree of sub-agents."""
    print_usage(with_client(lambda client: client.usage(session)), json_out)

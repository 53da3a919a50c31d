"""Following a daemon-owned session from the terminal: ``recursa run`` and
``recursa attach`` share it.

Events come from the daemon's stream from a cursor (so a dropped connection
resumes without gaps or repeats) and are rendered as a transcript on stderr
or as JSON lines on stdout. Ctrl-C interrupts the running turn (the session
stays, idle); a second Ctrl-C while that turn is still stopping, or a
Ctrl-C with no turn running, detaches: the session goes on in the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from recursa.cli.common import typed_text
from recursa.cli.render import TranscriptPrinter, json_line
from recursa.protocol.events import (
    AutonomousEnded,
    EventRecord,
    StatusChanged,
    TurnEnded,
    record_to_dict,
)

if TYPE_CHECKING:
    from recursa.daemon.client import DaemonClient


@dataclass
class Follow:
    """What a follower saw: the last turn's end, the end of an autonomous run,
    and the last cursor."""

    cursor: int = 0
    last_end: TurnEnded | None = None
    autonomous_end: AutonomousEnded | None = None
    running: bool = False
    detached: bool = False
    interrupted: bool = False
    seen_turn: bool = False
    history: list[EventRecord] = field(default_factory=list)


def show(record: EventRecord, printer: TranscriptPrinter, json_lines: bool) -> None:
    """Render one record: a JSON line (stored events only), or the transcript."""
    if json_lines:
        if record.seq:
            json_line(record_to_dict(record), sys.stdout)
    elif not isinstance(record.event, StatusChanged):
        printer.handle(record)
        sys.stderr.flush()


async def follow_until_idle(
    client: DaemonClient,
    session: str,
    state: Follow,
    printer: TranscriptPrinter,
    *,
    json_lines: bool,
    need_turn: bool = True,
    stop_at_idle: bool = True,
    in_progress: bool = False,
    settled_from: int = 0,
) -> Follow:
    """Print the session's events from ``state.cursor`` until it goes idle after a
    turn ended (or, without ``need_turn``, at the first idle status; without
    ``stop_at_idle``, only when the user detaches). An idle status stored before
    ``settled_from`` is history being replayed, not the session's state now, and
    does not stop the follow. With ``in_progress``, a reply or cell already
    streaming is shown from its start. Ctrl-C: see the module docstring.
    Returns ``state`` updated."""
    interrupts = _Interrupts(client, session, state)
    with interrupts:
        events = client.events(session, after=state.cursor, follow=True, in_progress=in_progress)
        try:
            async for record in _until_detached(events, interrupts.detach):
                if record.seq:
                    state.cursor = record.seq
                show(record, printer, json_lines)
                event = record.event
                if isinstance(event, TurnEnded):
                    state.last_end = event
                    state.seen_turn = True
                elif isinstance(event, AutonomousEnded):
                    state.autonomous_end = event
                elif isinstance(event, StatusChanged):
                    state.running = event.status == "running"
                    current = record.seq == 0 or record.seq >= settled_from
                    settled = current and event.status in ("idle", "inactive")
                    if stop_at_idle and settled and (state.seen_turn or not need_turn):
                        break
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()  # ends the stream: the daemon stops sending
    return state


async def _until_detached(
    events: AsyncIterator[EventRecord], detach: asyncio.Future[None]
) -> AsyncIterator[EventRecord]:
    """The events, until ``detach`` is set (then the iteration simply ends)."""
    while not detach.done():
        next_event = asyncio.ensure_future(anext(events))

        def stop(
            _: asyncio.Future[None], waiting: asyncio.Future[EventRecord] = next_event
        ) -> None:
            waiting.cancel()

        detach.add_done_callback(stop)
        try:
            record = await next_event
        except StopAsyncIteration:
            return
        except asyncio.CancelledError:
            if detach.done():
                return
            raise
        finally:
            detach.remove_done_callback(stop)
        yield record


class _Interrupts:
    """SIGINT while following: the first interrupts the running turn through the
    daemon; the next one (or one while no turn runs) detaches."""

    def __init__(self, client: DaemonClient, session: str, state: Follow) -> None:
        self.client = client
        self.session = session
        self.state = state
        self.detach: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending: asyncio.Task[object] | None = None

    def __enter__(self) -> _Interrupts:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()

    def _on_sigint(self) -> None:
        if self._pending is not None or not self.state.running:
            self.state.detached = True
            if not self.detach.done():
                self.detach.set_result(None)
            return
        sys.stderr.write("\n(interrupting the turn; press Ctrl-C again to detach)\n")
        self.state.interrupted = True
        self._pending = asyncio.ensure_future(self.client.interrupt(self.session))


async def stdin_lines(prompt: str = "you ▸ ") -> AsyncIterator[str]:
    """Lines typed at a prompt, until end of input.

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
        if prompt:
            sys.stderr.write(prompt)
            sys.stderr.flush()
        line = await lines.get()
        if line is None:
            return
        yield typed_text(line)


__all__ = ["Follow", "follow_until_idle", "show", "stdin_lines"]

"""Runs inside the kernel: text written to the stdout and stderr descriptors, kept
with the cell that wrote it.

ipykernel captures what is written below Python (``os.system``, C code)
through one pipe per stream, and a watcher thread forwards it into the
stream whenever that thread is next scheduled. When a cell ends, bytes it
wrote may still be in the pipe, or read and not yet forwarded, as ipykernel
flushes and reports idle: they would arrive after the cell and belong to
none. So :func:`take_over_all` replaces each watcher by a :class:`Pump`
that reads only while holding a lock, and at the end of every request
(``post_execute``, before ipykernel's last flush) the main thread takes that
lock and forwards what the pipe still holds itself. All that was written to
the descriptor before the cell ended is then in the stream, in order,
however threads are scheduled. While a cell runs, a flush of the stream does
the same first, so that text also comes before the result, display or
traceback ipykernel flushes the streams for (not after: each drain costs a
system call). Where ipykernel's internals differ, its watcher stays.
"""

from __future__ import annotations

import array
import codecs
import fcntl
import os
import select
import sys
import termios
import threading
import types
from collections.abc import Callable
from typing import Any

from recursa.api.streams import feeds_pipe, hold_back

READ_SIZE = 1000
"""ipykernel's read size. Larger reads let a program that floods the pipe
outrun the IOPub thread, and the flush that ends each cell waits for it."""
DRAIN_WAIT = 0.5
"""Seconds the end of a cell waits for a pump's lock: a wedged pump cannot
keep a cell from ending (what its pipe holds is then left for later)."""
WATCHER_STOP_WAIT = 2.0
"""Seconds ipykernel's watcher has to stop before the pump gives up on it."""


class Pump:
    """Forwards one stream's pipe into the stream: :meth:`run` on its own
    thread, :meth:`drain` from the main thread."""

    def __init__(self, stream: Any, pipe: int, chunk_chars: int) -> None:
        self.stream = stream
        # ipykernel's own write, not one set on the stream: a bounded write
        # must not wait while this pump holds its lock.
        self.write: Callable[[str], object] = types.MethodType(type(stream).write, stream)
        self.pipe = pipe
        self.chunk_chars = chunk_chars
        self.lock = threading.Lock()
        # Incremental: a character split between two reads stays whole.
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.waiting = array.array("i", [0])

    def run(self) -> None:
        """ipykernel's loop, with the lock around each read and the forwarding
        of what it read. Like ipykernel's, it stops at end of file or when
        ``OutStream.close()`` asks, keeping an exception for ``close()`` to
        print; it does not echo, as the echo is /dev/null."""
        poller = select.poll()
        poller.register(self.pipe, select.POLLIN)
        try:
            while True:
                poller.poll()
                with self.lock:
                    try:
                        data = os.read(self.pipe, READ_SIZE)
                    except BlockingIOError:
                        continue  # the main thread emptied the pipe first
                    if not data or not self.stream._should_watch:
                        return
                    self.forward(data, final=False)
                hold_back(self.stream, self.chunk_chars)
        except Exception:
            self.stream._exc = sys.exc_info()

    def drain(self, *, final: bool) -> None:
        """Forward what the pipe holds now, and only that: a program left
        writing in the background cannot keep a cell from ending. ``final``:
        the end of a request, which is a cut (a character still incomplete
        there is shown as U+FFFD); a flush is not."""
        if not self.lock.acquire(timeout=DRAIN_WAIT):
            return
        try:
            fcntl.ioctl(self.pipe, termios.FIONREAD, self.waiting)
            left = self.waiting[0]
            chunks = []
            while left > 0 and (chunk := os.read(self.pipe, left)):
                chunks.append(chunk)
                left -= len(chunk)
            self.forward(b"".join(chunks), final=final)
        finally:
            self.lock.release()

    def forward(self, data: bytes, *, final: bool) -> None:
        text = self.decoder.decode(data, final)
        if text:
            self.write(text)


def take_over(stream: Any, chunk_chars: int) -> Pump | None:
    """A running pump in place of ipykernel's watcher of ``stream``'s pipe, or
    None (the watcher left in place) when the internals differ."""
    fd = feeds_pipe(stream)
    pipe = getattr(stream, "_fid", None)
    watcher = getattr(stream, "watch_fd_thread", None)
    if not (
        fd is not None
        and isinstance(pipe, int)
        and isinstance(watcher, threading.Thread)
        and getattr(stream, "_should_watch", None) is True
    ):
        return None
    # Stop ipykernel's watcher the way OutStream.close() does: it ends after
    # its next read once _should_watch is false, and this byte makes sure
    # there is one.
    stream._should_watch = False
    try:
        os.write(fd, b"\0")
        watcher.join(WATCHER_STOP_WAIT)
    finally:
        stream._should_watch = True
    if watcher.is_alive():
        return None
    # What is left was written during the bootstrap (at least that byte, if
    # the watcher's last read came before it), and nobody keeps it.
    os.set_blocking(pipe, False)
    try:
        while os.read(pipe, 65536):
            pass
    except BlockingIOError:
        pass
    pump = Pump(stream, pipe, chunk_chars)
    name = f"recursa-{stream.name}-pump"
    thread = threading.Thread(target=pump.run, name=name, daemon=True)
    thread.start()
    stream.watch_fd_thread = thread  # what OutStream.close() joins
    return pump


class _Cells:
    """Drains the pumps at the end of every request, and on each flush while
    a cell runs (``pre_execute`` to ``post_execute``)."""

    def __init__(self, pumps: list[Pump]) -> None:
        self.pumps = pumps
        self.running = False

    def starts(self) -> None:
        self.running = True

    def ends(self) -> None:
        self.running = False
        for pump in self.pumps:
            pump.drain(final=True)

    def drain_first(self, pump: Pump, flush: Callable[[], object]) -> Callable[[], None]:
        def drain_then_flush() -> None:
            if self.running:
                pump.drain(final=False)
            flush()

        return drain_then_flush


def take_over_all(shell: Any, chunk_chars: int) -> list[Pump]:
    """Pumps for ``sys.stdout`` and ``sys.stderr`` (those whose internals
    fit), drained at the end of each of ``shell``'s requests."""
    pumps = [p for p in (take_over(s, chunk_chars) for s in (sys.stdout, sys.stderr)) if p]
    if pumps:
        cells = _Cells(pumps)
        for pump in pumps:
            pump.stream.flush = cells.drain_first(pump, pump.stream.flush)
        shell.events.register("pre_execute", cells.starts)
        shell.events.register("post_execute", cells.ends)
    return pumps


__all__ = ["DRAIN_WAIT", "READ_SIZE", "WATCHER_STOP_WAIT", "Pump", "take_over", "take_over_all"]

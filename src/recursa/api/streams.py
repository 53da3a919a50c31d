"""Runs inside the kernel: ipykernel's output streams, made fit for a model and a flood.

:func:`capture` is called once by the extension (:mod:`recursa.api.extension`)
in a fresh kernel, during the harness's bootstrap request. It changes, on
``sys.stdout`` and ``sys.stderr`` (ipykernel's ``OutStream`` objects):

- an empty flush costs nothing (ipykernel's blocks on a round trip through
  its IOPub thread even with nothing to send);
- text written below Python (``os.system``, C code) is no longer echoed into
  the kernel's log file, which would grow without bound;
- ``fileno()`` answers the descriptor that feeds the stream's pipe, so what
  is written there is part of the cell's output;
- IPython stops keeping every cell's output in memory (its ``%notebook`` tee);
- a flood of output goes at the pace the harness reads, in messages of about
  ``chunk_chars`` characters, and the iopub socket waits for room (at most
  ``send_queue`` messages) instead of dropping: nothing piles up, nothing is
  lost;
- text written to the descriptors ends up in the cell that wrote it, in
  order: :mod:`recursa.api.pump`, which uses this module's helpers.

Each change reaches into ipykernel's internals (pinned to its major version
in ``pyproject.toml``) and is skipped, leaving ipykernel's behaviour, when
those internals differ.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

CONFIGURE_WAIT = 5.0
"""Seconds the bootstrap waits for the IOPub thread to configure its socket."""


def capture(shell: Any, *, send_queue: int) -> None:
    """Make the changes this module describes, but the bounded writes
    (:func:`bound_writes_from_next_request`), on the streams of ``shell``'s
    kernel. The pumps of :mod:`recursa.api.pump` come after this."""
    for stream in _streams():
        _free_empty_flush(stream)
    _silence_log_echo()
    for stream in _streams():
        fd = feeds_pipe(stream)
        if fd is not None:
            stream.fileno = _answer(fd)
    _no_tee(shell)
    _configure_iopub(send_queue)


def bound_writes_from_next_request(shell: Any, chunk_chars: int) -> None:
    """Bound Python's writers (:func:`bounded`) from the next request on: the
    request that runs this still tees the streams, and puts back the write
    methods it found when it ends."""

    def bound_writes() -> None:
        shell.events.unregister("pre_execute", bound_writes)
        for stream in _streams():
            if getattr(stream, "_buffer_lock", None) is not None:
                stream.write = bounded(stream, stream.write, chunk_chars)

    shell.events.register("pre_execute", bound_writes)


def _streams() -> Iterator[Any]:
    yield sys.stdout
    yield sys.stderr


def _answer(fd: int) -> Callable[[], int]:
    return lambda: fd


def _free_empty_flush(stream: Any) -> None:
    # ipykernel ends every cell with a flush of both streams, each about
    # 0.2 ms through its IOPub thread. A stream holding no text has nothing
    # to order, so its flush returns at once; one with text flushes as
    # before, so output order is exactly ipykernel's.
    lock = getattr(stream, "_buffer_lock", None)
    if lock is None or not isinstance(getattr(stream, "_buffers", None), dict):
        return
    if getattr(stream, "echo", None) is not None:
        return
    full_flush = stream.flush

    def flush() -> None:
        with lock:
            empty = not stream._buffers
        if not empty:
            full_flush()

    stream.flush = flush


def _silence_log_echo() -> None:
    # ipykernel echoes what it captures from the descriptors to the process's
    # original stdout/stderr: the kernel's log file, kept for startup
    # failures only. From here on the echo goes to /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in _streams():
            fd = getattr(stream, "_original_stdstream_copy", None)
            if isinstance(fd, int):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def feeds_pipe(stream: Any) -> int | None:
    """The descriptor (1 or 2) that feeds ``stream``'s capture pipe, or None
    when the stream is not ipykernel's capturing kind.

    Without the fix in :func:`capture`, ``stream.fileno()`` answers the copy
    of the original descriptor, which is /dev/null from the bootstrap on: what
    ``subprocess.run(..., stdout=sys.stdout)`` or faulthandler wrote there
    would be lost."""
    pipe = getattr(stream, "_fid", None)
    fd = getattr(stream, "_original_stdstream_fd", None)
    if not (isinstance(pipe, int) and isinstance(fd, int)):
        return None
    read_end, write_end = os.fstat(pipe), os.fstat(fd)
    if not stat.S_ISFIFO(read_end.st_mode):
        return None
    if (read_end.st_dev, read_end.st_ino) != (write_end.st_dev, write_end.st_ino):
        return None
    return fd


def _no_tee(shell: Any) -> None:
    # IPython keeps every cell's stream output in memory for %notebook (a tee
    # around the streams' write methods during each request): the kernel
    # would grow by all it ever printed. No request tees from the next one on.
    if callable(getattr(type(shell), "_tee", None)):
        shell._tee = lambda channel: contextlib.nullcontext()


def held(stream: Any) -> int:
    """Characters ``stream`` holds, not yet sent; 0 for a stream of another kind."""
    lock = getattr(stream, "_buffer_lock", None)
    if lock is None or not isinstance(getattr(stream, "_buffers", None), dict):
        return 0
    with lock:
        # Read under the lock: the IOPub thread swaps in a new dict under it,
        # then closes the old one's buffers (a closed buffer's tell() raises).
        return sum(buffer.tell() for buffer in stream._buffers.values())


def hold_back(stream: Any, chunk_chars: int) -> None:
    """Send what ``stream`` holds once it is more than ``chunk_chars``, and
    wait until it is sent (ipykernel's flush waits for the IOPub thread)."""
    if held(stream) > chunk_chars:
        stream.flush()


def bounded(stream: Any, write: Callable[[str], int], chunk_chars: int) -> Callable[[str], int]:
    """``write``, followed by :func:`hold_back`: a writer that outruns the
    harness waits for it instead of piling text up in memory."""

    def bounded_write(text: str) -> int:
        written = write(text)
        hold_back(stream, chunk_chars)
        return written

    return bounded_write


def _configure_iopub(send_queue: int) -> None:
    # ipykernel sends what a stream holds every 0.2 s as one message, however
    # large, and its iopub socket drops messages a slow reader has no room
    # for. Made to wait for room instead: the harness bounds its receive
    # queue, and a flood then goes at the pace the harness reads.
    import zmq

    pub = getattr(sys.stdout, "pub_thread", None)
    socket = getattr(pub, "socket", None)
    if pub is None or not (isinstance(socket, zmq.Socket) and socket.type == zmq.XPUB):
        return
    configured = threading.Event()

    def configure() -> None:
        # On the IOPub thread: the socket is that thread's.
        try:
            socket.setsockopt(zmq.XPUB_NODROP, 1)
            socket.setsockopt(zmq.SNDHWM, send_queue)
        finally:
            configured.set()

    pub.schedule(configure)
    configured.wait(CONFIGURE_WAIT)


__all__ = [
    "CONFIGURE_WAIT",
    "bound_writes_from_next_request",
    "bounded",
    "capture",
    "feeds_pipe",
    "held",
    "hold_back",
]

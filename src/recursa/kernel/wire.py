"""The Jupyter wire protocol on two sockets, read from the event loop without helpers.

A :class:`Channels` holds the shell (DEALER) and iopub (SUB) sockets of one
kernel process. Messages are built, signed, serialized and checked by
jupyter_client's :class:`~jupyter_client.session.Session`; what is ours is the
socket handling: a cell's round trip is a send, a few non-blocking
receives and one or two loop wakeups, and one wait serves the sockets, a
stop requested by another task and the process's exit.
``benchmarks/kernel_roundtrip.py`` times it against jupyter_client's
``AsyncKernelClient`` on the same kernel. ``Session``, which also parses the date in every header, makes a
trivial cell's one request and four or five replies cost 0.1 to 0.2 ms more
than a hand-written codec did; that buys not keeping a copy of the protocol.

Wakeups: each socket's ``ZMQ_FD`` is registered with the loop once. That
descriptor is edge-like: it signals that the socket's state *may* have
changed, and reading ``ZMQ_EVENTS`` (or receiving) re-arms it. So the reader
callback reads ``ZMQ_EVENTS`` itself (a level-triggered selector would
otherwise spin on it), and :meth:`Channels.wait` is only called after both
sockets were drained. A wakeup with no waiter is remembered, so none is lost
between a drain and the next wait. Between requests the callback discards
iopub messages instead, so nothing piles up while nobody reads.

Flow control: the iopub receive queue holds at most
:data:`IOPUB_QUEUE_MESSAGES` messages. The kernel's bootstrap makes its iopub
socket wait for room rather than drop a message, and bounds the size of the
stream messages a flood produces, so when the event loop is busy a flooding
kernel slows down instead of filling this process's memory, and no message
(``status: idle`` least of all) is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session
from traitlets import TraitError

from recursa.errors import KernelError

JSONDict = dict[str, Any]

IOPUB_QUEUE_MESSAGES = 64
"""How many iopub messages may wait to be read, on each side of the socket.
A flood's stream messages hold about 256K characters each (the kernel's
``OUTPUT_CHUNK_CHARS``): some 16 MB of plain text waiting per side, per kernel."""


@dataclass(frozen=True, slots=True)
class Message:
    """One incoming message, reduced to what the client acts on."""

    msg_type: str
    parent_id: str | None
    content: JSONDict


def make_session(connection: Mapping[str, Any]) -> Session:
    """The :class:`Session` for one kernel's connection info (its ``key`` and
    ``signature_scheme``). Raises :class:`KernelError` for a scheme it cannot use.

    Replay protection is off (``digest_history_size=0``). Session's history
    would keep up to 65,536 signatures per kernel (about 8 MB) and sort them
    all to cull it every few thousand messages (tens of milliseconds), for no
    gain here: the sockets are unix sockets in a directory only this user can
    enter, so whoever could replay a message could also read the key.
    """
    key = connection.get("key", b"")
    try:
        return Session(
            key=key.encode() if isinstance(key, str) else key,
            signature_scheme=connection.get("signature_scheme", "hmac-sha256"),
            username="recursa",
            digest_history_size=0,
        )
    except TraitError as exc:
        raise KernelError(f"unusable kernel connection: {exc}") from exc


# What Session.feed_identities and Session.deserialize raise for a malformed,
# unsigned or badly signed message.
_BAD_MESSAGE = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def parse_message(
    session: Session, frames: list[bytes], *, want: str | None = None
) -> Message | None:
    """Verify and parse one received message; ``None`` if it is malformed or badly signed.

    When ``want`` is given, a message whose parent is another request is
    returned without its content (``{}``): its content is never decoded,
    which keeps stale or foreign output cheap to skip.
    """
    try:
        _, parts = session.feed_identities(frames)
        msg = session.deserialize(parts, content=False)
        parent = msg["parent_header"].get("msg_id")
        parent_id = parent if isinstance(parent, str) else None
        msg_type = str(msg["msg_type"])
        if want is not None and parent_id != want:
            return Message(msg_type, parent_id, {})
        content = session.unpack(msg["content"])
    except _BAD_MESSAGE:
        return None
    if not isinstance(content, dict):
        return None
    return Message(msg_type, parent_id, content)


_context: zmq.asyncio.Context | None = None


def shared_context() -> zmq.asyncio.Context:
    """The one ZeroMQ context (one I/O thread) for every kernel of this process.

    jupyter_client would make one per kernel manager; the channels here take
    plain (non-asyncio) sockets from it.
    """
    global _context
    if _context is None or _context.closed:
        _context = zmq.asyncio.Context()
    return _context


class Channels:
    """The shell, iopub and control sockets of one kernel process, driven from one
    event loop. Control carries what must reach a kernel whose shell is busy
    with a cell: the liveness probe of a reattach, and the shutdown request.

    Invariants: not thread-safe, every method runs on the loop that created
    it; iopub messages that arrive while :attr:`busy` is false belong to no
    request and are discarded, and so are control messages while
    :attr:`asking_control` is false (late answers to probes sent again).
    """

    def __init__(self, connection: Mapping[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        self.session = make_session(connection)
        """Signs, serializes and checks this kernel's messages."""
        self._loop = loop
        self.busy = False
        """True while a request is in flight (set by its owner)."""
        self.asking_control = False
        """True while a request on control awaits its reply (set by its owner)."""
        self._pending = False
        self._waiter: asyncio.Future[None] | None = None
        ctx = shared_context()
        self.shell: zmq.Socket[bytes] = zmq.Socket(ctx, zmq.DEALER)
        self.iopub: zmq.Socket[bytes] = zmq.Socket(ctx, zmq.SUB)
        self.control: zmq.Socket[bytes] = zmq.Socket(ctx, zmq.DEALER)
        self._sockets = (self.shell, self.iopub, self.control)
        self._fds: list[int] = []
        try:
            # No limit on shell, whose few replies must all arrive. On iopub
            # the limit is safe only because the kernel does not drop a
            # message when it is reached (see the module docstring).
            self.shell.rcvhwm = 0
            self.control.rcvhwm = 0
            self.iopub.rcvhwm = IOPUB_QUEUE_MESSAGES
            for sock, port in (
                (self.shell, "shell_port"),
                (self.iopub, "iopub_port"),
                (self.control, "control_port"),
            ):
                sock.linger = 0
                sock.connect(_address(connection, port))
            self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
            for sock in self._sockets:
                fd = sock.fileno()
                loop.add_reader(fd, self._on_readable, sock)
                self._fds.append(fd)
        except BaseException:
            self.close()
            raise

    def _on_readable(self, sock: zmq.Socket[bytes]) -> None:
        # Reading ZMQ_EVENTS processes the socket's pending commands, which
        # clears the descriptor; without it the selector would fire forever.
        try:
            ready = bool(int(sock.get(_EVENTS)) & _POLLIN)
            if ready and (
                (sock is self.iopub and not self.busy)
                or (sock is self.control and not self.asking_control)
            ):
                # Between requests nobody reads iopub, and the receive queue
                # has no limit: output of a background thread would pile up.
                while _recv(sock) is not None:
                    pass
                return
        except zmq.ZMQError:
            return
        if ready:
            self.wake()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Mark a request in flight, so that its iopub messages are kept."""
        self.busy = True
        try:
            yield
        finally:
            self.busy = False

    def wake(self) -> None:
        """Make the current (or next) :meth:`wait` return."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        else:
            self._pending = True

    async def wait(self, deadline: float | None) -> None:
        """Return on a wakeup, or at ``deadline`` (loop time), whichever is first."""
        if self._pending:
            self._pending = False
            return
        if deadline is not None and deadline <= self._loop.time():
            return
        waiter = self._loop.create_future()
        self._waiter = waiter
        timer = None
        if deadline is not None and math.isfinite(deadline):
            timer = self._loop.call_at(deadline, _resolve, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            self._pending = False
            if timer is not None:
                timer.cancel()

    def send(self, msg_type: str, content: JSONDict, *, control: bool = False) -> str:
        """Send a request on the shell (or control) socket; return its ``msg_id``."""
        msg = self.session.send(self.control if control else self.shell, msg_type, content)
        if msg is None:  # Session refuses to send from a forked child
            raise KernelError("a kernel's channels cannot be used from a forked process")
        return str(msg["msg_id"])

    def parse(self, frames: list[bytes], *, want: str | None = None) -> Message | None:
        """:func:`parse_message` with this kernel's session."""
        return parse_message(self.session, frames, want=want)

    def recv_shell(self) -> list[bytes] | None:
        return _recv(self.shell)

    def recv_iopub(self) -> list[bytes] | None:
        return _recv(self.iopub)

    def recv_control(self) -> list[bytes] | None:
        return _recv(self.control)

    def close(self) -> None:
        """Unregister and close both sockets. Idempotent."""
        for fd in self._fds:
            self._loop.remove_reader(fd)
        self._fds.clear()
        for sock in self._sockets:
            if not sock.closed:
                sock.close(linger=0)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def find_reply(
    channels: Channels, msg_id: str, msg_type: str = "execute_reply", *, control: bool = False
) -> JSONDict | None:
    """Drain the shell (or control) socket; the content of the reply to ``msg_id``
    if it came. Other messages there (stale replies) are dropped."""
    recv = channels.recv_control if control else channels.recv_shell
    found: JSONDict | None = None
    while (frames := recv()) is not None:
        msg = channels.parse(frames, want=msg_id)
        if msg is not None and msg.parent_id == msg_id and msg.msg_type == msg_type:
            found = msg.content
    return found


def execute_content(code: str, *, silent: bool) -> JSONDict:
    """An ``execute_request``'s content: history unless silent, never stdin."""
    return {
        "code": _encodable(code),
        "silent": silent,
        "store_history": not silent,
        "user_expressions": {},
        "allow_stdin": False,
        # One request is in flight at a time, so there is never a queue to
        # abort; False avoids racing the kernel's post-error abort window.
        "stop_on_error": False,
    }


def _encodable(code: str) -> str:
    """``code`` with lone surrogates written as ``\\udXXX`` escapes.

    ipykernel never answers a request whose code holds a lone surrogate (its
    own messages about that code fail to encode), so the cell would hang
    until its limit and cost a restart.
    As an escape, one inside a string literal still means the same character.
    """
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:
        return code.encode("utf-8", "backslashreplace").decode("utf-8")
    return code


def utf8(text: str) -> str:
    """``text`` with lone surrogates replaced by ``?``, so that it encodes:
    the session's JSON packer raises on most of them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)


def _recv(sock: zmq.Socket[bytes]) -> list[bytes] | None:
    # Asking first is cheaper than the exception a receive on an empty
    # socket raises, and an empty socket is the common case in a drain.
    if not int(sock.get(_EVENTS)) & _POLLIN:
        return None
    frames = [sock.recv(_NOBLOCK)]
    while sock.get(_RCVMORE):
        frames.append(sock.recv(_NOBLOCK))
    return frames


def _address(connection: Mapping[str, Any], port_name: str) -> str:
    transport = connection["transport"]
    port = connection[port_name]
    if transport == "ipc":
        return f"ipc://{connection['ip']}-{port}"
    return f"{transport}://{connection['ip']}:{port}"


def pidfd_open(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` exits, where the
    platform has one (Linux 5.3+); ``None`` means: poll instead."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


__all__ = [
    "IOPUB_QUEUE_MESSAGES",
    "Channels",
    "JSONDict",
    "Message",
    "execute_content",
    "find_reply",
    "make_session",
    "parse_message",
    "pidfd_open",
    "shared_context",
    "utf8",
]

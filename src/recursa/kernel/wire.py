"""A kernel's channels: jupyter_client's :class:`AsyncKernelClient`, read from
the event loop's readiness callbacks, with one wait for whatever happens next.

The client owns the protocol: the shell, iopub and control sockets, the
:class:`~jupyter_client.session.Session` that signs, serializes and checks
every message, and the requests it sends. What is ours is what a harness
needs around it and a notebook does not:

- One wait (:meth:`Channels.wait`) serves the three channels, a stop
  requested by another task (:meth:`Channels.wake`) and the process's exit
  (whose watch calls :meth:`Channels.wake` too). A readiness callback per
  channel receives what arrives and wakes the waiter; a wakeup with no waiter is
  remembered, so none is lost between a look and the next wait.
- Only what a request in flight asked for is kept: iopub messages while a
  request is open (:meth:`Channels.request`), replies whose parent is one of
  its requests. Everything else (a background thread's output between
  cells, late replies to probes sent again) is discarded as it arrives, so
  nothing piles up while nobody reads.
- The kernel API's messages (a ``comm_msg`` of the comm
  :data:`~recursa.protocol.wire.KERNEL_COMM_ID` on iopub) go to
  :attr:`Channels.on_comm` whenever they arrive, request or not, and never
  into a request's iopub (:mod:`recursa.kernel.relay`).
- Flow control: the iopub socket's receive queue holds at most
  :data:`IOPUB_QUEUE_MESSAGES` messages, and the reader keeps at most
  :data:`IOPUB_BACKLOG` parsed ones for the request; when both are full it
  stops receiving. The kernel's iopub socket waits for room rather than drop
  a message, and its stream messages are bounded in size, so a flooding
  kernel slows down instead of filling this process's memory, and no message
  (``status: idle`` least of all) is lost.

``benchmarks/kernel_roundtrip.py`` times a cell's round trip through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import math
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session, json_unpacker
from traitlets import TraitError

from recursa.errors import KernelError
from recursa.protocol.wire import KERNEL_COMM_ID

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

JSONDict = dict[str, Any]

IOPUB_QUEUE_MESSAGES = 64
"""How many iopub messages may wait in a socket's queue, on each side of it.
A flood's stream messages hold about 256K characters each (the kernel's
``OUTPUT_CHUNK_CHARS``): some 16 MB of plain text waiting per side, per kernel."""

IOPUB_BACKLOG = 8
"""How many received iopub messages of a request wait for its reader before the
channel stops receiving (a few megabytes of a flood's text, decoded)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One incoming message, reduced to what the harness acts on."""

    msg_type: str
    parent_id: str | None
    content: JSONDict


def make_session(connection: Mapping[str, Any]) -> Session:
    """The :class:`Session` for one kernel's connection info (its ``key`` and
    ``signature_scheme``). Raises :class:`KernelError` for a scheme it cannot use.

    Messages are packed with orjson when it is installed (jupyter_client's
    default) and read with the json module, which keeps integers of any size
    exact (orjson makes floats of those past 64 bits); the kernels the harness
    launches do the same (``recursa.kernel.launch.KERNEL_FLAGS``).

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
            unpack=json_unpacker,
        )
    except TraitError as exc:
        raise KernelError(f"unusable kernel connection: {exc}") from exc


# What Session.feed_identities and Session.deserialize raise for a malformed,
# unsigned or badly signed message (RecursionError: JSON nested too deeply).
_BAD_MESSAGE = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


def parse_message(session: Session, frames: list[bytes]) -> Message | None:
    """Verify and parse one received message; ``None`` if it is malformed or
    badly signed (a kernel's messages are written by code a model wrote).

    The check is :meth:`Session.deserialize`'s (the signature over the four
    signed frames, compared in constant time), without what it adds that the
    harness never reads: ISO dates parsed out of both headers (a third of a
    cell's client-side CPU) and the adaptation of pre-5.0 protocols."""
    try:
        _, parts = session.feed_identities(frames)
        if len(parts) < 5:
            return None
        signature = parts[0]
        if session.auth is not None and not (
            isinstance(signature, bytes)
            and signature
            and hmac.compare_digest(signature, session.sign(parts[1:5]))
        ):
            return None
        header, parent_header = session.unpack(parts[1]), session.unpack(parts[2])
        content = session.unpack(parts[4])
        msg_type = str(header["msg_type"])
        parent = parent_header.get("msg_id")
    except _BAD_MESSAGE:
        return None
    if not isinstance(content, dict):
        return None
    return Message(msg_type, parent if isinstance(parent, str) else None, content)


_context: zmq.asyncio.Context | None = None


def shared_context() -> zmq.asyncio.Context:
    """The one ZeroMQ context (one I/O thread) for every kernel of this process.

    jupyter_client would make one per kernel manager and one per client.
    """
    global _context
    if _context is None or _context.closed:
        _context = zmq.asyncio.Context()
    return _context


class _Client(AsyncKernelClient):
    """An :class:`AsyncKernelClient` whose iopub socket has a bounded receive
    queue (set before it connects: a limit set later does not apply)."""

    def connect_iopub(self, identity: bytes | None = None) -> zmq.Socket[Any]:
        sock = cast("zmq.Socket[Any]", self.context.socket(zmq.SUB))
        sock.linger = 0
        sock.rcvhwm = IOPUB_QUEUE_MESSAGES
        sock.connect(self._make_url("iopub"))
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        return sock


_IOPUB = 1
"""The iopub socket's index among a :class:`Channels`' sockets (shell, iopub, control)."""

_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)

_DRAIN_BATCH = 64
"""How many messages one readiness callback takes before letting the loop run."""


class RequestState:
    """What a kernel's channels keep for the request in flight, and the one wait
    for whatever happens next: the part of :class:`Channels` that does not
    depend on how messages travel (ZeroMQ here, a gateway's WebSocket in
    :class:`recursa.kernel.gateway_channels.GatewayChannels`).

    Invariants: not thread-safe, every method runs on the loop given; outside
    :meth:`request` nothing received is kept. A subclass hands what it
    receives to :meth:`_keep_iopub_message` and :meth:`_keep_reply`, and
    resumes its reader in :meth:`_make_room` when the backlog has room.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._open = False
        self._keep_iopub = False
        self._sent: set[str] = set()
        self._iopub: deque[Message] = deque()
        self._replies: dict[str, Message] = {}
        self._pending = False
        self._waiter: asyncio.Future[None] | None = None
        self.on_comm: Callable[[Message], None] | None = None
        """Called, on the loop, with every ``comm_msg`` of the kernel API's comm
        that arrives on iopub (at any time); None: they are treated like any
        other iopub message. It must not raise."""

    def _backlog_full(self) -> bool:
        return self._keep_iopub and len(self._iopub) >= IOPUB_BACKLOG

    def _route_iopub(self, msg: Message) -> None:
        """The kernel API's comm to :attr:`on_comm`; else kept for the request."""
        on_comm = self.on_comm
        if (
            on_comm is not None
            and msg.msg_type == "comm_msg"
            and msg.content.get("comm_id") == KERNEL_COMM_ID
        ):
            on_comm(msg)
        elif self._keep_iopub:
            self._iopub.append(msg)
            self.wake()

    def _keep_reply(self, msg: Message) -> None:
        if self._open and msg.parent_id in self._sent:
            self._replies[msg.parent_id] = msg
            self.wake()

    def _sent_now(self, msg_id: str) -> None:
        if self._open:
            self._sent.add(msg_id)

    def _make_room(self) -> None:
        """The request's backlog has room again (or the request ended)."""

    def send(
        self, msg_type: str, content: JSONDict, *, control: bool = False, block: bool = True
    ) -> str:
        """Send a request on shell (or control); return its ``msg_id``."""
        raise NotImplementedError

    def execute(self, code: str, *, silent: bool, extra: JSONDict | None = None) -> str:
        """Send an ``execute_request`` (:func:`execute_content`, plus ``extra``
        fields) on shell; return its ``msg_id``."""
        content = execute_content(code, silent=silent)
        if extra:
            content.update(extra)
        return self.send("execute_request", content)

    @contextlib.contextmanager
    def request(self, *, iopub: bool = True) -> Iterator[None]:
        """Keep, until the block ends, the replies to what is sent in it and (when
        ``iopub``) the iopub messages that arrive meanwhile."""
        self._open = True
        self._keep_iopub = iopub
        try:
            yield
        finally:
            self._open = self._keep_iopub = False
            self._sent.clear()
            self._replies.clear()
            self._iopub.clear()
            self._make_room()

    def next_iopub(self) -> Message | None:
        """The oldest iopub message kept and not yet taken, if any."""
        if not self._iopub:
            return None
        msg = self._iopub.popleft()
        if len(self._iopub) < IOPUB_BACKLOG:
            self._make_room()
        return msg

    def reply(self, msg_ids: Collection[str], msg_type: str | None = None) -> Message | None:
        """A reply come to one of ``msg_ids`` (of ``msg_type`` when given), if any."""
        for msg_id in msg_ids:
            msg = self._replies.get(msg_id)
            if msg is not None and (msg_type is None or msg.msg_type == msg_type):
                return msg
        return None

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

    def _release_waiter(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Channels(RequestState):
    """The shell, iopub and control channels of one kernel process, driven from
    one event loop. Control carries what must reach a kernel whose shell is
    busy with a cell: the liveness probe of a reattach, and the shutdown request.

    Invariants: not thread-safe, every method runs on the loop that created
    it; outside :meth:`request` nothing received is kept.
    """

    def __init__(self, connection: Mapping[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        self.session = make_session(connection)
        """Signs, serializes and checks this kernel's messages."""
        super().__init__(loop)
        self._paused = False
        self._plain: tuple[zmq.Socket[bytes], ...] = ()
        self._fds: list[int] = []
        self._channels: tuple[AsyncZMQSocketChannel, ...] = ()
        self.client = _Client(context=shared_context(), session=self.session)
        """The jupyter_client client whose channels these are."""
        try:
            self.client.load_connection_info(cast("KernelConnectionInfo", dict(connection)))
            self.client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=True)
            self._channels = (
                self.client.shell_channel,
                self.client.iopub_channel,
                self.client.control_channel,
            )
            for channel in self._channels:
                channel.socket.linger = 0
            # Received through plain shadows, from the loop's own readiness
            # callback: a message reaches the waiter one loop iteration after it
            # arrives, not three (zmq.asyncio's event handler, a reader task, the
            # waiter), which a tool step pays several times.
            self._plain = tuple(
                zmq.Socket.shadow(channel.socket.underlying) for channel in self._channels
            )
            for index, sock in enumerate(self._plain):
                loop.add_reader(sock.FD, self._drain, index)
                self._fds.append(sock.FD)
                loop.call_soon(self._drain, index)  # whatever came before the reader
        except BaseException:
            self.close()
            raise

    # -- receiving (a readiness callback per channel) ---------------------------------------

    def _drain(self, index: int) -> None:
        """Receive what waits on channel ``index`` (0 shell, 1 iopub, 2 control).

        ZeroMQ's descriptor signals edges, so this reads until the socket is
        empty, except: at most :data:`_DRAIN_BATCH` messages per call (a
        flooding kernel does not hold the loop; the rest is taken on the next
        iteration), and none while the request's iopub backlog is full
        (:meth:`_make_room` resumes)."""
        if index >= len(self._plain):
            return  # closed: the shadows go before the sockets close
        sock = self._plain[index]
        for _ in range(_DRAIN_BATCH):
            try:
                if index == _IOPUB and self._backlog_full():
                    # Reading the events clears the descriptor, which would
                    # otherwise wake the loop again and again while paused.
                    sock.get(zmq.EVENTS)
                    self._paused = True
                    return
                # Asking first is cheaper than the exception a receive on an
                # empty socket raises, and an empty socket ends every drain.
                if not int(sock.get(zmq.EVENTS)) & _POLLIN:
                    return
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                return  # closed
            if index == _IOPUB:
                self._take_iopub(frames)
            else:
                self._take_reply(frames)
        self._loop.call_soon(self._drain, index)

    def _take_iopub(self, frames: list[bytes]) -> None:
        on_comm = self.on_comm
        if not self._keep_iopub and on_comm is None:
            return  # nobody's: a background thread's output between requests
        msg = parse_message(self.session, frames)
        if msg is not None:
            self._route_iopub(msg)

    def _take_reply(self, frames: list[bytes]) -> None:
        if not self._open:
            return  # an answer to a request given up on
        msg = parse_message(self.session, frames)
        if msg is not None:
            self._keep_reply(msg)

    # -- requests ---------------------------------------------------------------------------

    def send(
        self, msg_type: str, content: JSONDict, *, control: bool = False, block: bool = True
    ) -> str:
        """Send a request on the shell (or control) channel; return its ``msg_id``.
        Inside :meth:`request`, its reply is kept for :meth:`reply`. Unless
        ``block``, a socket whose queue is full (a kernel that stopped reading)
        raises KernelError instead of stalling the loop."""
        msg = self.session.msg(msg_type, content)
        index = 2 if control else 0
        if index >= len(self._plain):
            raise KernelError("the kernel's channels are closed")
        if not block and not int(self._plain[index].get(zmq.EVENTS)) & _POLLOUT:
            raise KernelError("the kernel is not reading its channel")
        # What channel.send does, minus ignoring a refusal: Session does not
        # send from a forked child.
        if self.session.send(self._plain[index], msg) is None:
            raise KernelError("a kernel's channels cannot be used from a forked process")
        # A send may consume the wakeup of a reply that arrived meanwhile (the
        # socket's descriptor is edge-like): look at the socket's events, and
        # receive what waits, so that no reply is left unread.
        if int(self._plain[index].get(zmq.EVENTS)) & _POLLIN:
            self._loop.call_soon(self._drain, index)
        msg_id = str(msg["header"]["msg_id"])
        self._sent_now(msg_id)
        return msg_id

    def _make_room(self) -> None:
        if self._paused:
            self._paused = False
            self._loop.call_soon(self._drain, _IOPUB)

    def close(self) -> None:
        """Stop the readers and close the sockets. Idempotent."""
        for fd in self._fds:
            with contextlib.suppress(RuntimeError, ValueError, OSError):  # the loop is closed
                self._loop.remove_reader(fd)
        self._fds.clear()
        self._plain = ()
        self.on_comm = None
        for channel in self._channels:
            channel.close()
        self._paused = False
        self._release_waiter()


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


__all__ = [
    "IOPUB_BACKLOG",
    "IOPUB_QUEUE_MESSAGES",
    "Channels",
    "JSONDict",
    "Message",
    "RequestState",
    "execute_content",
    "make_session",
    "parse_message",
    "shared_context",
    "utf8",
]

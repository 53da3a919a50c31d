"""A gateway kernel's channels: the one WebSocket (``/api/kernels/<id>/channels``)
that carries its shell, iopub, stdin and control channels as JSON messages,
each naming its ``channel``. The gateway signs and checks the ZeroMQ
messages; on the WebSocket a message is plain JSON, authenticated by the
connection (``Authorization: token T``).

:class:`GatewayChannels` is tornado's WebSocket client (which jupyter_server
itself is built on), with the same surface and the same guarantees as the
local :class:`~recursa.kernel.wire.Channels`: one wait for whatever happens
next, only what a request in flight asked for is kept, and a bounded backlog
(the reader stops reading while the request's reader is behind, so the
gateway's socket fills and a flooding kernel slows down).

What the gateway sends is checked as what a kernel sends is: a message that
is not a JSON object of the protocol's shape is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from recursa.errors import KernelError
from recursa.kernel.gateway import CONNECT_TIMEOUT, GatewaySettings, KernelGone
from recursa.kernel.wire import JSONDict, Message, RequestState

if TYPE_CHECKING:
    from tornado.websocket import WebSocketClientConnection

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest WebSocket message read; a kernel's stream messages are far smaller."""
PROTOCOL_VERSION = "5.3"
MAX_UNSENT = 1024
"""Writes that may wait to go out before a reply that need not wait is dropped."""
PING_INTERVAL = 20.0
"""Seconds between WebSocket pings: a proxy between here and the gateway
(an ingress, a load balancer) closes a connection idle for longer, often 60 s."""

log = logging.getLogger(__name__)


class GatewayChannels(RequestState):
    """The channels of one gateway kernel over its WebSocket, driven from one
    event loop (see :class:`recursa.kernel.wire.Channels`: the same surface).

    ``on_comm``, when set, receives every ``comm_msg`` on iopub at any time
    (the kernel API's requests), never kept with a request's iopub.
    ``on_status`` receives each ``execution_state`` the kernel publishes
    (:func:`recursa.kernel.remote.means_death` says which tell of a death).
    """

    def __init__(self, ws: WebSocketClientConnection, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._ws = ws
        self._session = uuid.uuid4().hex
        self._room = asyncio.Event()
        self._room.set()
        self._unsent = 0
        self.closed = False
        """The WebSocket is closed (by either side)."""
        self.on_status: Callable[[str], None] | None = None
        self._reader = loop.create_task(self._read(), name="recursa-gateway-channels")

    @classmethod
    async def connect(
        cls,
        settings: GatewaySettings,
        kernel_id: str,
        *,
        within: float = CONNECT_TIMEOUT,
        unless: asyncio.Event | None = None,
    ) -> GatewayChannels:
        """Open the kernel's channels WebSocket; :class:`KernelError` in one
        line. Enterprise Gateway answers the handshake only once the kernel
        does: when ``unless`` is set first (the kernel is known lost), the
        handshake is abandoned, its connection closed, and :class:`KernelGone`
        raised."""
        from tornado.httpclient import HTTPClientError, HTTPRequest
        from tornado.httputil import HTTPHeaders
        from tornado.websocket import WebSocketClientConnection

        # Every field the client reads is given (websocket_connect would fill
        # the unset ones from private defaults): the connection is ours to
        # close while its handshake waits.
        request = HTTPRequest(
            settings.channels_url(kernel_id),
            headers=HTTPHeaders(settings.headers()),
            connect_timeout=min(within, CONNECT_TIMEOUT),
            request_timeout=within,
            follow_redirects=False,
            max_redirects=0,
            decompress_response=True,
            proxy_password="",
            allow_nonstandard_methods=False,
            validate_cert=True,
        )
        conn = WebSocketClientConnection(
            request, max_message_size=MAX_MESSAGE_BYTES, ping_interval=PING_INTERVAL
        )
        where = settings.base
        try:
            ws = await _first(conn.connect_future, unless)
        except HTTPClientError as exc:
            if exc.code in (401, 403):
                raise KernelError(
                    f"the kernel gateway at {where} refused the token (HTTP {exc.code})"
                ) from None
            if exc.code == 404:
                raise KernelGone(f"the kernel gateway at {where} has no such kernel") from None
            raise KernelError(
                f"the kernel gateway at {where} refused the kernel's channels: {exc}"
            ) from None
        except (TimeoutError, OSError) as exc:
            raise KernelError(f"cannot reach the kernel gateway at {where}: {exc}") from None
        except BaseException:
            _abandon(conn)
            raise
        if ws is None:
            _abandon(conn)
            raise KernelGone(f"gateway kernel {kernel_id} was lost before it answered")
        # Each message is one write: without this a small message waits for
        # the acknowledgement of the last (Nagle's algorithm).
        with contextlib.suppress(Exception):
            ws.stream.set_nodelay(True)
        return cls(ws, asyncio.get_running_loop())

    # -- receiving ----------------------------------------------------------------------

    async def _read(self) -> None:
        quickack = _quickack(self._ws)
        try:
            while True:
                if self._backlog_full():
                    self._room.clear()
                    await self._room.wait()
                    continue
                raw = await self._ws.read_message()
                if raw is None:
                    return
                quickack()
                if isinstance(raw, str):
                    self._take(raw)
                # A binary frame carries buffers (widgets); the harness reads none.
        except asyncio.CancelledError:
            raise
        except Exception:
            log.debug("a gateway kernel's channels failed", exc_info=True)
        finally:
            self.closed = True
            self.wake()

    def _take(self, raw: str) -> None:
        try:
            data = json.loads(raw)
            header, parent = data["header"], data.get("parent_header") or {}
            msg_type, channel, content = header["msg_type"], data["channel"], data["content"]
        except (ValueError, KeyError, TypeError, RecursionError):
            return
        if not (
            isinstance(msg_type, str) and isinstance(content, dict) and isinstance(parent, dict)
        ):
            return
        parent_id = parent.get("msg_id")
        msg = Message(msg_type, parent_id if isinstance(parent_id, str) else None, content)
        if channel == "iopub":
            if msg_type == "status" and self.on_status is not None:
                state = content.get("execution_state")
                if isinstance(state, str):
                    self.on_status(state)
            self._route_iopub(msg)
        elif channel in ("shell", "control"):
            self._keep_reply(msg)

    # -- requests -----------------------------------------------------------------------

    def send(
        self, msg_type: str, content: JSONDict, *, control: bool = False, block: bool = True
    ) -> str:
        """Send a request on shell (or control); return its ``msg_id``. Unless
        ``block``, KernelError while :data:`MAX_UNSENT` writes wait to go out
        (a kernel, or a gateway, that stopped reading)."""
        if self.closed:
            raise KernelError("the kernel's channels are closed")
        if not block and self._unsent >= MAX_UNSENT:
            raise KernelError("the kernel is not reading its channel")
        msg_id = uuid.uuid4().hex
        message: JSONDict = {
            "header": {
                "msg_id": msg_id,
                "msg_type": msg_type,
                "username": "recursa",
                "session": self._session,
                "date": "",
                "version": PROTOCOL_VERSION,
            },
            "parent_header": {},
            "metadata": {},
            "content": content,
            "channel": "control" if control else "shell",
            "buffers": [],
        }
        try:
            written = self._ws.write_message(json.dumps(message, ensure_ascii=False))
        except Exception as exc:  # tornado's WebSocketClosedError, a stream error
            self.closed = True
            raise KernelError(f"the kernel's channels are closed: {exc}") from None
        self._unsent += 1
        written.add_done_callback(self._written)
        self._sent_now(msg_id)
        return msg_id

    def _make_room(self) -> None:
        self._room.set()

    def _written(self, done: asyncio.Future[None]) -> None:
        self._unsent -= 1
        if not done.cancelled():
            done.exception()  # a closed stream: the reader notices it

    def close(self) -> None:
        """Close the WebSocket and stop reading. Idempotent."""
        self.closed = True
        self.on_comm = None
        self._reader.cancel()
        with contextlib.suppress(Exception):
            self._ws.close()
        self.wake()


def _quickack(ws: WebSocketClientConnection) -> Callable[[], None]:
    """What re-arms Linux's quick acknowledgements on the WebSocket's socket.

    The gateway writes a cell's messages (busy, result, reply, idle) one by
    one, with Nagle's algorithm on: each small write after the first waits
    for the acknowledgement of the one before, which a receiver in delayed-ACK
    mode holds back up to 40 ms. Acknowledging at once (the kernel resets the
    mode, so after every read) took a loopback cell from 48 ms to 5.5 ms.
    Elsewhere (no ``TCP_QUICKACK``) it does nothing."""
    import socket

    option = getattr(socket, "TCP_QUICKACK", None)
    sock = getattr(ws.stream, "socket", None)
    if option is None or sock is None:
        return lambda: None

    def rearm() -> None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, 1)

    return rearm


async def _first(
    opening: asyncio.Future[WebSocketClientConnection], unless: asyncio.Event | None
) -> WebSocketClientConnection | None:
    """The opened connection, or None once ``unless`` is set first."""
    if unless is None:
        return await opening
    told = asyncio.ensure_future(unless.wait())
    either: set[asyncio.Future[Any]] = {opening, told}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        told.cancel()
    return opening.result() if opening.done() else None


def _abandon(conn: WebSocketClientConnection) -> None:
    """Give up a connection whose handshake is no longer wanted: its stream is
    closed (the handshake then fails and its task ends), and should it open
    all the same (it was still connecting), it is closed then."""

    def close_late(opened: asyncio.Future[WebSocketClientConnection]) -> None:
        if not opened.cancelled() and opened.exception() is None:
            opened.result().close()

    conn.connect_future.add_done_callback(close_late)
    stream = getattr(conn, "stream", None)
    if stream is not None:
        stream.close()


__all__ = ["GatewayChannels"]

"""A lean HTTP/1.1 transport under the SDKs' client, for model servers on plain HTTP.

The SDKs send through an ``httpx2.AsyncClient``; its default transport goes
through httpcore2, anyio and h11, about 0.4 ms of the daemon's CPU for every
model call, most of it for the generality a local server does not need.
:class:`LeanTransport` speaks HTTP/1.1 over asyncio streams directly: it
writes the request httpx built (method, target, headers, body), reads the
status line and headers, and hands httpx the body as it arrives, framed by
``transfer-encoding: chunked``, by ``content-length``, or by the connection's
end. What arrives is read a block at a time into the connection's buffer and
parsed there (one timeout per read from the socket). Connections are kept
alive (5 s idle, as httpx keeps them) and reused, one request at a time each,
once a body has been read to its end; an idle one is not read from, so that
anything its server sends unasked, or its close, is seen before reuse.

What stays the SDK's and httpx's: the request's building, auth, headers,
redirects, content decoding, status errors and the mapping of transport errors
(this transport raises httpx's own: ``ConnectError``, ``ReadTimeout``,
``RemoteProtocolError`` and their kin, which the SDKs turn into their
connection and timeout errors).

Only ``http://`` goes this way; any other scheme (a redirect to ``https``)
goes to httpx's own transport (without the environment's proxies: httpx
reads them only for a client it builds the transport of).
:func:`lean_transport_for` gives no transport where a proxy applies to the
base URL or it is not plain HTTP, and the SDK's client then keeps httpx's own.

What a head says (its status, headers and the body's framing) is read by
:mod:`recursa.models._http_head`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import select
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import cast
from urllib.parse import urlsplit

import httpx2

from recursa.environ import http_proxied
from recursa.models._http_head import (
    HEAD_END,
    LINE_END,
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    chunk_size,
    framing,
    headers_of,
    status_of,
)

MAX_INFORMATIONAL = 16
"""The most informational (1xx) responses taken before a response."""
READ_BYTES = 65_536
"""The most read from the socket at once."""
MAX_IDLE = 100
"""Idle connections kept per server (httpx keeps 100 in all). Connections in
use have no cap here (httpx's 1000, which a transport of one's own does not
get): a daemon makes one per model call running at once."""
KEEP_IDLE_SECONDS = 5.0
"""How long an idle connection is kept (httpx's own keep-alive expiry)."""


class _Connection:
    """One connection, with what has been read from it and not yet parsed.

    Bytes are read as they arrive, a block at a time, into ``buffer``, where
    the framing is parsed: one timeout per read from the socket, not one per
    line or chunk."""

    __slots__ = ("buffer", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = bytearray()
        self.idle_since = 0.0

    def usable(self) -> bool:
        """Whether an idle connection can take another request: the server has
        neither closed it nor sent anything unasked. Nothing is left over here
        or in the stream's buffer, and the socket has nothing to read (an idle
        connection's reading is paused, so what comes while it waits stays
        there, where this sees it)."""
        if self.buffer or self.reader.at_eof() or self.writer.is_closing():
            return False
        if getattr(self.reader, "_buffer", None):  # read by the loop, not by us
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        try:  # poll, not select: a daemon with many kernels has descriptors past 1024
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        self.writer.close()

    def pause(self) -> None:
        """Stop reading while idle (see :meth:`usable`)."""
        cast("asyncio.ReadTransport", self.writer.transport).pause_reading()

    def resume(self) -> None:
        cast("asyncio.ReadTransport", self.writer.transport).resume_reading()

    async def fill(self, seconds: float | None, request: httpx2.Request) -> bool:
        """Add what arrives next to the buffer (waiting up to ``seconds`` for
        it); False at the connection's end."""
        try:
            async with asyncio.timeout(seconds):
                data = await self.reader.read(READ_BYTES)
        except TimeoutError as exc:
            raise httpx2.ReadTimeout(f"no data within {seconds} s", request=request) from exc
        except OSError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        self.buffer += data
        return bool(data)

    async def until(
        self,
        end: re.Pattern[bytes],
        most: int,
        what: str,
        seconds: float | None,
        request: httpx2.Request,
    ) -> bytes | None:
        """The bytes before the next match of ``end`` (taken from the buffer
        with it); None if the connection ends before any byte. A
        RemoteProtocolError if ``what`` is longer than ``most`` bytes or is cut short."""
        searched = 0
        while (found := end.search(self.buffer, searched)) is None:
            if len(self.buffer) - 3 > most:  # up to 3 bytes may begin the terminator
                raise httpx2.RemoteProtocolError(f"{what} is over {most} bytes", request=request)
            searched = max(0, len(self.buffer) - 3)  # a match is at most 4 bytes
            if not await self.fill(seconds, request):
                if not self.buffer:
                    return None
                raise httpx2.RemoteProtocolError(f"{what} was cut short", request=request)
        if found.start() > most:
            raise httpx2.RemoteProtocolError(f"{what} is over {most} bytes", request=request)
        taken = bytes(self.buffer[: found.start()])
        del self.buffer[: found.end()]
        return taken

    def holds_line(self) -> bool:
        """Whether the buffer holds a whole line (the next one reads no socket)."""
        return LINE_END.search(self.buffer) is not None

    async def take(self, most: int, seconds: float | None, request: httpx2.Request) -> bytes:
        """Up to ``most`` bytes, as soon as any are there; b"" at the connection's end."""
        if not self.buffer and not await self.fill(seconds, request):
            return b""
        taken = bytes(self.buffer[:most])
        del self.buffer[:most]
        return taken


class LeanTransport(httpx2.AsyncBaseTransport):
    """HTTP/1.1 over asyncio streams, with kept-alive connections."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._other: httpx2.AsyncHTTPTransport | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme != "http":
            if self._other is None:
                self._other = httpx2.AsyncHTTPTransport()
            return await self._other.handle_async_request(request)
        if self._closed:
            raise httpx2.ConnectError("the transport is closed", request=request)
        timeouts = request.extensions.get("timeout", {})
        key = (url.host, url.port or 80)
        connection = self._take(key)
        if connection is None:
            connection = await _connect(key, timeouts.get("connect"), request)
        try:
            await _send(connection, request, timeouts.get("write"))
            version, status, reason, headers = await _read_head(
                connection, timeouts.get("read"), request
            )
            length, chunked, keep = framing(request, status, headers)
            keep = keep and version == b"HTTP/1.1"
        except httpx2.HTTPError:
            connection.close()
            raise
        except Exception as exc:  # a transport raises httpx's errors, whatever the server sent
            connection.close()
            raise httpx2.RemoteProtocolError(
                f"{type(exc).__name__}: {exc}", request=request
            ) from exc
        except BaseException:
            connection.close()
            raise
        body = _Body(self, key, connection, request, timeouts.get("read"), length, chunked, keep)
        return httpx2.Response(
            status,
            headers=headers,
            stream=body,
            extensions={"http_version": version, "reason_phrase": reason},
        )

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        self._expire()
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()  # the most recent first
            if connection.usable():
                connection.resume()
                return connection
            connection.close()
        return None

    def _give_back(self, key: tuple[str, int], connection: _Connection) -> None:
        self._expire()
        idle = self._idle.setdefault(key, [])
        if self._closed or len(idle) >= MAX_IDLE or not connection.usable():
            connection.close()
        else:
            connection.pause()
            connection.idle_since = self._clock()
            idle.append(connection)

    def _expire(self) -> None:
        """Close the connections idle for longer than :data:`KEEP_IDLE_SECONDS`,
        to every server (each list is oldest first)."""
        oldest = self._clock() - KEEP_IDLE_SECONDS
        for idle in self._idle.values():
            while idle and idle[0].idle_since < oldest:
                idle.pop(0).close()

    async def aclose(self) -> None:
        self._closed = True
        closing = [connection for idle in self._idle.values() for connection in idle]
        self._idle.clear()
        for connection in closing:
            connection.close()
        await asyncio.gather(*(c.writer.wait_closed() for c in closing), return_exceptions=True)
        if self._other is not None:
            await self._other.aclose()


class _Body(httpx2.AsyncByteStream):
    """A response's body as it arrives; the connection goes back to the pool
    once the body has been read to its end, and is closed otherwise."""

    def __init__(
        self,
        transport: LeanTransport,
        key: tuple[str, int],
        connection: _Connection,
        request: httpx2.Request,
        timeout: float | None,
        length: int | None,
        chunked: bool,
        keep: bool,
    ) -> None:
        self._transport = transport
        self._key = key
        self._connection: _Connection | None = connection
        self._request = request
        self._timeout = timeout
        self._length = length
        self._chunked = chunked
        self._keep = keep

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        request, seconds = self._request, self._timeout
        try:
            if self._chunked:
                async with contextlib.aclosing(_chunks(connection, seconds, request)) as pieces:
                    async for piece in pieces:
                        yield piece
            elif self._length is not None:
                left = self._length
                while left:
                    data = await _part(connection, left, seconds, request)
                    left -= len(data)
                    yield data
            else:
                while data := await connection.take(READ_BYTES, seconds, request):
                    yield data
        except BaseException:  # a failure, a cancellation, or the reader's aclose()
            self._drop()
            raise
        self._connection = None
        if self._keep:
            self._transport._give_back(self._key, connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        self._drop()

    def _drop(self) -> None:
        if self._connection is not None:
            self._connection.close()  # not read to its end: not reusable
            self._connection = None


async def _connect(
    key: tuple[str, int], seconds: float | None, request: httpx2.Request
) -> _Connection:
    try:
        async with asyncio.timeout(seconds):
            reader, writer = await asyncio.open_connection(*key)
    except TimeoutError as exc:
        raise httpx2.ConnectTimeout(
            f"connecting timed out after {seconds} s", request=request
        ) from exc
    except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA refuses
        raise httpx2.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
    sock = writer.get_extra_info("socket")
    if sock is not None:  # as the SDKs' own clients set it: a dead peer is found
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return _Connection(reader, writer)


async def _send(connection: _Connection, request: httpx2.Request, seconds: float | None) -> None:
    url = request.url
    target = url.raw_path or b"/"
    parts = [request.method.encode("ascii"), b" ", target, b" HTTP/1.1\r\n"]
    chunked = False
    for name, value in request.headers.raw:
        if b"\r" in name or b"\n" in name or b"\r" in value or b"\n" in value:
            raise httpx2.LocalProtocolError("a header holds a line break", request=request)
        if name.lower() == b"transfer-encoding" and value.lower() == b"chunked":
            chunked = True
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    try:
        body: bytes | None = request.content  # a body httpx holds whole: the SDKs' JSON
    except httpx2.RequestNotRead:
        body = None  # streamed: sent as it comes
    writer = connection.writer
    try:
        if body is not None:
            # The head and a body of up to a block in one write, so in one
            # segment: a server reads the request in one receive, not two. A
            # longer body is written after the head, not copied.
            if chunked:
                if body:
                    parts += (b"%x\r\n" % len(body), body, b"\r\n")
                parts.append(b"0\r\n\r\n")
            else:
                parts.append(body)
            if len(body) <= READ_BYTES:
                writer.write(b"".join(parts))
            else:
                for part in parts:  # not copied into one first
                    writer.write(part)
            if not writer.transport.get_write_buffer_size():
                return  # the socket took all of it: nothing to wait for
        async with asyncio.timeout(seconds):
            if body is None:
                writer.write(b"".join(parts))
                async for chunk in request.stream:  # type: ignore[union-attr]
                    if not chunk:
                        continue
                    if chunked:
                        writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                    else:
                        writer.write(chunk)
                if chunked:
                    writer.write(b"0\r\n\r\n")
            await writer.drain()
    except TimeoutError as exc:
        raise httpx2.WriteTimeout(f"sending timed out after {seconds} s", request=request) from exc
    except OSError as exc:
        raise httpx2.WriteError(str(exc) or type(exc).__name__, request=request) from exc


async def _read_head(
    connection: _Connection, seconds: float | None, request: httpx2.Request
) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    """The version, status, reason and headers of the response (up to
    :data:`MAX_INFORMATIONAL` informational ones skipped; each head up to
    :data:`MAX_HEAD_BYTES`, as h11 limits each)."""
    for _ in range(MAX_INFORMATIONAL + 1):
        head = await connection.until(
            HEAD_END, MAX_HEAD_BYTES, "the response's head", seconds, request
        )
        if head is None:
            raise httpx2.RemoteProtocolError(
                "Server disconnected without sending a response", request=request
            )
        version, status, reason, lines = status_of(head, request)
        if 100 <= status < 200 and status != 101:
            continue  # 100 Continue and kin: the response follows
        return version, status, reason, headers_of(lines, request)
    raise httpx2.RemoteProtocolError(
        f"over {MAX_INFORMATIONAL} informational responses before the response", request=request
    )


async def _chunks(
    connection: _Connection, seconds: float | None, request: httpx2.Request
) -> AsyncGenerator[bytes, None]:
    """A chunked body's data, then its trailers read and passed over.

    What several chunks already in the buffer hold is handed on as one piece
    (each piece passes through httpx's layers and the SDK's); what is held
    goes out before any wait for the socket, and before a framing error."""
    held: list[bytes] = []

    def hand_on() -> bytes:
        piece = b"".join(held)
        held.clear()
        return piece

    try:
        while True:
            if held and not connection.holds_line():
                yield hand_on()
            size = chunk_size(await _line(connection, seconds, request), request)
            if size == 0:
                break
            while size:
                if held and not connection.buffer:
                    yield hand_on()
                data = await _part(connection, size, seconds, request)
                size -= len(data)
                held.append(data)
            if held and not connection.holds_line():
                yield hand_on()
            if await _line(connection, seconds, request):
                raise httpx2.RemoteProtocolError("a chunk did not end", request=request)
    except httpx2.HTTPError:
        if held:
            yield hand_on()  # what arrived before the fault, first
        raise
    if held:
        yield hand_on()
    trailers = 0
    while line := await _line(connection, seconds, request, MAX_HEAD_BYTES):
        trailers += len(line) + 2
        if trailers > MAX_HEAD_BYTES:
            raise httpx2.RemoteProtocolError(
                f"the trailers are over {MAX_HEAD_BYTES} bytes", request=request
            )


async def _line(
    connection: _Connection,
    seconds: float | None,
    request: httpx2.Request,
    most: int = MAX_LINE_BYTES,
) -> bytes:
    """A line of the chunked framing (up to ``most`` bytes), without its line end."""
    line = await connection.until(LINE_END, most, "a chunk's line", seconds, request)
    if line is None:
        raise httpx2.RemoteProtocolError("the body was cut short", request=request)
    return line


async def _part(
    connection: _Connection, most: int, seconds: float | None, request: httpx2.Request
) -> bytes:
    """Up to ``most`` bytes of a framed body, as soon as any are there."""
    data = await connection.take(min(most, READ_BYTES), seconds, request)
    if not data:
        raise httpx2.RemoteProtocolError("the body was cut short", request=request)
    return data


def lean_transport_for(base_url: str | None) -> LeanTransport | None:
    """A :class:`LeanTransport` for a plain HTTP base URL that no proxy in the
    environment applies to; None otherwise (the SDK's client then keeps
    httpx's own transport, which honours proxies and TLS)."""
    if not base_url:
        return None
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    if http_proxied(parts.hostname):
        return None
    return LeanTransport()


__all__ = ["KEEP_IDLE_SECONDS", "MAX_HEAD_BYTES", "LeanTransport", "lean_transport_for"]

"""HTTP/1.1 over a unix socket, on asyncio's streams: the daemon client's wire.

The daemon client talks to one peer it knows (the daemon's uvicorn, over a
private socket): no TLS, no proxies, no redirects, no cookies, no pooling
across hosts. A general HTTP client (httpx2, with httpcore2, anyio and h11
behind it) costs a CLI call more to import than the call itself takes, so
this module speaks the little HTTP the client needs:

- one connection per request (``connection: close``): connecting to a unix
  socket costs microseconds, and no connection is ever reused after the
  daemon closed it (a stale keep-alive connection would turn a fresh request
  into a "dropped" one);
- a reply framed by ``content-length``, ``transfer-encoding: chunked``, or the
  end of the connection;
- timeouts as httpx applies them: ``connect`` bounds the connection, and
  ``timeout`` each read and write (a slow stream is fine while bytes come).

Failures are four exceptions the transport maps to its own
(:mod:`recursa.daemon.transport`): :class:`ConnectFailed` (nothing was sent),
:class:`ConnectTimedOut`, :class:`ReadTimedOut`, :class:`Broken` (the
connection broke or the reply was malformed: the request may have been
acted on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from recursa.daemon.framing import (
    MAX_HEAD_BYTES,
    chunk_size,
    content_length,
    is_chunked,
    parse_head,
)

READ_SIZE = 64 * 1024

T = TypeVar("T")


class ConnectFailed(Exception):
    """Nothing accepted the connection (no socket, or refused): nothing was sent."""


class ConnectTimedOut(Exception):
    """The socket did not accept the connection in time."""


class ReadTimedOut(Exception):
    """The peer sent nothing (or took nothing) for longer than the timeout."""


class Broken(Exception):
    """The connection broke, or the reply was not HTTP: the request may have been acted on."""


@dataclass(frozen=True, slots=True)
class Response:
    """A whole reply."""

    status_code: int
    headers: Mapping[str, str]
    """Names in lower case."""
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.content)


class StreamingResponse:
    """A reply whose body is read as it comes (:func:`stream`)."""

    def __init__(
        self,
        status_code: int,
        headers: Mapping[str, str],
        body: _Body,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.status_code = status_code
        self.headers = headers
        self._body = body
        self._writer = writer
        self.content = b""

    def close(self) -> None:
        """Close the connection now (a reader still in the body then sees it broken)."""
        self._writer.close()

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)

    async def aread(self) -> bytes:
        """The rest of the body (an error reply's, typically)."""
        parts = [piece async for piece in self._body.pieces()]
        self.content = b"".join(parts)
        return self.content

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines (``\\n``-separated, without it), decoded as UTF-8."""
        pending = b""
        async for piece in self._body.pieces():
            pending += piece
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace").rstrip("\r")
        if pending:
            yield pending.decode("utf-8", "replace").rstrip("\r")


async def request(
    socket: str,
    method: str,
    target: str,
    *,
    headers: Mapping[str, str],
    content: bytes | None,
    timeout: float | None,  # noqa: ASYNC109 -- per read and write, as httpx applies it
    connect_timeout: float,
) -> Response:
    """Send one request over a new connection to ``socket`` and read the whole reply."""
    async with stream(
        socket,
        method,
        target,
        headers=headers,
        content=content,
        timeout=timeout,
        connect_timeout=connect_timeout,
    ) as reply:
        body = await reply.aread()
        return Response(reply.status_code, reply.headers, body)


@contextlib.asynccontextmanager
async def stream(
    socket: str,
    method: str,
    target: str,
    *,
    headers: Mapping[str, str],
    content: bytes | None = None,
    timeout: float | None,  # noqa: ASYNC109 -- per read and write, as httpx applies it
    connect_timeout: float,
) -> AsyncIterator[StreamingResponse]:
    """Send one request over a new connection to ``socket``; the reply's status
    and headers, its body to be read within the block. The connection is
    closed when the block ends."""
    try:
        async with asyncio.timeout(connect_timeout):
            reader, writer = await asyncio.open_unix_connection(socket, limit=MAX_HEAD_BYTES)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
        raise ConnectFailed(str(exc)) from exc
    except TimeoutError:
        raise ConnectTimedOut() from None
    except OSError as exc:
        raise ConnectFailed(str(exc)) from exc
    try:
        head = [f"{method} {target} HTTP/1.1", "host: recursa", "connection: close"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        if content is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"content-length: {len(content or b'')}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (content or b""))
        await _timed(writer.drain(), timeout)
        status, reply_headers = await _read_head(reader, timeout)
        yield StreamingResponse(
            status, reply_headers, _Body(reader, reply_headers, timeout), writer
        )
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise Broken(str(exc)) from exc
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class _Body:
    """A reply's body as it arrives, framed by its headers."""

    def __init__(
        self, reader: asyncio.StreamReader, headers: Mapping[str, str], timeout: float | None
    ) -> None:
        self._reader = reader
        self._timeout = timeout
        self._chunked = is_chunked(headers)
        try:
            self._length = content_length(headers)
        except ValueError as exc:
            raise Broken(str(exc)) from None
        self._done = False

    async def pieces(self) -> AsyncIterator[bytes]:
        if self._done:
            return
        self._done = True
        try:
            if self._chunked:
                async for piece in self._chunks():
                    yield piece
            elif self._length is not None:
                left = self._length
                while left:
                    piece = await _timed(self._reader.read(min(left, READ_SIZE)), self._timeout)
                    if not piece:
                        raise Broken("the connection closed inside a reply")
                    left -= len(piece)
                    yield piece
            else:
                while piece := await _timed(self._reader.read(READ_SIZE), self._timeout):
                    yield piece
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise Broken(str(exc)) from exc

    async def _chunks(self) -> AsyncIterator[bytes]:
        reader, timeout = self._reader, self._timeout
        while True:
            size_line = await _timed(reader.readuntil(b"\r\n"), timeout)
            try:
                size = chunk_size(size_line[:-2])
            except ValueError as exc:
                raise Broken(str(exc)) from None
            if size == 0:
                # Trailers (none from uvicorn), up to the blank line.
                while (await _timed(reader.readuntil(b"\r\n"), timeout)) != b"\r\n":
                    pass
                return
            left = size
            while left:
                piece = await _timed(reader.read(min(left, READ_SIZE)), timeout)
                if not piece:
                    raise Broken("the connection closed inside a chunk")
                left -= len(piece)
                yield piece
            if await _timed(reader.readexactly(2), timeout) != b"\r\n":
                raise Broken("a chunk without its CRLF")


async def _read_head(
    reader: asyncio.StreamReader,
    timeout: float | None,  # noqa: ASYNC109 -- per read, as httpx applies it
) -> tuple[int, dict[str, str]]:
    """The status code and headers (names in lower case) of a reply."""
    head = await _timed(reader.readuntil(b"\r\n\r\n"), timeout)
    try:
        return parse_head(head[:-4])
    except ValueError as exc:
        raise Broken(str(exc)) from None


async def _timed(step: Awaitable[T], timeout: float | None) -> T:  # noqa: ASYNC109
    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
    # cancellation that arrives as the read completes, and a cancelled reader
    # (a view's worker, a Ctrl-C) must stop.
    try:
        async with asyncio.timeout(timeout):
            return await step
    except TimeoutError:
        raise ReadTimedOut() from None


__all__ = [
    "Broken",
    "ConnectFailed",
    "ConnectTimedOut",
    "ReadTimedOut",
    "Response",
    "StreamingResponse",
    "request",
    "stream",
]

"""HTTP/1.1 framing for the fake model server, on asyncio streams.

Just enough of the protocol for API clients: read a request (a
``Content-Length`` or chunked body), write a response head, a fixed-length
body, or a chunked body one chunk per event. No framework, so the bytes on
the wire are exactly the ones written here.

Writers report the monotonic time the last byte of a response was handed to
the socket (after ``drain()``), which benchmarks use as the response's end.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

MAX_HEAD = 1 << 16
"""The largest request head accepted (also the stream reader's buffer limit)."""

CLOSE_GRACE = 1.0
"""Seconds a graceful close may take before the connection is aborted."""

_REASONS = {529: "Site Overloaded"}  # Anthropic's overloaded status is not in HTTPStatus


@dataclass(frozen=True, slots=True)
class RawRequest:
    """A request as read: header names in lower case, the body as bytes."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


async def read_request(reader: asyncio.StreamReader) -> RawRequest | None:
    """The next request on a connection, or None when the client closed it between requests.

    Raises ``asyncio.IncompleteReadError`` for a request cut off midway and
    ``asyncio.LimitOverrunError`` for a head over :data:`MAX_HEAD`.
    """
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return RawRequest(method, target, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # the empty trailer section
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def response_head(status: int, headers: Sequence[tuple[str, str]]) -> bytes:
    """The status line and headers (a ``date`` header first), ending in a blank line."""
    reason = _REASONS.get(status) or HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}", f"date: {formatdate(usegmt=True)}"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def write_body(
    writer: asyncio.StreamWriter, status: int, headers: Sequence[tuple[str, str]], payload: bytes
) -> float:
    """A complete response with a ``content-length`` body; returns when its last byte went out."""
    head = response_head(status, [*headers, ("content-length", str(len(payload)))])
    writer.write(head + payload)
    await writer.drain()
    return time.monotonic()


async def write_chunked(
    writer: asyncio.StreamWriter,
    status: int,
    headers: Sequence[tuple[str, str]],
    events: Sequence[bytes],
    *,
    terminate: bool = True,
) -> float | None:
    """A chunked response, one chunk per event, drained after each.

    ``terminate=False`` leaves the body open (no zero-length chunk), for
    responses that stall or are cut off. Returns the time the terminating
    chunk went out, or None when the body was left open.
    """
    writer.write(response_head(status, [*headers, ("transfer-encoding", "chunked")]))
    for event in events:
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
    if not terminate:
        return None
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return time.monotonic()


def set_nodelay(writer: asyncio.StreamWriter) -> bool:
    """Turn off Nagle's algorithm on the connection; whether the socket reports it off.

    Without this a small write can wait ~40 ms for the peer's delayed ACK,
    which would dominate the latency of every streamed response.
    """
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def close(writer: asyncio.StreamWriter) -> None:
    """Close gracefully (flush what was written, then FIN); abort if that stalls."""
    writer.close()
    try:
        async with asyncio.timeout(CLOSE_GRACE):
            await writer.wait_closed()
    except (TimeoutError, ConnectionError):
        writer.transport.abort()
    except asyncio.CancelledError:
        writer.transport.abort()
        raise


__all__ = [
    "CLOSE_GRACE",
    "MAX_HEAD",
    "RawRequest",
    "close",
    "read_request",
    "response_head",
    "set_nodelay",
    "write_body",
    "write_chunked",
]

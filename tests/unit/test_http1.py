"""The daemon client's HTTP/1.1 (``recursa.daemon.http1``) against a raw unix
socket server that sends exactly the bytes each test gives it: the request as
written, replies framed by length, by chunks and by the connection's end, and
each failure as the exception the transport maps (the daemon's real server is
covered by tests/integration/test_daemon_transport.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recursa.daemon import http1


@contextlib.asynccontextmanager
async def server(path: Path, reply: bytes, *, close: bool = True) -> AsyncIterator[list[bytes]]:
    """A server on ``path`` that reads one request head (and its body), answers
    ``reply`` and closes (``close``) or goes silent; yields the requests seen."""
    seen: list[bytes] = []
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            seen.append(head + await reader.readexactly(length))
            writer.write(reply)
            await writer.drain()
            if not close:
                await asyncio.Event().wait()
        finally:
            writer.close()
            handlers.discard(task)

    unix = await asyncio.start_unix_server(handle, path=str(path))
    try:
        yield seen
    finally:
        unix.close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await unix.wait_closed()


async def get(path: Path, *, content: bytes | None = None, timeout: float = 5) -> http1.Response:
    return await http1.request(
        str(path),
        "POST" if content is not None else "GET",
        "/v1/x?a=1",
        headers={"authorization": "Bearer t"},
        content=content,
        timeout=timeout,
        connect_timeout=5,
    )


async def test_a_request_is_written_whole_and_a_sized_reply_read(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    reply = b'HTTP/1.1 201 Created\r\nContent-Length: 8\r\nX-A: b\r\n\r\n{"a": 1}'
    async with server(sock, reply) as seen:
        response = await get(sock, content=b'{"k":"v"}')
    [request] = seen
    head, body = request.split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v1/x?a=1 HTTP/1.1"
    assert b"authorization: Bearer t" in head and b"connection: close" in head
    assert b"content-length: 9" in head and body == b'{"k":"v"}'
    assert (response.status_code, response.is_success, response.json()) == (201, True, {"a": 1})
    assert response.headers["x-a"] == "b"


async def test_a_chunked_reply_is_read_as_lines(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"6\r\none\ntw\r\n"
        b"a;ext=1\r\no\nthree\nfo\r\n"
        b"2\r\nur\r\n"
        b"0\r\n\r\n"
    )
    async with (
        server(sock, reply),
        http1.stream(
            str(sock), "GET", "/v1/s", headers={}, timeout=5, connect_timeout=5
        ) as response,
    ):
        lines = [line async for line in response.aiter_lines()]
    assert response.status_code == 200
    assert lines == ["one", "two", "three", "four"]


async def test_a_reply_without_length_ends_with_the_connection(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    async with server(sock, b"HTTP/1.1 404 Not Found\r\n\r\nno such thing"):
        response = await get(sock)
    assert (response.status_code, response.is_success, response.text) == (
        404,
        False,
        "no such thing",
    )


async def test_failures_are_told_apart(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    with pytest.raises(http1.ConnectFailed):  # nothing there: nothing was sent
        await get(sock)
    async with server(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"):
        with pytest.raises(http1.Broken):  # cut inside the body
            await get(sock)
    async with server(sock, b"SSH-2.0-OpenSSH\r\n\r\n"):
        with pytest.raises(http1.Broken):  # not HTTP
            await get(sock)
    async with server(sock, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nslow", close=False):
        with pytest.raises(http1.ReadTimedOut):  # nothing more comes
            await get(sock, timeout=0.05)


async def test_negative_sizes_are_broken_replies(tmp_path: Path) -> None:
    sock = tmp_path / "s"
    async with server(sock, b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nabcdef"):
        with pytest.raises(http1.Broken, match="content-length"):
            await get(sock)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nabcde\r\n0\r\n\r\n"
    async with server(sock, chunked):
        with pytest.raises(http1.Broken, match="chunk size"):
            await get(sock)

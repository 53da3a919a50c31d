"""The lean HTTP/1.1 transport (recursa.models._http) on real loopback sockets:
it reads every framing a server uses as httpx's own transport does (and
refuses what that one refuses),
keeps connections alive and reuses only a connection read to its end, and
raises httpx's own errors for what a server gets wrong."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import re
import resource
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx2
import pytest

from recursa.config import Config, ProviderConfig
from recursa.models import _http
from recursa.models._http import MAX_HEAD_BYTES, LeanTransport, lean_transport_for
from recursa.models.anthropic import AnthropicProvider
from recursa.models.openai import OpenAIProvider

Reply = Callable[[bytes, bytes], bytes | None]
"""A canned server: (request head, request body) -> raw response bytes; None
hangs up without answering."""


@dataclass
class Server:
    """A loopback HTTP server with canned replies; it counts connections and
    keeps each request's head and body."""

    reply: Reply
    connections: int = 0
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    close_after: bool = False
    """Close each connection after its first reply."""
    dribble: bool = False
    """Send each reply a byte at a time."""
    port: int = 0
    hung_up: asyncio.Queue[None] = field(default_factory=asyncio.Queue)
    """One item for each connection this side has closed."""

    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                body = await _request_body(reader, head)
                self.requests.append((head, body))
                answer = self.reply(head, body)
                if answer is None:
                    return
                if self.dribble:  # a byte at a time, each sent on its own
                    for k in range(len(answer)):
                        writer.write(answer[k : k + 1])
                        await writer.drain()
                        await asyncio.sleep(0)
                else:
                    writer.write(answer)
                    await writer.drain()
                if self.close_after:
                    return
        finally:
            writer.close()
            await writer.wait_closed()
            self.hung_up.put_nowait(None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/things?x=1"


async def _request_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    if re.search(rb"(?i)\r\ntransfer-encoding: *chunked", head):
        body = b""
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)
        return body
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    return await reader.readexactly(int(length[1])) if length else b""


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Reply], Awaitable[Server]]]:
    listeners: list[tuple[asyncio.Server, Server]] = []

    async def start(reply: Reply) -> Server:
        server = Server(reply)
        listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        server.port = listener.sockets[0].getsockname()[1]
        listeners.append((listener, server))
        return server

    yield start
    for listener, server in listeners:
        listener.close()
        await listener.wait_closed()
        # Each handler ends once its client has closed the connection.
        await asyncio.gather(*server.handlers)


def lean() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=LeanTransport(), timeout=5)


def usual() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(), timeout=5)


def canned(raw: bytes) -> Reply:
    return lambda head, body: raw


GZIPPED = gzip.compress(b"squeezed " * 50)
REPLIES = {
    "content-length": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\n\r\nhello",
    "chunked, extensions and trailers": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: t\r\n\r\n"
    ),
    "server-sent events, chunked": (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
        b'10\r\ndata: {"a": 1}\n\n\r\n'
        b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    ),
    "no content": b"HTTP/1.1 204 No Content\r\n\r\n",
    "an informational reply first": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok"
    ),
    "gzip-encoded": (
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%b"
        % (len(GZIPPED), GZIPPED)
    ),
    "bare LF line ends": b"HTTP/1.1 200 OK\ncontent-length: 2\n\nok",
    "a folded header": b"HTTP/1.1 200 OK\r\na: 1\r\n b\r\ncontent-length: 2\r\n\r\nok",
    "not modified, with a length and no body": (
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n"
    ),
    "HTTP/1.0, framed by its length": b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    "a status error": (
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\ncontent-length: 2\r\n\r\n{}"
    ),
}


@pytest.mark.parametrize("name", list(REPLIES))
async def test_each_framing_reads_as_httpx_reads_it(
    serve: Callable[[Reply], Awaitable[Server]], name: str
) -> None:
    server = await serve(canned(REPLIES[name]))
    seen = []
    for make in (lean, usual):
        async with make() as client:
            response = await client.post(server.url, json={"q": "x" * 300})
            seen.append(
                (
                    response.status_code,
                    response.http_version,
                    response.headers.multi_items(),
                    response.content,
                )
            )
    assert seen[0] == seen[1]
    # And the server got the same request from both, byte for byte but the
    # user agent's line (both httpx's) and the order httpx gives.
    (lean_head, lean_body), (usual_head, usual_body) = server.requests[:2]
    assert lean_body == usual_body == b'{"q":"' + b"x" * 300 + b'"}'
    assert lean_head == usual_head


@pytest.mark.parametrize("name", list(REPLIES))
async def test_a_reply_that_arrives_a_byte_at_a_time_reads_the_same(
    serve: Callable[[Reply], Awaitable[Server]], name: str
) -> None:
    server = await serve(canned(REPLIES[name]))
    async with lean() as client:
        whole = await client.get(server.url)
        server.dribble = True
        dribbled = await client.get(server.url)
    assert (dribbled.status_code, dribbled.headers, dribbled.content) == (
        whole.status_code,
        whole.headers,
        whole.content,
    )
    if not REPLIES[name].startswith(b"HTTP/1.0"):
        assert server.connections == 1  # and the connection was still reusable


async def test_a_body_framed_by_the_connections_end_is_read_to_it(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(b"HTTP/1.1 200 OK\r\n\r\nuntil the end"))
    server.close_after = True
    async with lean() as client:
        first = await client.get(server.url)
        second = await client.get(server.url)
    assert first.content == second.content == b"until the end"
    assert server.connections == 2  # such a connection is never reused


async def test_an_http_1_0_connection_is_not_kept(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"))
    async with lean() as client:  # the server would keep it: this side does not
        assert (await client.get(server.url)).content == b"ok"
        assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


async def test_a_connection_read_to_its_end_is_reused(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(REPLIES["server-sent events, chunked"]))
    async with lean() as client:
        for _ in range(5):
            async with client.stream("POST", server.url, content=b"{}") as response:
                assert b"[DONE]" in b"".join([c async for c in response.aiter_bytes()])
    assert server.connections == 1
    assert len(server.requests) == 5


async def test_a_body_left_unread_or_a_close_header_costs_the_connection(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(REPLIES["chunked, extensions and trailers"]))
    async with lean() as client:
        async with client.stream("GET", server.url) as response:
            async for _ in response.aiter_raw():
                break  # one piece, then closed
        assert (await client.get(server.url)).content == b"hello 0123456789"
        assert server.connections == 2
    closing = await serve(
        canned(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\nx")
    )
    async with lean() as client:
        await client.get(closing.url)
        await client.get(closing.url)
    assert closing.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_used(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(REPLIES["content-length"]))
    server.close_after = True  # each connection closes once answered
    async with lean() as client:
        for _ in range(3):
            response = await client.get(server.url)
            assert response.content == b"hello"
            # The server has closed it, whether or not this side's event
            # loop has noticed yet.
            await server.hung_up.get()
    assert server.connections == 3


@pytest.mark.parametrize("pieces", [(b"one ", b"two"), ()])
async def test_a_streamed_body_read_before_sending_is_still_sent_chunked(
    serve: Callable[[Reply], Awaitable[Server]], pieces: tuple[bytes, ...]
) -> None:
    # httpx keeps the chunked header of a body read whole; it goes in one write.
    server = await serve(canned(REPLIES["content-length"]))

    async def parts() -> AsyncIterator[bytes]:
        for part in pieces:
            yield part

    async with lean() as client:
        request = client.build_request("POST", server.url, content=parts())
        await request.aread()
        assert (await client.send(request)).content == b"hello"
    head, body = server.requests[0]
    assert b"\r\nTransfer-Encoding: chunked" in head and body == b"".join(pieces)


async def test_a_body_past_the_socket_buffers_is_sent_whole_or_times_out(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    big = bytes(range(256)) * (32 * 1024)  # 8 MiB: the write waits for the reader
    server = await serve(canned(REPLIES["content-length"]))
    async with lean() as client:
        assert (await client.post(server.url, content=big)).content == b"hello"
    assert server.requests[0][1] == big
    # A server that takes the connection and reads nothing: the write times out.
    stop = asyncio.Event()

    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stop.wait()
        writer.close()

    listener = await asyncio.start_server(deaf, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async with httpx2.AsyncClient(
            transport=LeanTransport(), timeout=httpx2.Timeout(5, write=0.2)
        ) as client:
            with pytest.raises(httpx2.WriteTimeout):
                await client.post(f"http://127.0.0.1:{port}/", content=big * 4)
    finally:
        stop.set()
        listener.close()
        await listener.wait_closed()


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


async def test_chunks_that_arrive_together_are_handed_on_as_one_piece(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(CHUNKED_HEAD + b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"))
    async with lean() as client, client.stream("GET", server.url) as response:
        assert [piece async for piece in response.aiter_raw()] == [b"abcdef"]
    # What came before a framing error is handed on before the error.
    server = await serve(canned(CHUNKED_HEAD + b"3\r\nabc\r\nzz\r\nabc\r\n0\r\n\r\n"))
    pieces: list[bytes] = []

    async def read_all(response: httpx2.Response) -> None:
        async for piece in response.aiter_raw():
            pieces.append(piece)

    async with lean() as client, client.stream("GET", server.url) as response:
        with pytest.raises(httpx2.RemoteProtocolError):
            await read_all(response)
    assert pieces == [b"abc"]


async def test_a_chunk_is_handed_on_without_waiting_for_the_next() -> None:
    # The server sends the second chunk only once the client has the first.
    got_first = asyncio.Event()

    async def one_then_another(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(CHUNKED_HEAD + b"3\r\nabc\r\n3\r")  # and part of the next line
        await got_first.wait()
        writer.write(b"\ndef\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(one_then_another, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    pieces: list[bytes] = []
    try:
        url = f"http://127.0.0.1:{port}/"
        async with asyncio.timeout(5), lean() as client, client.stream("GET", url) as response:
            async for piece in response.aiter_raw():
                pieces.append(piece)
                got_first.set()
    finally:
        listener.close()
        await listener.wait_closed()
    assert pieces == [b"abc", b"def"]


async def test_a_repeated_content_length_that_agrees_is_one_length(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(b"HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\n\r\nabc"))
    async with lean() as client:
        assert (await client.get(server.url)).content == b"abc"
        assert (await client.get(server.url)).content == b"abc"
    assert server.connections == 1


async def test_a_chunked_request_body_is_sent_chunked(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(REPLIES["content-length"]))

    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one ", b"", b"two"):
            yield part

    async with lean() as client:
        await client.post(server.url, content=parts())
    head, body = server.requests[0]
    assert b"\r\nTransfer-Encoding: chunked" in head
    assert body == b"one two"


BROKEN = {
    "not HTTP": (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1 status line"),
    "a header without a colon": (b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "malformed header"),
    "a space before a header's colon": (
        b"HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\nok",
        "malformed header",
    ),
    "a bad chunk size": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        "malformed chunk size",
    ),
    "a chunk longer than its size": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
        "a chunk did not end",
    ),
    "a body cut short": (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello", "cut short"),
    "a chunked body cut short": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
        "cut short",
    ),
    "a length with more digits than any body": (
        b"HTTP/1.1 200 OK\r\ncontent-length: " + b"9" * 5000 + b"\r\n\r\n",
        "malformed content-length",
    ),
    "lengths that disagree": (
        b"HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\nabcd",
        "conflicting content-length",
    ),
    "two length headers that disagree": (
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 3\r\n\r\nabcde",
        "conflicting content-length",
    ),
    "a length that is not a number": (
        b"HTTP/1.1 200 OK\r\ncontent-length: 3a\r\n\r\nabc",
        "malformed content-length",
    ),
    "two transfer-encoding headers": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
        b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        "more than one transfer-encoding",
    ),
    "another transfer coding": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 2\r\n\r\nok",
        "unsupported transfer-encoding",
    ),
    "a chunk line over the limit": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;" + b"x" * 5000 + b"\r\n",
        "over 4096 bytes",
    ),
    "a head over the limit": (
        b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (2 * MAX_HEAD_BYTES) + b"\r\n\r\n",
        f"over {MAX_HEAD_BYTES} bytes",
    ),
}


@pytest.mark.parametrize("name", list(BROKEN))
async def test_a_malformed_response_is_a_remote_protocol_error(
    serve: Callable[[Reply], Awaitable[Server]], name: str
) -> None:
    raw, said = BROKEN[name]
    server = await serve(canned(raw))
    server.close_after = True
    async with usual() as client:  # which httpx's own transport refuses too
        with pytest.raises(httpx2.TransportError):
            await client.get(server.url)
    async with lean() as client:
        with pytest.raises(httpx2.RemoteProtocolError, match=said):
            await client.get(server.url)
        # The next request is unharmed, on a connection of its own.
        server.reply = canned(REPLIES["content-length"])
        assert (await client.get(server.url)).content == b"hello"


async def test_a_head_request_has_no_body_and_keeps_its_connection(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(canned(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"))
    seen = []
    for make in (lean, usual):
        async with make() as client:
            first = await client.head(server.url)
            second = await client.head(server.url)
            seen.append((first.status_code, first.content, second.content))
    assert seen[0] == seen[1] == (200, b"", b"")
    assert server.connections == 2  # one for each transport


async def test_a_body_cancelled_or_stalled_midway_costs_only_its_connection(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    begun = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
    server = await serve(canned(begun))  # and then nothing more, the connection open
    async with httpx2.AsyncClient(transport=LeanTransport(), timeout=0.2) as client:
        got = asyncio.Event()

        async def read() -> None:
            async with client.stream("GET", server.url) as response:
                async for _ in response.aiter_raw():
                    got.set()

        task = asyncio.create_task(read())
        await got.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with client.stream("GET", server.url) as response:
            with pytest.raises(httpx2.ReadTimeout):
                async for _ in response.aiter_raw():
                    pass
        server.reply = canned(REPLIES["content-length"])
        assert (await client.get(server.url)).content == b"hello"
    assert server.connections == 3  # neither broken connection was reused


async def test_descriptors_past_1024_are_no_trouble(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    # A daemon with many kernels holds many sockets: select() cannot take a
    # descriptor past 1024; the idle check must not use it.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2048)), hard))
    spare: list[int] = []
    try:
        while len(spare) < 1100:
            spare.append(os.open(os.devnull, os.O_RDONLY))
        server = await serve(canned(REPLIES["content-length"]))
        async with lean() as client:
            for _ in range(3):
                assert (await client.get(server.url)).content == b"hello"
        assert server.connections == 1
    finally:
        for fd in spare:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_connection_idle_past_the_keep_alive_time_is_not_reused(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    now = [1000.0]
    server = await serve(canned(REPLIES["content-length"]))
    transport = LeanTransport(clock=lambda: now[0])
    async with httpx2.AsyncClient(transport=transport, timeout=5) as client:
        await client.get(server.url)
        now[0] += _http.KEEP_IDLE_SECONDS - 1
        await client.get(server.url)
        assert server.connections == 1
        now[0] += _http.KEEP_IDLE_SECONDS + 1
        await client.get(server.url)
    assert server.connections == 2


async def test_an_expired_connection_is_closed_whichever_server_is_asked_next(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    now = [1000.0]
    first = await serve(canned(REPLIES["content-length"]))
    second = await serve(canned(REPLIES["content-length"]))
    transport = LeanTransport(clock=lambda: now[0])
    async with httpx2.AsyncClient(transport=transport, timeout=5) as client:
        await client.get(first.url)
        now[0] += _http.KEEP_IDLE_SECONDS + 1
        await client.get(second.url)
        # The first server's idle connection was closed by that request.
        await first.hung_up.get()
        assert second.hung_up.empty()


async def test_a_reply_nobody_asked_for_is_never_taken_for_the_next_one() -> None:
    # A server that sends a second reply after the first, unasked: the
    # connection it came on is not used again, wherever the stray bytes wait.
    asked = asyncio.Event()
    stray_sent = asyncio.Event()
    connections = 0
    handlers: list[asyncio.Task[None] | None] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        handlers.append(asyncio.current_task())
        connections += 1
        number = connections
        try:
            await reader.readuntil(b"\r\n\r\n")
            body = b"first" if number == 1 else b"again"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n" + body)
            await writer.drain()
            if number == 1:
                await asked.wait()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nSTALE")
                await writer.drain()
                stray_sent.set()
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                await reader.readuntil(b"\r\n\r\n")  # until the client closes it
        finally:
            writer.close()

    listener = await asyncio.start_server(handler, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/"
    transport = LeanTransport()
    try:
        async with httpx2.AsyncClient(transport=transport, timeout=5) as client:
            assert (await client.get(url)).content == b"first"
            # While idle, its reading is paused: what comes stays in the
            # socket, where the check before reuse sees it.
            [idle] = [c for kept in transport._idle.values() for c in kept]
            assert not cast("asyncio.ReadTransport", idle.writer.transport).is_reading()
            asked.set()
            await stray_sent.wait()  # the event loop runs: it may read them, or not
            assert (await client.get(url)).content == b"again"
    finally:
        listener.close()
        await listener.wait_closed()
        await asyncio.gather(*(task for task in handlers if task is not None))
    assert connections == 2


async def test_a_connection_header_is_read_as_tokens(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(
        canned(
            b"HTTP/1.1 200 OK\r\nconnection: keep-alive, x-notclose\r\ncontent-length: 1\r\n\r\nx"
        )
    )
    async with lean() as client:
        await client.get(server.url)
        await client.get(server.url)
    assert server.connections == 1


async def test_too_many_informational_replies_or_trailers_are_refused(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    continues = b"HTTP/1.1 100 Continue\r\n\r\n" * (_http.MAX_INFORMATIONAL + 1)
    trailers = b"x-t: 1234567890\r\n" * (MAX_HEAD_BYTES // 17 + 1)
    cases = {
        continues + REPLIES["content-length"]: "informational responses",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n"
        + trailers
        + b"\r\n": "trailers are over",
    }
    for raw, said in cases.items():
        server = await serve(canned(raw))
        async with lean() as client:
            with pytest.raises(httpx2.RemoteProtocolError, match=said):
                await client.get(server.url)
    # Within the limits, both are read.
    server = await serve(canned(b"HTTP/1.1 100 Continue\r\n\r\n" * 3 + REPLIES["content-length"]))
    async with lean() as client:
        assert (await client.get(server.url)).content == b"hello"


async def test_a_server_that_hangs_up_or_is_not_there_raises_httpxs_errors(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    server = await serve(lambda head, body: None)
    async with lean() as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="Server disconnected"):
            await client.get(server.url)
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{_closed_port()}/")


async def test_a_silent_server_is_a_read_timeout(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    answered = asyncio.Event()

    def never(head: bytes, body: bytes) -> bytes | None:
        answered.set()
        return b""  # says nothing, keeps the connection

    server = await serve(never)
    async with httpx2.AsyncClient(transport=LeanTransport(), timeout=0.2) as client:
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(server.url)
    assert answered.is_set()


async def test_other_schemes_go_to_httpxs_own_transport(
    serve: Callable[[Reply], Awaitable[Server]],
) -> None:
    transport = LeanTransport()
    async with httpx2.AsyncClient(transport=transport, timeout=5) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"https://127.0.0.1:{_closed_port()}/")
    assert isinstance(transport._other, httpx2.AsyncHTTPTransport)


def test_the_lean_transport_is_for_plain_http_that_no_proxy_covers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(lean_transport_for("http://127.0.0.1:8080/v1"), LeanTransport)
    assert lean_transport_for("https://api.openai.com/v1") is None
    assert lean_transport_for(None) is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert lean_transport_for("http://models.example:8080/v1") is None
    monkeypatch.setenv("NO_PROXY", "other.example, models.example")
    assert isinstance(lean_transport_for("http://models.example:8080/v1"), LeanTransport)
    monkeypatch.setenv("NO_PROXY", ".example")  # a domain: left to httpx's own matching
    assert lean_transport_for("http://models.example:8080/v1") is None


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_both_providers_use_it_for_a_local_server_only(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    provider_class = OpenAIProvider if kind == "openai" else AnthropicProvider
    seen = {}
    for url in ("http://127.0.0.1:8080/v1", "https://models.example/v1"):
        table = ProviderConfig(name=kind, kind=kind, base_url=url, api_key="k")  # type: ignore[arg-type]
        provider = provider_class(table, Config(home=tmp_path))
        # The SDK client's httpx client, and the transport under it.
        seen[url] = type(provider._client._client._transport)
    assert seen == {
        "http://127.0.0.1:8080/v1": LeanTransport,
        "https://models.example/v1": httpx2.AsyncHTTPTransport,
    }

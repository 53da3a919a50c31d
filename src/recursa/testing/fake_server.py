"""A loopback HTTP/1.1 server that speaks OpenAI and Anthropic streaming, for tests.

``FakeModelServer`` answers ``POST /v1/chat/completions`` (OpenAI Chat
Completions) and ``POST /v1/messages`` (Anthropic Messages) the way the real
APIs do, byte for byte where it matters to a client: chunked transfer
encoding, keep-alive, ``text/event-stream`` events, real error bodies and
status codes. Tests point the real SDKs and the real adapters at it.

Scripting: every model request takes the next item of one queue shared by
both APIs, a :class:`Reply` or a :class:`Fault`. When the queue is empty the
``responder`` (a callable ``(path, body) -> Reply | Fault``) decides; without
one the answer is a text reply saying :data:`EXHAUSTED_TEXT`. Requests that
are not model calls (unknown paths, bodies that are not JSON) are answered
with an error and consume nothing. ::

    async with FakeModelServer([
        Reply(text="Hi!", tool_calls=[ToolCallSpec("python", {"code": "x = 1"})]),
        Fault("rate_limit", retry_after=0),
    ]) as server:
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="k")
        ...
        assert server.requests[0].body["model"] == "gpt-4o-mini"

For synchronous tests (a CLI in a subprocess) ``with FakeModelServer.in_thread(...)``
runs the same server on its own event loop in a thread. From another process:
``python -m recursa.testing.fake_server --script FILE.json --port-file FILE``.

Every request is recorded in :attr:`FakeModelServer.requests` with its
monotonic receive time (when its last byte was read, before the server parses
it: a benchmark's step ends there); ``finished_at`` is the monotonic time the last byte
of its response was written, and ``disconnected`` says the client went away
mid-response. Tests wait for such states without sleeping:
``await server.wait_for(predicate)`` (async form, under ``asyncio.timeout``)
or ``server.wait_until(predicate, timeout)`` (thread form). Stopping closes
every connection, including requests held open by a ``timeout`` fault or a
``stall_after`` reply, and never hangs.

The framing lives in :mod:`recursa.testing.fake_http`, the vendor formats in
:mod:`recursa.testing.fake_wire`, the script values in
:mod:`recursa.testing.fake_script`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recursa.testing import fake_http, fake_wire
from recursa.testing.fake_script import (
    EXHAUSTED_TEXT,
    Fault,
    FaultKind,
    Reply,
    Responder,
    ScriptItem,
    ToolCallSpec,
    estimate_usage,
    load_script,
)
from recursa.testing.fake_wire import Vendor

ROUTES: dict[str, Vendor] = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}

_THREAD_JOIN = 10.0
_STREAM_FAULT_TEXT = "This stream is cut short before its end, as the script asked."


@dataclass(slots=True)
class RecordedRequest:
    """One request as the server read it. ``headers`` has lower-case names;
    ``body`` is the parsed JSON (None when the body is not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float
    connection: int = 0
    """Which accepted connection carried the request (1, 2, ...): equal numbers
    mean a kept-alive connection was reused."""
    vendor: Vendor | None = None
    tcp_nodelay: bool = False
    """Whether the server's socket had TCP_NODELAY set (read back from the socket)."""
    answer: ScriptItem | None = None
    finished_at: float | None = None
    disconnected: bool = False
    """True when the client went away before the response was complete."""

    @property
    def streamed(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


class FakeModelServer:
    """The fake server. Use ``async with`` (current loop) or :meth:`in_thread`."""

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        responder: Responder | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self._script: deque[ScriptItem] = deque(script)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._async_changed: asyncio.Event | None = None
        self._connections = itertools.count(1)

    # --- scripting and inspection -------------------------------------------------

    def push(self, *items: ScriptItem) -> None:
        """Append items to the script (safe from any thread)."""
        with self._lock:
            self._script.extend(items)

    @property
    def remaining(self) -> int:
        """Script items not yet used."""
        with self._lock:
            return len(self._script)

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the fake server is not running")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The base URL for an OpenAI client (ends in ``/v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The base URL for an Anthropic client (the SDK adds ``/v1/messages``)."""
        return self.url

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait, in the server's own loop, until ``predicate()`` holds; it is checked
        again whenever a request changes state. Bound it with ``asyncio.timeout``."""
        while not predicate():
            event = self._async_changed = self._async_changed or asyncio.Event()
            await event.wait()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """:meth:`wait_for` for the thread-hosted form, from a synchronous caller."""
        with self._changed:
            if not self._changed.wait_for(predicate, timeout):
                raise TimeoutError("the fake server did not reach the awaited state")

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
        event, self._async_changed = self._async_changed, None
        if event is not None:
            event.set()

    def _next_item(self, path: str, body: dict[str, Any]) -> ScriptItem:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(path, body)
        return Reply(text=EXHAUSTED_TEXT)

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the host and port (0 picks a free port)."""
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=fake_http.MAX_HEAD
        )

    async def stop(self) -> None:
        """Stop listening, drop every connection (held ones too) and wait for the handlers."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def __aenter__(self) -> FakeModelServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @classmethod
    @contextlib.contextmanager
    def in_thread(
        cls,
        script: Iterable[ScriptItem] = (),
        *,
        responder: Responder | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> Iterator[FakeModelServer]:
        """Run a server on its own event loop in a daemon thread while the block runs."""
        server = cls(script, responder=responder, host=host, port=port)
        ready = threading.Event()
        failure: list[BaseException] = []
        stop: list[Callable[[], None]] = []

        async def host_server() -> None:
            stopped = asyncio.Event()
            loop = asyncio.get_running_loop()
            try:
                await server.start()
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            stop.append(lambda: _call_soon(loop, stopped.set))
            ready.set()
            await stopped.wait()
            await server.stop()

        thread = threading.Thread(
            target=asyncio.run, args=(host_server(),), name="fake-model-server", daemon=True
        )
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            raise failure[0]
        try:
            yield server
        finally:
            stop[0]()
            thread.join(_THREAD_JOIN)
            if thread.is_alive():
                raise RuntimeError("the fake server thread did not stop")

    # --- serving ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: answer requests until the client closes it or asks to."""
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        nodelay = fake_http.set_nodelay(writer)
        connection = next(self._connections)
        try:
            while True:
                raw = await fake_http.read_request(reader)
                received_at = time.monotonic()  # the last byte is in; parsing it is ours
                if raw is None:
                    break
                request = self._record(raw, received_at, connection, nodelay)
                exchange = _Exchange(request, reader, writer, raw.keep_alive)
                try:
                    keep_alive = await self._answer(exchange)
                except ConnectionError:
                    request.disconnected = True
                    raise
                self._notify()
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away or sent something unreadable
        except asyncio.CancelledError:
            pass  # stop() cancels handlers; ending quietly is the point
        finally:
            self._writers.discard(writer)
            self._handlers.discard(task)
            await fake_http.close(writer)
            self._notify()

    def _record(
        self, raw: fake_http.RawRequest, received_at: float, connection: int, nodelay: bool
    ) -> RecordedRequest:
        try:
            body: Any = json.loads(raw.body) if raw.body else None
        except ValueError:
            body = None
        request = RecordedRequest(
            method=raw.method,
            path=raw.path,
            headers=raw.headers,
            body=body,
            received_at=received_at,
            connection=connection,
            vendor=ROUTES.get(raw.path),
            tcp_nodelay=nodelay,
        )
        self.requests.append(request)
        return request

    async def _answer(self, ex: _Exchange) -> bool:
        """Write the response to one request; whether the connection stays open."""
        request, vendor = ex.request, ex.request.vendor
        if vendor is None or request.method != "POST":
            status, payload = fake_wire.not_found(vendor, request.method, request.path)
            return await ex.send_json(status, payload)
        body = request.body
        if not isinstance(body, dict):
            return await ex.send_json(400, fake_wire.invalid_json(vendor))
        item = self._next_item(request.path, body)
        request.answer = item
        if isinstance(item, Fault):
            return await self._fault(ex, vendor, body, item)
        usage = item.usage or estimate_usage(body, item)
        if item.delay:
            await asyncio.sleep(item.delay)
        if not request.streamed:
            return await ex.send_json(200, fake_wire.whole_answer(vendor, item, body, usage))
        events = fake_wire.stream_events(vendor, item, body, usage)
        if item.stall_after is None:
            return await ex.send_stream(events)
        await ex.send_stream(events[: item.stall_after], terminate=False)
        await self._hold(ex)
        return False

    async def _fault(
        self, ex: _Exchange, vendor: Vendor, body: dict[str, Any], fault: Fault
    ) -> bool:
        if fault.kind == "timeout":
            await self._hold(ex)
            return False
        if fault.kind in ("truncated", "incomplete", "garbled", "stream_error"):
            return await self._broken(ex, vendor, body, fault)
        status, extra, payload = fake_wire.error_answer(vendor, fault, ex.request.headers)
        return await ex.send_json(status, payload, extra)

    async def _broken(
        self, ex: _Exchange, vendor: Vendor, body: dict[str, Any], fault: Fault
    ) -> bool:
        """A 200 answer that goes wrong: cut mid-body, ended early, garbled, or
        interrupted by an error event."""
        reply = Reply(text=_STREAM_FAULT_TEXT)
        usage = estimate_usage(body, reply)
        if ex.request.streamed:
            events = fake_wire.stream_events(vendor, reply, body, usage)
            if fault.kind == "garbled":
                events[1] = fake_wire.garbled_event(vendor)
                return await ex.send_stream(events)
            part = events[: max(2, len(events) // 2)]
            if fault.kind == "stream_error":
                return await ex.send_stream(
                    [*part, fake_wire.stream_error_event(vendor, fault.message)]
                )
            if fault.kind == "incomplete":  # a clean end of body, minus the tail
                return await ex.send_stream(part)
            await ex.send_stream(part, terminate=False)
            return False  # hang up mid-body
        payload = fake_wire.whole_answer(vendor, reply, body, usage)
        half = payload[: len(payload) // 2]
        if fault.kind == "stream_error":  # without a stream, it is a plain 500
            status, extra, error = fake_wire.error_answer(vendor, Fault("server_error"), {})
            return await ex.send_json(status, error, extra)
        if fault.kind == "truncated":  # promise the whole body, send half, hang up
            length = [("content-length", str(len(payload)))]
            ex.writer.write(
                fake_http.response_head(200, ex.headers(fake_wire.JSON_CONTENT_TYPE, length))
            )
            ex.writer.write(half)
            await ex.writer.drain()
            return False
        return await ex.send_json(200, half if fault.kind == "incomplete" else b"\x00garbled\xff")

    async def _hold(self, ex: _Exchange) -> None:
        """Keep the response open until the client disconnects (or the server stops)."""
        self._notify()
        while await ex.reader.read(4096):
            pass
        ex.request.disconnected = True


@dataclass(slots=True)
class _Exchange:
    """One request and the connection its response goes to."""

    request: RecordedRequest
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    keep_alive: bool

    def headers(
        self, content_type: str, extra: list[tuple[str, str]] | None = None
    ) -> list[tuple[str, str]]:
        """The response headers both vendors send, plus ``extra``."""
        out = [("content-type", content_type), *(extra or [])]
        out.append(("connection", "keep-alive" if self.keep_alive else "close"))
        out.append(fake_wire.request_id(self.request.vendor or "openai"))
        return out

    async def send_json(
        self, status: int, payload: bytes, extra: list[tuple[str, str]] | None = None
    ) -> bool:
        headers = self.headers(fake_wire.JSON_CONTENT_TYPE, extra)
        self.request.finished_at = await fake_http.write_body(self.writer, status, headers, payload)
        return self.keep_alive

    async def send_stream(self, events: list[bytes], *, terminate: bool = True) -> bool:
        headers = self.headers(fake_wire.SSE_CONTENT_TYPE, [("cache-control", "no-cache")])
        done = await fake_http.write_chunked(self.writer, 200, headers, events, terminate=terminate)
        self.request.finished_at = done
        return self.keep_alive


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    loop.call_soon_threadsafe(callback)


# --- command line ---------------------------------------------------------------------


async def _main(
    script: list[ScriptItem], host: str, port: int, port_file: Path | None
) -> list[RecordedRequest]:
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopped.set)
    async with FakeModelServer(script, host=host, port=port) as server:
        if port_file is not None:
            partial = port_file.with_name(port_file.name + ".tmp")
            partial.write_text(f"{server.port}\n", encoding="utf-8")
            os.replace(partial, port_file)  # readers never see a half-written file
        print(
            f"openai: {server.openai_base_url}\nanthropic: {server.anthropic_base_url}", flush=True
        )
        await stopped.wait()
        return server.requests


def main(argv: list[str] | None = None) -> int:
    """``python -m recursa.testing.fake_server --script FILE.json --port-file FILE``.

    Serves until SIGINT or SIGTERM. The port file receives the port number once
    the server listens (written atomically), so another process can wait for it.
    """
    parser = argparse.ArgumentParser(
        prog="python -m recursa.testing.fake_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--script", type=Path, help="JSON list of replies and faults")
    parser.add_argument("--port-file", type=Path, help="write the listening port here")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--log", type=Path, help="on exit, write each request's path and monotonic times here"
    )
    args = parser.parse_args(argv)
    script = load_script(json.loads(args.script.read_text(encoding="utf-8"))) if args.script else []
    requests = asyncio.run(_main(script, args.host, args.port, args.port_file))
    if args.log is not None:
        lines = [
            json.dumps({"path": r.path, "received_at": r.received_at, "finished_at": r.finished_at})
            for r in requests
        ]
        args.log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return 0


__all__ = [
    "EXHAUSTED_TEXT",
    "ROUTES",
    "FakeModelServer",
    "Fault",
    "FaultKind",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptItem",
    "ToolCallSpec",
    "main",
]

if __name__ == "__main__":
    raise SystemExit(main())

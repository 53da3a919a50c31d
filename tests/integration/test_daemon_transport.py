"""The daemon's transport over a real unix socket: the app served by
:mod:`recursa.daemon.server` (in a thread, with a fake host) and reached through
:class:`~recursa.daemon.client.DaemonClient`, or raw HTTP where the wire itself
is the subject. Only the host is fake."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import stat
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import psutil
import pytest

from fake_host import FakeHost
from recursa.daemon.auth import KernelAuth
from recursa.daemon.client import DaemonClient
from recursa.daemon.paths import DaemonPaths, ensure_token, read_state
from recursa.daemon.server import DaemonServer, bind_kernel_socket, bind_socket
from recursa.errors import (
    AuthError,
    DaemonError,
    ModelUnavailable,
    NotFound,
    StoreError,
    UncertainCommand,
)
from recursa.protocol.events import EventRecord, UserInput
from recursa.protocol.wire import CreateSession, Receipt, SendMessage
from socket_proxy import SocketProxy

T = TypeVar("T")
WAIT = 10.0


class ThreadedDaemon:
    """The real server on the real socket of ``home``, in a thread with its own loop."""

    def __init__(
        self,
        home: Path,
        host: FakeHost,
        *,
        heartbeat: float = 15.0,
        kernel_auth: KernelAuth | None = None,
    ) -> None:
        self.paths = DaemonPaths.for_home(home)
        self.host = host
        self._heartbeat = heartbeat
        self._kernel_auth = kernel_auth
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="daemon", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: DaemonServer | None = None

    def __enter__(self) -> ThreadedDaemon:
        self._thread.start()
        assert self._ready.wait(WAIT), "the server did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None and self.server is not None:
            with contextlib.suppress(RuntimeError):  # it stopped already: the loop is closed
                self.loop.call_soon_threadsafe(self.server.request_stop)
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), "the server did not stop"
        if self._error is not None:
            raise self._error

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (the fake host is not thread-safe)."""
        assert self.loop is not None

        async def run() -> T:
            return fn()

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return future.result(WAIT)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        sock = bind_socket(self.paths)
        kernel_sock = bind_kernel_socket(self.paths)
        # Listening before the test is told the server is ready: a client that
        # connects at once then waits in the backlog instead of being refused
        # (uvicorn accepts once it has started).
        sock.listen(128)
        kernel_sock.listen(128)
        try:
            token = ensure_token(self.paths)
            self.server = DaemonServer(
                self.host,
                paths=self.paths,
                sock=sock,
                kernel_sock=kernel_sock,
                token=token,
                heartbeat=self._heartbeat,
                kernel_auth=self._kernel_auth,
            )
            self.loop = asyncio.get_running_loop()
            self.loop.call_soon(self._ready.set)
            await self.server.serve(handle_signals=False)
        finally:
            sock.close()
            kernel_sock.close()


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


@pytest.fixture
def daemon(home: Path, host: FakeHost) -> Iterator[ThreadedDaemon]:
    with ThreadedDaemon(home, host) as running:
        yield running


@pytest.fixture
async def client(daemon: ThreadedDaemon) -> AsyncIterator[DaemonClient]:
    async with DaemonClient(daemon.paths.home) as c:
        yield c


def raw(
    paths: DaemonPaths, token: str | None = "from-file", *, socket: Path | None = None
) -> httpx2.AsyncClient:
    """Plain HTTP over the people's socket (or ``socket``), for looking at the wire itself."""
    headers = {}
    if token == "from-file":
        token = paths.token.read_text()
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=str(socket or paths.socket)),
        base_url="http://recursa",
        headers=headers,
        trust_env=False,
    )


async def wait_until(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def take(stream: AsyncIterator[EventRecord], n: int) -> list[EventRecord]:
    out: list[EventRecord] = []
    async with asyncio.timeout(WAIT):
        async for record in stream:
            out.append(record)
            if len(out) == n:
                break
    return out


def texts(records: list[EventRecord]) -> list[str]:
    return [r.event.text for r in records if isinstance(r.event, UserInput)]


# -- round trips ------------------------------------------------------------------------------


async def test_every_route_round_trips_its_wire_values(
    client: DaemonClient, daemon: ThreadedDaemon, host: FakeHost
) -> None:
    status = await client.status()
    assert (status.pid, status.version, status.sessions) == (os.getpid(), "fake", 0)
    assert status.started_at == host.started_at and status.recovering is False

    created = await client.create_session(
        CreateSession(task="count the stars", model="faux/echo", cwd="/tmp", name="astro")
    )
    assert created == daemon.call(lambda: host.infos[created.id])
    assert created.name == "astro" and created.model == "faux/echo" and created.cwd == "/tmp"
    other = await client.create_session(CreateSession(task=None))

    assert await client.sessions() == [created, other]
    assert await client.session("astro") == created
    assert await client.session(created.id[:5]) == created

    receipt = await client.send("astro", SendMessage("and the moons", mode="steer"))
    assert receipt == Receipt(message_id=1, session_id=created.id, status="queued")

    interrupted = await client.interrupt("astro")
    assert interrupted.status == "idle" and interrupted.id == created.id
    stopped = await client.stop(created.id)
    assert stopped.status == "inactive"
    assert await client.session("astro") == stopped

    async with contextlib.aclosing(client.events("astro")) as stream:
        records = [r async for r in stream]
    assert [r.event.type for r in records] == [
        "session_created",
        "user_input",
        "user_input",
        "status_changed",
        "status_changed",
    ]
    assert texts(records) == ["count the stars", "and the moons"]
    assert [r.seq for r in records] == sorted(r.seq for r in records)

    # Mutating calls carried this client's id and a fresh command id each.
    keys = [key for op, key in daemon.call(lambda: list(host.calls)) if op != "interrupt"]
    assert len(keys) == 4 and all(k is not None and k.client_id == client.client_id for k in keys)
    assert len({k.command_id for k in keys if k is not None}) == 4

    await client.shutdown(force=True)
    assert daemon.call(lambda: list(host.shutdowns)) == [True]


async def test_session_info_survives_the_wire_exactly(
    client: DaemonClient, daemon: ThreadedDaemon, host: FakeHost
) -> None:
    created = await client.create_session(CreateSession(task="ünïcode ✓ \U0001f600", name="uni"))
    assert await client.session("uni") == created
    async with contextlib.aclosing(client.events("uni")) as stream:
        records = [r async for r in stream]
    assert texts(records) == ["ünïcode ✓ \U0001f600"]


# -- security ---------------------------------------------------------------------------------


async def test_a_missing_or_wrong_token_is_refused_with_nothing_revealed(
    daemon: ThreadedDaemon, tmp_path: Path
) -> None:
    for token in (None, "wrong", daemon.paths.token.read_text() + "x"):
        async with raw(daemon.paths, token) as http:
            for method, path in (("GET", "/v1/status"), ("GET", "/v1/nowhere")):
                reply = await http.request(method, path)
                assert reply.status_code == 401
                assert reply.json() == {
                    "error": {"kind": "auth", "message": "a valid token is required"}
                }

    elsewhere = DaemonPaths.for_home(tmp_path / "other-home")
    elsewhere.home.mkdir(mode=0o700)
    elsewhere.token.write_text("not-the-token")
    async with DaemonClient(elsewhere.home, socket=daemon.paths.socket) as wrong:
        with pytest.raises(AuthError, match="a valid token is required"):
            await wrong.status()


async def test_a_kernel_token_reaches_only_kernel_routes_on_the_kernel_socket(
    home: Path, host: FakeHost
) -> None:
    tokens = {"kernel-token-of-s1": "s1"}
    with ThreadedDaemon(home, host, kernel_auth=tokens.get) as running:
        kernel_socket = running.paths.kernel_socket
        async with raw(running.paths, "kernel-token-of-s1", socket=kernel_socket) as http:
            # Admitted under /v1/kernel/ (no such route yet, so 404, not 401) ...
            assert (await http.get("/v1/kernel/whoami")).status_code == 404
            # ... and refused everywhere else, like any wrong token.
            for path in ("/v1/status", "/v1/sessions"):
                assert (await http.get(path)).status_code == 401
        async with raw(running.paths, "kernel-token-of-nobody", socket=kernel_socket) as http:
            assert (await http.get("/v1/kernel/whoami")).status_code == 401
        # On the people's socket a kernel token is refused even under /v1/kernel/ ...
        async with raw(running.paths, "kernel-token-of-s1") as http:
            for path in ("/v1/kernel/whoami", "/v1/status"):
                assert (await http.get(path)).status_code == 401
        # ... and on the kernel socket the client token is refused everywhere.
        async with raw(running.paths, socket=kernel_socket) as http:
            for path in ("/v1/kernel/whoami", "/v1/status", "/v1/sessions"):
                reply = await http.get(path)
                assert reply.status_code == 401
                assert reply.json()["error"]["kind"] == "auth"
        assert sorted(p.name for p in kernel_socket.parent.iterdir()) == ["kernel.sock"]
        assert stat.S_IMODE(os.stat(kernel_socket).st_mode) == 0o600
    assert not kernel_socket.exists(), "removed on a clean stop"


async def test_socket_is_private_and_no_tcp_port_is_open(daemon: ThreadedDaemon) -> None:
    socket_stat = os.stat(daemon.paths.socket)
    assert stat.S_ISSOCK(socket_stat.st_mode)
    assert stat.S_IMODE(socket_stat.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(daemon.paths.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(daemon.paths.token).st_mode) == 0o600
    state = read_state(daemon.paths)
    assert state is not None and state.socket == str(daemon.paths.socket)
    # The server runs in this process: it has no internet socket at all.
    assert psutil.Process().net_connections(kind="inet") == []


async def test_a_home_too_deep_for_af_unix_gets_a_private_short_socket(
    tmp_path: Path, host: FakeHost
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with ThreadedDaemon(deep, host) as running:
        path = running.paths.socket
        assert path.parent == Path(f"/tmp/recursa-{os.getuid()}")
        assert len(os.fsencode(path)) <= 107
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        state = read_state(running.paths)
        assert state is not None and state.socket == str(path)
        async with DaemonClient(deep) as c:
            assert (await c.status()).pid == os.getpid()
    assert not path.exists(), "a clean exit removes the socket"


# -- errors -----------------------------------------------------------------------------------


async def test_errors_map_to_statuses_and_the_error_tree(
    client: DaemonClient, daemon: ThreadedDaemon
) -> None:
    await client.create_session(CreateSession(task="t", name="taken"))

    with pytest.raises(NotFound, match="no session 'ghost'"):
        await client.session("ghost")
    with pytest.raises(NotFound):
        await client.send("ghost", SendMessage("hi"))
    with pytest.raises(ModelUnavailable, match="missing/model"):
        await client.create_session(CreateSession(task="t", model="missing/model"))
    with pytest.raises(StoreError, match="exists"):
        await client.create_session(CreateSession(task="t", name="taken"))
    with pytest.raises(UncertainCommand, match="before a crash"):
        await client.send("taken", SendMessage("lost-in-crash"))
    with pytest.raises(DaemonError) as bug:
        await client.create_session(CreateSession(task="t", name="boom"))
    assert str(bug.value) == "internal error: RuntimeError: kaboom"

    async with raw(daemon.paths) as http:
        cases: list[tuple[str, str, Any, int, str]] = [
            ("GET", "/v1/sessions/ghost", None, 404, "not_found"),
            ("GET", "/v1/sessions/ghost/events", None, 404, "not_found"),
            ("GET", "/v1/nowhere", None, 404, "not_found"),
            ("DELETE", "/v1/status", None, 400, "invalid"),
            ("POST", "/v1/sessions", b"{not json", 400, "invalid"),
            ("POST", "/v1/sessions", b"[1, 2]", 400, "invalid"),
            ("POST", "/v1/sessions", b"{}", 400, "invalid"),  # task is required
            (
                "POST",
                "/v1/sessions/taken/messages",
                b'{"text": "x", "mode": "loud"}',
                400,
                "invalid",
            ),
            ("GET", "/v1/sessions/taken/events?after=-1", None, 400, "invalid"),
            ("GET", "/v1/sessions/taken/events?follow=maybe", None, 400, "invalid"),
            ("POST", "/v1/sessions/taken/messages", b'{"text": "lost-in-crash"}', 409, "uncertain"),
            ("POST", "/v1/sessions", b'{"task": "t", "name": "boom"}', 500, "internal"),
            # Requests are built by type from the table's rows: a wrong type is a 400.
            ("POST", "/v1/sessions/taken/messages", b'{"text": 7}', 400, "invalid"),
            ("POST", "/v1/sessions/taken/wait-quiet", b'{"timeout": "soon"}', 400, "invalid"),
            ("PUT", "/v1/sessions/taken/goal", b'{"objective": ["x"]}', 400, "invalid"),
            ("GET", "/v1/harness/log?limit=many", None, 400, "invalid"),
            ("GET", "/v1/harness/entries?kind=poem", None, 400, "invalid"),
            ("DELETE", "/v1/schedules/first", None, 400, "invalid"),
        ]
        for method, path, body, status, kind in cases:
            reply = await http.request(method, path, content=body)
            assert reply.status_code == status, (method, path, reply.text)
            error = reply.json()["error"]
            assert error["kind"] == kind, (method, path, error)
            assert "\n" not in error["message"] and error["message"], (method, path)

        # One of the two idempotency headers without the other is a bad request.
        reply = await http.post(
            "/v1/sessions", content=b'{"task": "t"}', headers={"Recursa-Client": "c"}
        )
        assert reply.status_code == 400 and "together" in reply.json()["error"]["message"]


async def test_a_bug_is_logged_with_its_traceback(
    client: DaemonClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("ERROR", logger="recursa.daemon"), pytest.raises(DaemonError):
        await client.create_session(CreateSession(task="t", name="boom"))
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "second line of the bug" in str(logged[0].exc_info[1])  # type: ignore[index]


# -- idempotency ------------------------------------------------------------------------------


async def test_a_dropped_reply_is_retried_once_with_the_same_command_id(
    daemon: ThreadedDaemon, host: FakeHost, tmp_path: Path
) -> None:
    async with (
        SocketProxy(tmp_path / "proxy.sock", daemon.paths.socket) as proxy,
        DaemonClient(daemon.paths.home, socket=proxy.listen) as client,
    ):
        info = await client.create_session(CreateSession(task="t", name="idem"))
        proxy.drop_reply_to = b"drop-me"
        receipt = await client.send("idem", SendMessage("drop-me"))
        assert proxy.broken == 1, "the proxy cut the first reply"

    calls = daemon.call(lambda: [(op, key) for op, key in host.calls if op == "send"])
    executed = daemon.call(lambda: [(op, key) for op, key in host.executed if op == "send"])
    assert len(calls) == 2 and calls[0][1] == calls[1][1] is not None
    assert len(executed) == 1, "the repeated command was answered from the stored result"
    assert receipt == Receipt(message_id=1, session_id=info.id, status="queued")
    stored = daemon.call(lambda: texts(list(host.records)))
    assert stored.count("drop-me") == 1


async def test_an_unreachable_daemon_is_one_clear_line(home: Path) -> None:
    async with DaemonClient(home) as client:
        with pytest.raises(DaemonError) as error:
            await client.status()
    assert str(error.value) == (
        f"no daemon is running for RECURSA_HOME {home.resolve()}: recursa daemon start"
    )
    assert await DaemonClient(home).probe() is None


# -- event streams ----------------------------------------------------------------------------


async def test_a_followed_stream_gives_stored_then_live_records_in_order(
    client: DaemonClient, daemon: ThreadedDaemon, host: FakeHost
) -> None:
    info = await client.create_session(CreateSession(task="first", name="live"))
    await client.send("live", SendMessage("second"))
    async with (
        DaemonClient(daemon.paths.home) as sender,
        contextlib.aclosing(client.events("live", after=1, follow=True)) as stream,
    ):
        stored = await take(stream, 2)
        assert texts(stored) == ["first", "second"]
        await sender.send("live", SendMessage("third"))
        daemon.call(lambda: host.append(info.id, UserInput(text="partial"), transient=True))
        await sender.send("live", SendMessage("fourth"))
        live = await take(stream, 3)
    assert texts(live) == ["third", "partial", "fourth"]
    assert [r.seq for r in live][1] == 0, "transient records travel with seq 0"
    seqs = [r.seq for r in stored + live if r.seq]
    assert seqs == sorted(set(seqs))


async def test_a_dropped_stream_resumes_from_its_cursor_without_gaps_or_duplicates(
    daemon: ThreadedDaemon, host: FakeHost, tmp_path: Path
) -> None:
    async with (
        DaemonClient(daemon.paths.home) as sender,
        SocketProxy(tmp_path / "proxy.sock", daemon.paths.socket) as proxy,
        DaemonClient(daemon.paths.home, socket=proxy.listen) as follower,
    ):
        await sender.create_session(CreateSession(task="m0", name="resume"))
        await sender.send("resume", SendMessage("m1"))
        async with contextlib.aclosing(follower.events("resume", follow=True)) as stream:
            got = await take(stream, 3)  # session_created, m0, m1
            proxy.cut_after = b"cut-here"
            await sender.send("resume", SendMessage("cut-here"))
            await sender.send("resume", SendMessage("m3"))  # while the follower is cut off
            got += await take(stream, 2)
            assert proxy.broken == 1
            await sender.send("resume", SendMessage("m4"))
            got += await take(stream, 1)
        assert proxy.connections == 2, "one reconnection"
    assert texts(got) == ["m0", "m1", "cut-here", "m3", "m4"]
    assert [r.seq for r in got] == list(range(1, 7))
    await wait_until(lambda: daemon.call(lambda: host.open_streams) == 0, "streams to close")


async def test_a_client_that_goes_away_closes_the_hosts_iterator(
    client: DaemonClient, daemon: ThreadedDaemon, host: FakeHost
) -> None:
    await client.create_session(CreateSession(task="t", name="quiet"))
    async with contextlib.aclosing(client.events("quiet", follow=True)) as stream:
        await take(stream, 2)
        assert daemon.call(lambda: host.open_streams) == 1
    await wait_until(lambda: daemon.call(lambda: host.open_streams) == 0, "the iterator to close")


async def test_a_silent_stream_carries_heartbeats_and_ends_with_the_server(
    home: Path, host: FakeHost
) -> None:
    with ThreadedDaemon(home, host, heartbeat=0.05) as running:
        async with DaemonClient(home) as c:
            await c.create_session(CreateSession(task=None, name="hb"))
        lines: list[dict[str, Any]] = []
        async with (
            raw(running.paths) as http,
            http.stream("GET", "/v1/sessions/hb/events?follow=1") as reply,
        ):
            assert reply.headers["content-type"] == "application/x-ndjson"
            async for line in reply.aiter_lines():
                lines.append(json.loads(line))
                if len(lines) == 3:
                    running.call(running.server.request_stop)  # type: ignore[union-attr]
                if lines[-1]["type"] == "shutdown":
                    break
    assert lines[0]["type"] == "session_created"
    assert {"type": "heartbeat"} in lines[1:]
    assert lines[-1] == {"type": "shutdown"}
    assert not running.paths.socket.exists() and not running.paths.state.exists()


async def test_a_follower_is_told_when_the_daemon_shuts_down(
    client: DaemonClient, daemon: ThreadedDaemon
) -> None:
    await client.create_session(CreateSession(task="t", name="bye"))
    async with (
        DaemonClient(daemon.paths.home) as other,
        contextlib.aclosing(client.events("bye", follow=True)) as stream,
    ):
        await take(stream, 2)
        await other.shutdown()
        with pytest.raises(DaemonError, match="shutting down"):
            await take(stream, 1)

"""A :class:`~recursa.daemon.host.Host` in memory, for tests of the daemon's transport.

It serves every person row of the operation table: the ones below, and the
rest refused by its :func:`~recursa.daemon.host.unserved` base.

It keeps sessions and their events, answers repeated commands with the stored
result, and records what it was asked. Behaviour on cue, so tests can reach
every error path over the real wire:

- ``CreateSession(name="boom")`` raises a bug (RuntimeError with two lines);
- ``CreateSession(model="missing/model")`` raises ModelUnavailable;
- a second session with a taken name raises StoreError (conflict);
- a message ``"lost-in-crash"`` raises UncertainCommand.

:func:`open_fake_host` is a ``--host-factory`` for a real daemon process: it
writes what it received (the provider keys) to ``fake-host.json`` in the
home, and its close function appends to ``fake-host-closed.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from recursa.config import Config
from recursa.daemon.host import Host, unserved
from recursa.errors import ModelUnavailable, NotFound, StoreError, UncertainCommand
from recursa.protocol.events import (
    PROTOCOL_VERSION,
    Event,
    EventRecord,
    SessionCreated,
    StatusChanged,
    UserInput,
)
from recursa.protocol.operations import Ack
from recursa.protocol.person_ops import EventsQuery, SendTo, SessionRef, SessionsQuery
from recursa.protocol.wire import (
    CommandKey,
    CreateSession,
    DaemonStatus,
    Receipt,
    SessionInfo,
    Shutdown,
)


class FakeHost(unserved("person")):  # type: ignore[misc]
    def __init__(self) -> None:
        self.infos: dict[str, SessionInfo] = {}
        self.records: list[EventRecord] = []
        self.calls: list[tuple[str, CommandKey | None]] = []  # every mutating call
        self.executed: list[tuple[str, CommandKey | None]] = []  # the ones that ran
        self.results: dict[CommandKey, Any] = {}
        self.shutdowns: list[bool] = []
        self.open_streams = 0
        self.started_at = time.time()
        self._seq = 0
        self._messages = 0
        self._subscribers: set[asyncio.Queue[EventRecord]] = set()

    # -- Host -------------------------------------------------------------------------------

    async def status(self) -> DaemonStatus:
        return DaemonStatus(
            pid=os.getpid(),
            version="fake",
            protocol=PROTOCOL_VERSION,
            started_at=self.started_at,
            sessions=len(self.infos),
            loaded=sum(1 for i in self.infos.values() if i.status != "inactive"),
            running=0,
            recovering=False,
        )

    async def create_session(
        self, request: CreateSession, command: CommandKey | None
    ) -> SessionInfo:
        result: SessionInfo = self._once("create", command, lambda: self._create(request))
        return result

    async def sessions(self, request: SessionsQuery) -> list[SessionInfo]:
        wanted = request.wanted
        return [info for info in self.infos.values() if wanted is None or info.id in wanted]

    async def session(self, request: SessionRef) -> SessionInfo:
        return self._resolve(request.session)

    async def send(self, request: SendTo, command: CommandKey | None) -> Receipt:
        result: Receipt = self._once("send", command, lambda: self._send(request))
        return result

    async def interrupt(self, request: SessionRef) -> SessionInfo:
        self.calls.append(("interrupt", None))
        return self._set_status(self._resolve(request.session).id, "idle")

    async def stop(self, request: SessionRef, command: CommandKey | None) -> SessionInfo:
        result: SessionInfo = self._once(
            "stop", command, lambda: self._set_status(self._resolve(request.session).id, "inactive")
        )
        return result

    async def events(self, request: EventsQuery) -> AsyncIterator[list[EventRecord]]:
        session_id = self._resolve(request.session).id
        return self._records(session_id, request.after, request.follow)

    async def _records(
        self, session_id: str, after: int, follow: bool
    ) -> AsyncIterator[list[EventRecord]]:
        # The stored records in one page, then each live one alone.
        # Snapshot and subscribe in one step of the loop: nothing falls between.
        stored = [r for r in self.records if r.session_id == session_id and r.seq > after]
        queue: asyncio.Queue[EventRecord] = asyncio.Queue()
        if follow:
            self._subscribers.add(queue)
        self.open_streams += 1
        try:
            if stored:
                yield stored
            while follow:
                record = await queue.get()
                if record.session_id == session_id and (record.seq == 0 or record.seq > after):
                    yield [record]
        finally:
            self._subscribers.discard(queue)
            self.open_streams -= 1

    async def shutdown(self, request: Shutdown) -> Ack:
        self.shutdowns.append(request.force)
        return Ack()

    # -- helpers for tests ------------------------------------------------------------------

    def append(self, session_id: str, event: Event, *, transient: bool = False) -> EventRecord:
        """Record an event (``transient``: seq 0, not stored) and tell followers."""
        if transient:
            record = EventRecord(seq=0, session_id=session_id, ts=time.time(), event=event)
        else:
            self._seq += 1
            record = EventRecord(seq=self._seq, session_id=session_id, ts=time.time(), event=event)
            self.records.append(record)
        for queue in self._subscribers:
            queue.put_nowait(record)
        return record

    def _once(self, op: str, command: CommandKey | None, run: Callable[[], Any]) -> Any:
        self.calls.append((op, command))
        if command is not None and command in self.results:
            return self.results[command]
        result = run()
        self.executed.append((op, command))
        if command is not None:
            self.results[command] = result
        return result

    def _create(self, request: CreateSession) -> SessionInfo:
        if request.name == "boom":
            raise RuntimeError("kaboom\nsecond line of the bug")
        if request.model == "missing/model":
            raise ModelUnavailable("missing/model: no such provider (set it up in config.toml)")
        if request.name and any(i.name == request.name for i in self.infos.values()):
            raise StoreError(f"a session named {request.name!r} exists")
        session_id = f"s{len(self.infos) + 1:04d}deadbeef"
        now = time.time()
        info = SessionInfo(
            id=session_id,
            name=request.name,
            parent_id=None,
            status="idle",
            model=request.model or "faux/echo",
            cwd=request.cwd or "/",
            created_at=now,
            last_activity=now,
        )
        self.infos[session_id] = info
        self.append(session_id, SessionCreated(model=info.model, cwd=info.cwd, name=info.name))
        if request.task is not None:
            self.append(session_id, UserInput(text=request.task))
        return info

    def _send(self, request: SendTo) -> Receipt:
        if request.text == "lost-in-crash":
            raise UncertainCommand("this command was received before a crash; not run again")
        info = self._resolve(request.session)
        self._messages += 1
        self.append(info.id, UserInput(text=request.text))
        return Receipt(message_id=self._messages, session_id=info.id, status="queued")

    def _set_status(self, session_id: str, status: Any) -> SessionInfo:
        info = replace(self.infos[session_id], status=status, last_activity=time.time())
        self.infos[session_id] = info
        self.append(session_id, StatusChanged(status=status))
        return info

    def _resolve(self, ref: str) -> SessionInfo:
        if ref in self.infos:
            return self.infos[ref]
        matches = [i for i in self.infos.values() if i.name == ref or i.id.startswith(ref)]
        if len(matches) != 1:
            raise NotFound(f"no session {ref!r}")
        return matches[0]


async def open_fake_host(
    config: Config, *, api_socket: Path | None = None
) -> tuple[Host, Callable[[], Awaitable[None]]]:
    """A ``--host-factory`` for a real daemon process (see the module docstring)."""
    host = FakeHost()
    received = {name: p.api_key for name, p in config.providers.items()}
    _write_json(config.home / "fake-host.json", {"pid": os.getpid(), "api_keys": received})

    async def close() -> None:
        path = config.home / "fake-host-closed.json"
        closed = json.loads(path.read_text()) if path.exists() else []
        closed.append({"pid": os.getpid(), "shutdowns": host.shutdowns})
        _write_json(path, closed)

    return host, close


async def open_failing_host(
    config: Config, *, api_socket: Path | None = None
) -> tuple[Host, Callable[[], Awaitable[None]]]:
    """A ``--host-factory`` that fails as the runtime would without a model."""
    raise ModelUnavailable("no model weights here (the fake host refuses to open)")


def _write_json(path: Any, data: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)

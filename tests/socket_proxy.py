"""A unix-socket proxy that breaks connections on cue, to test what clients do
when a connection drops: the bytes are real, only the cut is staged.

- :attr:`SocketProxy.drop_reply_to`: the next connection whose request bytes
  contain this marker is forwarded, and then closed as soon as the server
  starts to answer, so the server did the work and the client never saw the
  reply.
- :attr:`SocketProxy.cut_after`: the next reply containing this marker is
  forwarded up to the end of the line that holds it (of the chunk, when the
  marker spans two), and the connection closed: whatever the server wrote
  after that line is lost, however the socket happened to batch it.

Each is used once and reset to None.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

_TAIL = 4096


class SocketProxy:
    def __init__(self, listen: Path, target: Path) -> None:
        self.listen = listen
        self.target = target
        self.drop_reply_to: bytes | None = None
        self.cut_after: bytes | None = None
        self.connections = 0
        self.broken = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> SocketProxy:
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.listen))
        return self

    async def __aexit__(self, *exc: object) -> None:
        server = self._server
        assert server is not None
        server.close()
        # Handlers are ended before wait_closed (which, from Python 3.12, waits
        # for every connection to close). A connection accepted just before the
        # close registers its handler a few loop turns later, so this goes on
        # until the server counts no connection (asyncio's own count: there is
        # no public one) and no handler is left.
        deadline = asyncio.get_running_loop().time() + 10.0
        while self._tasks or server._active_count:  # type: ignore[attr-defined]
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("the proxy's connections did not close within 10 s")
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.sleep(0)
        await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._pipe(reader, writer)
        finally:
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.target))
        except BaseException:
            writer.close()
            raise
        drop = asyncio.Event()
        upward = asyncio.create_task(self._upward(reader, up_writer, drop))
        downward = asyncio.create_task(self._downward(up_reader, writer, drop))
        try:
            await asyncio.wait({upward, downward}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Everything closed before anything is awaited: the proxy closing
            # cancels this task, and a cancel landing in an await below must
            # not leave a connection open.
            for pipe in (upward, downward):
                pipe.cancel()
            for w in (writer, up_writer):
                w.close()
            await asyncio.gather(upward, downward, return_exceptions=True)
            for w in (writer, up_writer):
                with contextlib.suppress(OSError):
                    await w.wait_closed()

    async def _upward(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drop: asyncio.Event
    ) -> None:
        seen = b""
        while data := await reader.read(65536):
            seen = (seen + data)[-_TAIL:]
            if self.drop_reply_to is not None and self.drop_reply_to in seen:
                self.drop_reply_to = None
                drop.set()
            writer.write(data)
            await writer.drain()

    async def _downward(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, drop: asyncio.Event
    ) -> None:
        seen = b""
        while data := await reader.read(65536):
            if drop.is_set():
                self.broken += 1
                return  # the server answered; the client never hears it
            seen = (seen + data)[-_TAIL:]
            cut = self.cut_after is not None and self.cut_after in seen
            if cut and self.cut_after is not None and (at := data.find(self.cut_after)) >= 0:
                end = data.find(b"\n", at)
                data = data if end < 0 else data[: end + 1]
            writer.write(data)
            await writer.drain()
            if cut:
                self.cut_after = None
                self.broken += 1
                return

"""WAL checkpoints off the writer's path.

SQLite's automatic checkpoint runs inside the COMMIT that pushes the WAL past
1000 pages: that one append then copies the whole WAL into the database file
and syncs it, a stall of 50-100 ms in the middle of a turn. The runtime's
connection turns it off (``Store.open(..., autocheckpoint=False)``) and a
:class:`Checkpointer` does the work instead, in a worker thread on a
connection of its own, once the store has been quiet for a moment, or at once
after many appends under a load that never pauses. A ``PASSIVE``
checkpoint takes no writer's lock, so appends go on while it copies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger("recursa.store")

QUIET = 0.25
"""Seconds without an append before the WAL is checkpointed."""
EVERY = 60.0
"""Seconds between checkpoints when nothing is appended (other writes may be)."""
MOST_APPENDS = 2000
"""After this many appends the WAL is checkpointed even while appends go on."""


class Checkpointer:
    """Checkpoints the WAL of the store at ``path`` when it has been quiet for
    ``quiet`` seconds since the last :meth:`appended`, or after ``most_appends``
    appends. Run :meth:`run` as a task; call :meth:`appended` after
    every write (it is cheap and never raises).

    Invariant: at most one checkpoint runs at a time, and never on the event
    loop's thread.
    """

    def __init__(
        self,
        path: Path,
        *,
        quiet: float = QUIET,
        most_appends: int = MOST_APPENDS,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._path = path
        self._quiet = quiet
        self._most = most_appends
        self._every = every
        self._appends = 0
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._dirty = asyncio.Event()
        self.checkpoints = 0
        """How many checkpoints ran (for tests and benchmarks)."""

    def appended(self) -> None:
        """A write happened: checkpoint once the store is quiet again."""
        self._last = self._clock()
        self._appends += 1
        self._dirty.set()

    async def run(self) -> None:
        """Wait for appends, then for quiet (or many appends), then checkpoint;
        also every ``every`` seconds, for the writes that are not appends
        (inbox, tokens, session rows). Forever; a failure is logged, and the
        next round tries again."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._every):
                    await self._dirty.wait()
            while (wait := self._last + self._quiet - self._clock()) > 0:
                if self._appends >= self._most:
                    break
                await self._sleep(wait)
            self._dirty.clear()
            self._appends = 0
            try:
                await asyncio.to_thread(self.checkpoint)
            except Exception:
                log.exception("WAL checkpoint of %s failed", self._path)

    def checkpoint(self) -> tuple[int, int]:
        """One passive checkpoint on a connection of its own: (frames in the
        WAL, frames copied). A failure is logged, not raised: the next quiet
        moment tries again, and SQLite checkpoints on the last close anyway."""
        try:
            # mode=rw: a store that is gone is not created anew here.
            conn = sqlite3.connect(self._path.as_uri() + "?mode=rw", uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint of %s: cannot open: %s", self._path, exc)
            return (0, 0)
        try:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            log.warning("WAL checkpoint of %s failed: %s", self._path, exc)
            return (0, 0)
        finally:
            conn.close()
        self.checkpoints += 1
        return (int(frames), int(copied)) if not busy else (int(frames), 0)


__all__ = ["EVERY", "MOST_APPENDS", "QUIET", "Checkpointer"]

"""What the app knows of the daemon's sessions, kept live from the global feed.

:class:`Live` holds every session's :class:`~recursa.protocol.wire.SessionInfo`
and the tree rows built from them. It never rereads the event log: it follows
the daemon's ``feed`` (every stored event of every session, from a cursor),
marks the session of each record dirty, and :meth:`Live.refresh` fetches the
dirty ones in one ``sessions(ids=...)`` call; the app calls it a few times a
second at most, so a burst of events costs one request.

Where the feed starts: at the newest stored seq the daemon reports
(``status().last_seq``), read *before* the sessions, so nothing stored between
the two reads is missed; a record seen again only marks its session dirty.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from recursa.daemon.client import DaemonClient
from recursa.protocol.events import EventRecord, Notice, SessionCreated
from recursa.protocol.person_ops import SESSIONS, SessionsQuery
from recursa.protocol.wire import SessionInfo
from recursa.view.tree import TreeRow, build_rows

WHOLE_LIST = 200
"""More dirty sessions than this are refreshed by reading the whole list."""


@contextlib.asynccontextmanager
async def closing(stream: AsyncIterator[EventRecord]) -> AsyncIterator[AsyncIterator[EventRecord]]:
    """``stream`` (a client's event stream), closed when the block ends, so its
    connection is not left open by a consumer that stops early."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


class Live:
    """The session list and its tree, and what changed since the last refresh."""

    def __init__(self, client: DaemonClient) -> None:
        self.client = client
        self.sessions: dict[str, SessionInfo] = {}
        self.rows: list[TreeRow] = []
        self.cursor = 0
        self.dirty: set[str] = set()
        self.harness_changed = False
        self.shape_changed = False
        """A session appeared (or the list was reread): the tree's order may differ."""

    async def load(self) -> None:
        """Read every session once and place the feed's cursor (see the module docstring)."""
        self.cursor = (await self.client.status()).last_seq
        infos = await self.client.call(SESSIONS, SessionsQuery())
        self.sessions = {info.id: info for info in infos}
        self.rows = build_rows(self.sessions.values())
        self.shape_changed = True

    def take(self, record: EventRecord) -> None:
        """Note one record of the feed: its session is dirty."""
        if record.seq:
            self.cursor = max(self.cursor, record.seq)
        self.dirty.add(record.session_id)
        event = record.event
        if isinstance(event, SessionCreated) or record.session_id not in self.sessions:
            self.shape_changed = True
        if isinstance(event, Notice) and event.text.startswith("harness: "):
            self.harness_changed = True

    async def follow(self) -> AsyncIterator[EventRecord]:
        """The feed from the cursor on, each record already taken (:meth:`take`)."""
        async with closing(self.client.feed(after=self.cursor, follow=True)) as feed:
            async for record in feed:
                self.take(record)
                yield record

    async def refresh(self) -> set[str]:
        """Fetch the dirty sessions in one call and rebuild the rows; the ids that
        changed (a session's change changes its ancestors' subtree figures too)."""
        if not self.dirty:
            return set()
        ids, self.dirty = sorted(self.dirty), set()
        # Past a few hundred, the whole list is the shorter request (and URL).
        query = SessionsQuery(None if len(ids) > WHOLE_LIST else ",".join(ids))
        try:
            infos = await self.client.call(SESSIONS, query)
        except BaseException:
            self.dirty.update(ids)  # still to be read, next time
            raise
        changed: set[str] = set()
        for info in infos:
            if info.id not in self.sessions:
                self.shape_changed = True
            self.sessions[info.id] = info
            changed.add(info.id)
            parent = info.parent_id
            while parent is not None and parent in self.sessions and parent not in changed:
                changed.add(parent)
                parent = self.sessions[parent].parent_id
        self.rows = build_rows(self.sessions.values())
        return changed

    def update(self, info: SessionInfo) -> None:
        """An action's reply (stop, unload, ...) is the session's newest state."""
        self.sessions[info.id] = info
        self.rows = build_rows(self.sessions.values())

    def name_of(self, session_id: str | None) -> str:
        """What a person calls the session: its name, else its id."""
        info = self.sessions.get(session_id or "")
        if info is None:
            return session_id or "-"
        return info.name or info.id


__all__ = ["Live", "closing"]

"""The durable inbox: messages waiting for a session, delivered exactly once.

A message is written (and committed) before anyone is told it was received.
Delivery appends the ``user_input`` event that puts the message in front of
the model and marks the message delivered, in one transaction: after a crash
a message is either still queued (and is delivered again when its session
loads) or delivered with its event, never both and never lost.

Per-sender order is the id order, since ids only grow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from recursa.protocol.events import (
    EventRecord,
    InboxRead,
    InputSource,
    ReadMessage,
    UserInput,
    json_text,
)
from recursa.store.table import Table, with_text

MessageMode = Literal["auto", "steer", "follow_up"]
MessageStatus = Literal["queued", "delivered", "dropped"]
MessageKind = Literal["message", "answer"]
"""``answer``: a sub-agent's final answer, sent to its parent automatically."""

_COLUMNS = (
    "id, session_id, sender, source, mode, text, status, created_at, delivered_at,"
    " delivered_seq, kind"
)


@dataclass(frozen=True, slots=True)
class MessageRow:
    id: int
    session_id: str
    sender: str | None
    source: InputSource
    mode: MessageMode
    text: str
    status: MessageStatus
    created_at: float
    delivered_at: float | None
    delivered_seq: int | None
    kind: MessageKind = "message"

    def as_input(self, *, steer: bool = False) -> UserInput:
        """The event that delivers this message to the model."""
        return UserInput(
            text=self.text,
            source=self.source,
            sender=self.sender,
            mode="steer" if steer else "turn",
        )


class Inbox(Table[MessageRow]):
    """Messages per recipient session. Use it through ``store.inbox``."""

    def _row(self, values: Sequence[object]) -> MessageRow:
        return with_text(MessageRow, values, 5)  # the text

    def enqueue(
        self,
        session_id: str,
        text: str,
        *,
        source: InputSource = "user",
        mode: MessageMode = "auto",
        sender: str | None = None,
        kind: MessageKind = "message",
    ) -> MessageRow:
        """Store a message for ``session_id``; committed when this returns
        (unless called inside a wider :meth:`Store.transaction`)."""
        if source not in get_args(InputSource):
            raise ValueError(f"unknown message source {source!r}")
        if mode not in get_args(MessageMode):
            raise ValueError(f"unknown message mode {mode!r}")
        now = self._store.now()
        with self._store.transaction():
            # As a JSON string, like the events: a lone surrogate (an undecodable
            # byte) is kept exactly instead of failing SQLite's UTF-8 encoding.
            cursor = self._store.execute(
                "INSERT INTO messages (session_id, sender, source, mode, text, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, sender, source, mode, json_text(text), now),
                missing=session_id,
            )
        return MessageRow(
            int(cursor.lastrowid or 0),
            session_id,
            sender,
            source,
            mode,
            text,
            "queued",
            now,
            None,
            None,
        )

    def pending(self, session_id: str) -> list[MessageRow]:
        """Queued messages for ``session_id``, oldest first."""
        return self._all(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND status = 'queued' ORDER BY id",
            (session_id,),
        )

    def pending_count(self, session_id: str) -> int:
        row = self._store.execute(
            "SELECT count(*) FROM messages WHERE session_id = ? AND status = 'queued'",
            (session_id,),
        ).fetchone()
        return int(row[0])

    def pending_counts(self) -> dict[str, int]:
        """Queued messages per session, in one query (sessions with none are absent)."""
        rows = self._store.execute(
            "SELECT session_id, count(*) FROM messages WHERE status = 'queued' GROUP BY session_id"
        ).fetchall()
        return {str(session_id): int(count) for session_id, count in rows}

    def sessions_with_pending(self) -> list[str]:
        """Every session that has queued messages."""
        rows = self._store.execute(
            "SELECT DISTINCT session_id FROM messages WHERE status = 'queued'"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def get(self, message_id: int) -> MessageRow | None:
        return self._one(f"SELECT {_COLUMNS} FROM messages WHERE id = ?", (message_id,))

    def deliver(self, messages: Sequence[MessageRow], *, steer: bool = False) -> list[EventRecord]:
        """Append each message's ``user_input`` event and mark it delivered, all
        in one transaction. Messages already delivered are skipped."""
        records: list[EventRecord] = []
        now = self._store.now()
        with self._store.transaction():
            for message in messages:
                claimed = self._store.execute(
                    "UPDATE messages SET status = 'delivered', delivered_at = ?"
                    " WHERE id = ? AND status = 'queued'",
                    (now, message.id),
                ).rowcount
                if not claimed:
                    continue
                record = self._store.append(message.session_id, message.as_input(steer=steer))
                self._store.execute(
                    "UPDATE messages SET delivered_seq = ? WHERE id = ?", (record.seq, message.id)
                )
                records.append(record)
        return records

    def take(
        self, session_id: str, *, sender: str | None = None, kind: MessageKind | None = None
    ) -> tuple[list[MessageRow], EventRecord | None]:
        """Take the queued messages of ``session_id`` (only ``sender``'s, or of
        ``kind``, when given) for a cell that reads them: mark them delivered and
        append one ``inbox_read`` event, in one transaction. The event is
        None when nothing was queued."""
        taken: list[MessageRow] = []
        now = self._store.now()
        with self._store.transaction():
            for message in self.pending(session_id):
                if sender is not None and message.sender != sender:
                    continue
                if kind is not None and message.kind != kind:
                    continue
                claimed = self._store.execute(
                    "UPDATE messages SET status = 'delivered', delivered_at = ?"
                    " WHERE id = ? AND status = 'queued'",
                    (now, message.id),
                ).rowcount
                if claimed:
                    taken.append(message)
            if not taken:
                return [], None
            read = tuple(ReadMessage(m.id, m.sender, m.source, m.text) for m in taken)
            record = self._store.append(session_id, InboxRead(messages=read))
            placeholders = ", ".join("?" * len(taken))
            self._store.execute(
                f"UPDATE messages SET delivered_seq = ? WHERE id IN ({placeholders})",
                (record.seq, *(m.id for m in taken)),
            )
        return taken, record

    def drop(self, session_id: str) -> int:
        """Drop every queued message of ``session_id`` (a deleted session); returns how many."""
        with self._store.transaction():
            cursor = self._store.execute(
                "UPDATE messages SET status = 'dropped', delivered_at = ?"
                " WHERE session_id = ? AND status = 'queued'",
                (self._store.now(), session_id),
            )
        return int(cursor.rowcount)


__all__ = ["Inbox", "MessageKind", "MessageMode", "MessageRow", "MessageStatus"]

"""``agent_message``: durable messages between the sessions of one tree.

Runs inside a kernel. The daemon derives the sender from the kernel's token;
a kernel cannot send as another session. Arguments are checked here, before
any request, so a mistake fails at once with a TypeError or ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from recursa.api import client

if TYPE_CHECKING:
    from recursa.protocol.wire import InboxMessage, Receipt

MODES = ("auto", "steer", "follow_up")
TARGET_KINDS = ("child", "sibling")
_TARGETS = '"parent", "child:NAME", "sibling:NAME" or "all"'


@dataclass(frozen=True, slots=True)
class Message:
    """A message taken from this session's inbox.

    ``sender``: who sent it (a session's name, else its id; or ``user``,
    ``system``, ``schedule``); ``source``: ``parent``, ``child``, ``sibling``,
    ``user``, ``system`` or ``schedule``; ``time``: when it was sent
    (seconds since the epoch)."""

    sender: str
    source: str
    text: str
    mode: str
    time: float
    sender_id: str | None = None
    id: int = 0


class AgentMessenger:
    """Messages to and from the other agents of this session's tree.

    ``await agent_message.send(text, to="parent", mode="auto")``
        Store ``text`` for ``to`` and deliver it; returns a Receipt
        (``status``: ``delivered`` or ``queued``), a list of them for ``all``.
        ``to``: ``"parent"``, ``"child:NAME"``, ``"sibling:NAME"`` or ``"all"``
        (every other agent of the tree). ``mode``: ``"steer"`` reaches a running agent between
        its cells; ``"follow_up"`` waits until its turn ends; ``"auto"`` steers
        a running agent and starts a turn for an idle one.
    ``await agent_message.inbox(wait=0)``
        Take the messages queued for this session (a list of Message, oldest
        first), waiting up to ``wait`` seconds for one when none is there.
        Messages taken here are not shown to you again.

    A child's final answer arrives by itself, as a message from it.
    """

    async def send(
        self, text: str, to: str = "parent", mode: str = "auto"
    ) -> Receipt | list[Receipt]:
        """Send ``text`` to ``to`` ("parent", "child:NAME", "sibling:NAME" or
        "all") with ``mode`` ("auto", "steer" or "follow_up"); a Receipt, or a
        list of them for "all"."""
        __tracebackhide__ = True
        receipts = await send_message(
            text, to=check_target(to), mode=mode, what="agent_message.send()"
        )
        return receipts if to == "all" else one_receipt(receipts, "agent_message.send()")

    async def inbox(self, wait: float = 0) -> list[Message]:
        """Take this session's queued messages (oldest first), waiting up to
        ``wait`` seconds for one when none is queued; [] if none came."""
        __tracebackhide__ = True
        from recursa.protocol.wire import InboxMessage

        seconds = client.seconds(wait, "wait", allow_none=False)
        data = await client.run(
            "inbox",
            {"wait": seconds},
            timeout=client.poll_timeout(seconds),
            what="agent_message.inbox()",
        )
        messages = client.decode_list(InboxMessage, data, "agent_message.inbox()")
        return [_message(item) for item in messages]

    def __repr__(self) -> str:
        return (
            "<agent_message: await agent_message.send(text, to='parent', mode='auto'), "
            "await agent_message.inbox(wait=0); help(agent_message)>"
        )


async def send_message(text: str, *, to: str, mode: str, what: str) -> list[Receipt]:
    """POST one message (arguments checked first); the receipts."""
    __tracebackhide__ = True
    from recursa.protocol.wire import Receipt

    body = {"text": check_text(text), "to": to, "mode": check_mode(mode)}
    data = await client.run("message", body, what=what)
    return client.decode_list(Receipt, data, what)


def one_receipt(receipts: list[Receipt], what: str) -> Receipt:
    if len(receipts) != 1:
        raise client.malformed(what)
    return receipts[0]


def check_text(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"the message must be a str, not {type(text).__name__}")
    if not text.strip():
        raise ValueError("the message is empty")
    return text


def check_mode(mode: object) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be 'auto', 'steer' or 'follow_up', not {mode!r}")
    assert isinstance(mode, str)
    return mode


def check_target(to: object) -> str:
    if not isinstance(to, str):
        raise TypeError(f"to must be a str ({_TARGETS}), not {type(to).__name__}")
    if to in ("parent", "all"):
        return to
    kind, colon, ref = to.partition(":")
    if not (colon and kind in TARGET_KINDS and ref.strip()):
        raise ValueError(f"to must be {_TARGETS}, not {to!r}")
    return to


def _message(item: InboxMessage) -> Message:
    sender = item.sender_name or item.sender or item.source
    return Message(
        sender=sender,
        source=item.source,
        text=item.text,
        mode=item.mode,
        time=item.at,
        sender_id=item.sender,
        id=item.id,
    )


agent_message = AgentMessenger()

__all__ = [
    "AgentMessenger",
    "Message",
    "agent_message",
    "check_mode",
    "check_target",
    "one_receipt",
    "send_message",
]

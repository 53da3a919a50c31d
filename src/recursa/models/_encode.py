"""Request bodies as the SDKs encode them, with each message's JSON kept from
one call of a conversation to the next.

A conversation's request holds every message so far, and a long run sends
hundreds: translating and encoding all of them again on every call is work
that grows with the run (an eighth of the daemon's CPU per step at 300
steps). :class:`MessageJSON` keeps each message's encoded JSON, per
conversation (``Request.cache_key``), for as long as the message is in it;
:func:`encode_body` puts a body together around those pieces, byte for byte
what ``json.dumps`` of the whole body gives with the SDKs' settings
(compact separators, UTF-8 as is, no NaN).
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recursa.models.types import Message, extends

dumps = functools.partial(json.dumps, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""``json.dumps`` as the SDKs call it for a request body (``openapi_dumps``)."""

CONVERSATIONS = 64
"""Conversations whose messages are kept; the least recently used goes first."""


class MessageJSON:
    """Each message's JSON (its ``translate``\\ d parts, encoded), kept per
    conversation for as long as the message object is in it.

    A conversation grows by appending, so the usual call sends the last
    call's messages and a few more: those are found by identity, in one pass
    in C, and only the new ones are encoded. Any other change (a compaction,
    an edit) finds each message's JSON by its ``id`` instead.

    Invariant: a kept piece belongs to the very message object it was made
    from (held here, so its ``id`` cannot be reused while it is kept)."""

    def __init__(
        self,
        translate: Callable[[Message], Iterable[Mapping[str, Any]]],
        *,
        conversations: int = CONVERSATIONS,
    ) -> None:
        self._translate = translate
        self._limit = conversations
        self._kept: OrderedDict[str, _Kept] = OrderedDict()

    def pieces(self, conversation: str | None, messages: Sequence[Message]) -> list[str]:
        """The JSON of ``messages``' parts, in order (a message with no parts
        gives none); kept for ``conversation`` when it is named."""
        if conversation is None:
            return [piece for m in messages if (piece := self._encode(m))]
        now = tuple(messages)
        before = self._kept.pop(conversation, None)
        if before is not None and extends(before.messages, now):
            added = [self._encode(m) for m in now[len(before.messages) :]]
            kept = _Kept(now, before.each + added, before.out + [p for p in added if p])
        else:
            held = before.messages if before else ()
            known = dict(zip(map(id, held), before.each if before else (), strict=True))
            # before still holds its messages, so an id in known is still theirs.
            each = [known[id(m)] if id(m) in known else self._encode(m) for m in now]
            kept = _Kept(now, each, [p for p in each if p])
        self._kept[conversation] = kept
        while len(self._kept) > self._limit:
            self._kept.popitem(last=False)
        return list(kept.out)

    def _encode(self, message: Message) -> str:
        return ",".join(dumps(part) for part in self._translate(message))


@dataclass(frozen=True, slots=True)
class _Kept:
    messages: tuple[Message, ...]
    """The conversation as last sent (held, so their ids stay theirs)."""
    each: list[str]
    """Each message's JSON, ``""`` for one with no parts."""
    out: list[str]
    """The non-empty ones, in order: what :meth:`MessageJSON.pieces` returns a copy of."""


def encode_body(body: Mapping[str, Any], key: str, pieces: Sequence[str]) -> bytes:
    """``dumps(body)`` with the list at ``key`` made of ``pieces`` (JSON
    values already encoded); ``body[key]`` itself is not read."""
    items = list(body.items())
    at = next(i for i, (name, _) in enumerate(items) if name == key)
    before = dumps(dict(items[:at]))[:-1]  # "{...", without its closing brace
    after = dumps(dict(items[at + 1 :]))[1:]  # "...}", without its opening brace
    middle = f"{dumps(key)}:[{','.join(pieces)}]"
    text = before + ("," if at else "") + middle + ("," if at + 1 < len(items) else "") + after
    return text.encode()


__all__ = ["CONVERSATIONS", "MessageJSON", "dumps", "encode_body"]

"""The store's values: session ids, session rows and usage totals.

Rows are frozen snapshots: changing a session goes through the
:class:`~recursa.store.store.Store`, which returns a new row.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias, get_args

from recursa.models.types import Usage
from recursa.protocol.events import SessionStatus

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
"""A value that survives ``json.dumps``/``json.loads`` unchanged in meaning."""

SESSION_STATUSES: frozenset[str] = frozenset(get_args(SessionStatus))

SESSION_ID_PREFIX = "s-"

# Crockford's base32 in lower case: no i, l, o or u, so an id read aloud or
# retyped is not misread. Its order matches the digits' values, so ids sort
# by time as strings.
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_TIME_CHARS = 10  # 50 bits of milliseconds: good until the year 37000
_RANDOM_CHARS = 4  # 20 bits: about a million ids per millisecond per process
_RANDOM_LIMIT = 1 << (5 * _RANDOM_CHARS)

_id_lock = threading.Lock()
_last_id: tuple[int, int] = (-1, 0)


def _encode(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


class SessionIds:
    """A source of session ids: ``"s-"`` + 10 characters of milliseconds + 4 random ones.

    Ids sort by creation time as plain strings. From one source they are
    strictly increasing even when the clock stands still or steps back (the
    random part is then incremented instead of drawn), so they never repeat.
    Across processes the 20 random bits make a clash unlikely, and the store's
    primary key turns one that happens into a retry, not a lost session.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[int, int] = (-1, 0)

    def new(self, now: float) -> str:
        """The next id for the time ``now`` (unix seconds)."""
        millis = int(now * 1000)
        with self._lock:
            last_millis, last_random = self._last
            if millis > last_millis:
                rand = secrets.randbelow(_RANDOM_LIMIT)
            else:
                millis, rand = last_millis, last_random + 1
                if rand >= _RANDOM_LIMIT:
                    millis, rand = millis + 1, 0
            self._last = (millis, rand)
        return SESSION_ID_PREFIX + _encode(millis, _TIME_CHARS) + _encode(rand, _RANDOM_CHARS)


_IDS = SessionIds()


def new_session_id(*, now: float | None = None) -> str:
    """A new session id from the process-wide :class:`SessionIds`.

    ``now`` (unix seconds) comes from an injected clock; default: the real time.
    Because ids from one process only ever increase, an id drawn for a clock
    behind an earlier one carries the earlier time, not ``now``.
    """
    return _IDS.new(time.time() if now is None else now)


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A session as stored. Times are unix seconds from the store's clock.

    ``updated_at`` moves when the row changes (status, model, name, meta), not
    when events are appended: the log's last event says when the session last
    did something. ``meta`` is a read-only view of a JSON object; its contents
    belong to the layers above the store.
    """

    id: str
    name: str | None
    parent_id: str | None
    model: str
    status: SessionStatus
    cwd: str
    workspace: str
    created_at: float
    updated_at: float
    meta: Mapping[str, JSONValue]


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Model calls added up.

    ``cost`` (USD) sums only the calls with a known price; ``unknown_cost_calls``
    counts the others, so a display can say "$0.42 + 3 unpriced calls" and an
    unknown price never reads as free. ``cost_complete`` is True when every
    call had a price (and trivially when there were no calls).
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0
    unknown_cost_calls: int = 0

    @property
    def cost_complete(self) -> bool:
        return self.unknown_cost_calls == 0

    @property
    def usage(self) -> Usage:
        """The token counts as the providers' :class:`~recursa.models.types.Usage`."""
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )


__all__ = [
    "SESSION_ID_PREFIX",
    "SESSION_STATUSES",
    "JSONValue",
    "SessionIds",
    "SessionRow",
    "UsageTotals",
    "new_session_id",
]

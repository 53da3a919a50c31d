"""Retries for provider streams: a failed attempt becomes ``Retrying`` and a fresh call.

:func:`with_retries` wraps a function that starts one provider call. It passes
every event through; when an attempt ends with a :class:`Failed` whose kind is
in :data:`~recursa.errors.RETRYABLE_KINDS` and attempts remain, it yields a
:class:`Retrying` (telling the consumer to discard what it has seen of that
attempt), waits, and starts the call again. The wrapped stream still ends with
exactly one :class:`Done` or :class:`Failed`.

The wait is jittered exponential backoff: attempt ``n`` (1-based) waits
``min(max_delay, base_delay * 2 ** (n - 1))`` scaled by a factor drawn from
[0.5, 1.0), so concurrent sessions hitting the same limit spread out but never
retry at once. A server's ``retry_after`` replaces the backoff when it is
longer; when it is longer than ``max_delay`` the caller would wait too long,
so the failure is returned instead. ``sleep`` and ``rand`` are injected: tests
pass a recording sleep and a fixed random source and never wait.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from recursa.errors import RETRYABLE_KINDS
from recursa.models.types import Done, Failed, Retrying, StreamEvent

DEFAULT_BASE_DELAY = 1.0
"""Seconds before the first retry, before jitter."""

DEFAULT_MAX_DELAY = 60.0
"""The longest single wait; a server asking for longer ends the retries."""

JITTER_FLOOR = 0.5
"""The smallest fraction of the backoff a jittered wait keeps."""


def backoff_delay(
    attempt: int,
    *,
    base_delay: float = DEFAULT_BASE_DELAY,
    max_delay: float = DEFAULT_MAX_DELAY,
    rand: Callable[[], float] = random.random,
    retry_after: float | None = None,
) -> float | None:
    """Seconds to wait before retry number ``attempt`` (1-based), or None to give up.

    None means the server asked for a wait longer than ``max_delay``.
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    ceiling = min(max_delay, base_delay * 2.0 ** (attempt - 1))
    delay = ceiling * (JITTER_FLOOR + (1.0 - JITTER_FLOOR) * rand())
    if retry_after is not None:
        if retry_after > max_delay:
            return None
        delay = max(delay, retry_after)
    return delay


async def with_retries(
    call: Callable[[], AsyncIterator[StreamEvent]],
    *,
    max_retries: int,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
    base_delay: float = DEFAULT_BASE_DELAY,
    max_delay: float = DEFAULT_MAX_DELAY,
) -> AsyncGenerator[StreamEvent, None]:
    """Run ``call()`` and retry it up to ``max_retries`` more times on retryable failures.

    Contract:

    - Every :class:`~recursa.models.types.TextDelta` and
      :class:`~recursa.models.types.ToolCallDelta` of every attempt is passed on.
    - A retryable ``Failed`` with attempts left becomes
      ``Retrying(kind, message, attempt, delay)``, then ``await sleep(delay)``,
      then a fresh ``call()``. ``attempt`` counts retries from 1.
    - A non-retryable ``Failed``, the last attempt's ``Failed``, and a
      ``retry_after`` above ``max_delay`` are passed on as the terminal event.
    - An attempt that ends without a terminal event breaks the provider
      contract; it is treated as ``Failed("malformed")``. Events an attempt
      yields after its terminal event are dropped.
    - Each attempt's iterator is closed before the next starts, and when the
      consumer stops early or is cancelled (cancellation propagates).
    """
    if max_retries < 0:
        raise ValueError("max_retries cannot be negative")
    attempt = 0
    while True:
        terminal: Done | Failed | None = None
        stream = call()
        try:
            async for event in stream:
                if isinstance(event, Done | Failed):
                    terminal = event
                    break
                yield event
        finally:
            await _close(stream)
        if terminal is None:
            terminal = Failed("malformed", "provider stream ended without Done or Failed")
        if isinstance(terminal, Done):
            yield terminal
            return
        if terminal.kind not in RETRYABLE_KINDS or attempt >= max_retries:
            yield terminal
            return
        delay = backoff_delay(
            attempt + 1,
            base_delay=base_delay,
            max_delay=max_delay,
            rand=rand,
            retry_after=terminal.retry_after,
        )
        if delay is None:
            yield terminal
            return
        attempt += 1
        yield Retrying(terminal.kind, terminal.message, attempt, delay)
        await sleep(delay)


async def _close(stream: AsyncIterator[StreamEvent]) -> None:
    """Close an attempt's iterator if it can be closed (async generators can)."""
    aclose: Callable[[], Awaitable[object]] | None = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


__all__ = ["DEFAULT_BASE_DELAY", "DEFAULT_MAX_DELAY", "backoff_delay", "with_retries"]

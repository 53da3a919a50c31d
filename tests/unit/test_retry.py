"""with_retries: events pass through, retryable failures become Retrying plus a
fresh attempt after a jittered exponential backoff, and there is exactly one
terminal event. Time is injected: nothing here sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from recursa.errors import FailureKind
from recursa.models.retry import backoff_delay, with_retries
from recursa.models.types import (
    AssistantMessage,
    Done,
    Failed,
    Retrying,
    StreamEvent,
    TextDelta,
    Usage,
)

DONE = Done(AssistantMessage("ok"), Usage(10, 2))


def failed(kind: FailureKind, retry_after: float | None = None) -> Failed:
    return Failed(kind, f"fake: {kind}", retry_after=retry_after)


class Script:
    """A provider call that plays one event list per attempt and records closes."""

    def __init__(self, *attempts: Sequence[StreamEvent]) -> None:
        self.attempts = list(attempts)
        self.calls = 0
        self.closed = 0

    def __call__(self) -> AsyncIterator[StreamEvent]:
        events = self.attempts[min(self.calls, len(self.attempts) - 1)]
        self.calls += 1
        return self._play(events)

    async def _play(self, events: Sequence[StreamEvent]) -> AsyncIterator[StreamEvent]:
        try:
            for event in events:
                yield event
        finally:
            self.closed += 1


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def run(
    call: Callable[[], AsyncIterator[StreamEvent]],
    *,
    max_retries: int,
    sleep: Sleeps,
    rand: Callable[[], float] = lambda: 0.0,
    max_delay: float = 60.0,
) -> list[StreamEvent]:
    events = [
        e
        async for e in with_retries(
            call, max_retries=max_retries, sleep=sleep, rand=rand, max_delay=max_delay
        )
    ]
    terminals = [e for e in events if isinstance(e, Done | Failed)]
    assert len(terminals) == 1
    assert events[-1] is terminals[0]
    return events


async def test_a_successful_call_passes_through_untouched() -> None:
    script, sleeps = Script([TextDelta("o"), TextDelta("k"), DONE]), Sleeps()
    events = await run(script, max_retries=3, sleep=sleeps)
    assert events == [TextDelta("o"), TextDelta("k"), DONE]
    assert (script.calls, sleeps.delays, script.closed) == (1, [], 1)


async def test_a_retryable_failure_becomes_retrying_and_a_fresh_attempt() -> None:
    script = Script([TextDelta("par"), failed("server_error")], [TextDelta("ok"), DONE])
    sleeps = Sleeps()
    events = await run(script, max_retries=2, sleep=sleeps)
    assert events == [
        TextDelta("par"),
        Retrying("server_error", "fake: server_error", 1, 0.5),
        TextDelta("ok"),
        DONE,
    ]
    assert sleeps.delays == [0.5]
    assert script.closed == 2


async def test_backoff_doubles_per_attempt_and_is_capped() -> None:
    script, sleeps = Script([failed("overloaded")]), Sleeps()
    events = await run(script, max_retries=4, sleep=sleeps, max_delay=3.0)
    # rand() == 0 keeps the jitter floor: half of 1, 2, then the cap of 3.
    assert sleeps.delays == [0.5, 1.0, 1.5, 1.5]
    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2, 3, 4]
    assert events[-1] == failed("overloaded")
    assert script.calls == 5


@pytest.mark.parametrize(("rand", "low", "high"), [(0.0, 2.0, 2.0), (0.999999, 3.99, 4.0)])
def test_jitter_keeps_delays_between_half_and_all_of_the_backoff(
    rand: float, low: float, high: float
) -> None:
    delay = backoff_delay(3, base_delay=1.0, rand=lambda: rand)
    assert delay is not None
    assert low <= delay <= high


@pytest.mark.parametrize("kind", ["auth", "invalid_request", "context_overflow", "unknown"])
async def test_non_retryable_failures_end_the_stream_at_once(kind: FailureKind) -> None:
    script, sleeps = Script([failed(kind)], [DONE]), Sleeps()
    events = await run(script, max_retries=5, sleep=sleeps)
    assert events == [failed(kind)]
    assert (script.calls, sleeps.delays) == (1, [])


async def test_the_last_failure_is_returned_when_retries_run_out() -> None:
    script, sleeps = Script([failed("rate_limit")], [failed("timeout")]), Sleeps()
    events = await run(script, max_retries=1, sleep=sleeps)
    assert events[-1] == failed("timeout")
    assert script.calls == 2
    assert len(sleeps.delays) == 1


async def test_zero_retries_means_one_attempt() -> None:
    script, sleeps = Script([failed("network")], [DONE]), Sleeps()
    assert await run(script, max_retries=0, sleep=sleeps) == [failed("network")]
    assert script.calls == 1


async def test_retry_after_replaces_a_shorter_backoff() -> None:
    script, sleeps = Script([failed("rate_limit", retry_after=7.0)], [DONE]), Sleeps()
    events = await run(script, max_retries=1, sleep=sleeps)
    assert sleeps.delays == [7.0]
    assert Retrying("rate_limit", "fake: rate_limit", 1, 7.0) in events


async def test_retry_after_beyond_max_delay_gives_up_with_the_failure() -> None:
    script, sleeps = Script([failed("rate_limit", retry_after=600.0)], [DONE]), Sleeps()
    events = await run(script, max_retries=3, sleep=sleeps, max_delay=60.0)
    assert events == [failed("rate_limit", retry_after=600.0)]
    assert (script.calls, sleeps.delays) == (1, [])


async def test_a_stream_without_a_terminal_event_counts_as_malformed() -> None:
    script, sleeps = Script([TextDelta("cut")], [DONE]), Sleeps()
    events = await run(script, max_retries=1, sleep=sleeps)
    retry = events[1]
    assert isinstance(retry, Retrying)
    assert retry.kind == "malformed"
    assert events[-1] == DONE
    script_once = Script([TextDelta("cut")])
    final = (await run(script_once, max_retries=0, sleep=Sleeps()))[-1]
    assert isinstance(final, Failed)
    assert final.kind == "malformed"


async def test_events_after_the_terminal_event_are_dropped() -> None:
    script = Script([DONE, TextDelta("late"), failed("server_error")])
    assert await run(script, max_retries=2, sleep=Sleeps()) == [DONE]


async def test_closing_early_closes_the_attempt() -> None:
    script = Script([TextDelta("a"), TextDelta("b"), DONE])
    stream = with_retries(script, max_retries=1, sleep=Sleeps())
    assert await anext(stream) == TextDelta("a")
    await stream.aclose()
    assert script.closed == 1


async def test_cancellation_during_the_backoff_propagates() -> None:
    async def cancelled_sleep(delay: float) -> None:
        raise asyncio.CancelledError

    script = Script([failed("server_error")], [DONE])
    stream = with_retries(script, max_retries=2, sleep=cancelled_sleep)
    seen = [await anext(stream)]
    with pytest.raises(asyncio.CancelledError):
        await anext(stream)
    assert isinstance(seen[0], Retrying)
    assert script.calls == 1


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="attempt"):
        backoff_delay(0)
    with pytest.raises(ValueError, match="max_retries"):
        asyncio.run(anext(with_retries(Script([DONE]), max_retries=-1)))

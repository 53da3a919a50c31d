"""The turn loop: call the model, run its cells, feed the results back, repeat
until it answers without code or a limit says stop.

:func:`run_turn` is an async generator of events. It keeps no state of its
own between calls: everything it needs comes through :class:`TurnHooks`, and
everything it does is an event it yields. The session consumes the events in
order and, before resuming the generator, persists each one and applies it to
the conversation; so when the loop asks ``hooks.request()`` for the next call,
the context already holds every event yielded so far.

A turn always ends with exactly one ``TurnEnded`` (unless it is cancelled, in
which case the session records the interruption).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from recursa.config import Limits
from recursa.control.limits import TurnCounters, before_model_call, cell_timeout, time_left
from recursa.models.types import Done, Failed, Request, Retrying, StreamEvent, ToolCall, Usage
from recursa.models.types import TextDelta as ModelTextDelta
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Event,
    ModelRetry,
    ModelUsage,
    TextDelta,
    TurnEnded,
    TurnStarted,
    UserInput,
)
from recursa.session.cells import CellRequest, check_tool_call, final_answer, parse_fenced

MAX_EMPTY_REPLIES = 2

REPEATED_CELL_NOTE = (
    "[this cell is the same as your previous one; running it again will not change anything. "
    "Try a different approach, or give your final answer.]"
)

EMPTY_REPLY_NUDGE = (
    "Your last reply was empty. Run code with the python tool, or reply with your final answer."
)
EMPTY_REPLY_NUDGE_FENCED = "Your last reply was empty. Reply with one ```python block, or with FINAL ANSWER: followed by the answer."


@dataclass(frozen=True, slots=True)
class TurnHooks:
    """What a turn needs from its session. Each hook's contract:

    - ``model(request)``: one model call, retries included; yields stream
      events ending in exactly one ``Done`` or ``Failed``.
    - ``request()``: the request for the next call, built from the
      conversation as it stands (every event yielded so far is in it).
    - ``execute(cell, call_id, code, time_limit)``: run a cell in the session's
      kernel and return its ``CellFinished``. It must not raise for anything
      the code does (errors, timeouts, a dead kernel are statuses).
    - ``steers()``: the steering inputs that arrived since the last call,
      removed from the inbox; they join the context before the next call.
    - ``cost(usage)``: USD for a call, None when the price is unknown.
    - ``next_cell()``: the next cell number of the session (1, 2, ...).
    - ``clock()``: monotonic seconds.
    """

    model: Callable[[Request], AsyncIterator[StreamEvent]]
    request: Callable[[], Request]
    execute: Callable[[int, str, str, float], Awaitable[CellFinished]]
    steers: Callable[[], list[UserInput]]
    cost: Callable[[Usage], float | None]
    next_cell: Callable[[], int]
    clock: Callable[[], float]
    limits: Limits
    model_ref: str
    fenced: bool


async def run_turn(turn: int, hooks: TurnHooks) -> AsyncIterator[Event]:
    """Run one turn; see the module docstring for the protocol."""
    start = hooks.clock()
    steps = 0
    tokens = 0
    empty_replies = 0
    previous_code: str | None = None
    yield TurnStarted(turn=turn)
    while True:
        counters = TurnCounters(steps=steps, tokens=tokens, elapsed=hooks.clock() - start)
        stop = before_model_call(hooks.limits, counters)
        if stop is not None:
            yield TurnEnded(turn=turn, reason=stop.reason, detail=stop.detail)
            return

        request = hooks.request()
        call_start = hooks.clock()
        outcome: Done | Failed | None = None
        try:
            async with asyncio.timeout(time_left(hooks.limits, counters)):
                async for item in hooks.model(request):
                    match item:
                        case ModelTextDelta(text=text):
                            yield TextDelta(text=text, step=steps + 1)
                        case Retrying():
                            yield ModelRetry(
                                kind=item.kind,
                                message=item.message,
                                attempt=item.attempt,
                                delay=item.delay,
                            )
                        case Done() | Failed():
                            outcome = item
                        case _:
                            pass
        except TimeoutError:
            yield TurnEnded(
                turn=turn,
                reason="max_time",
                detail=f"a model call ran past the turn's time limit of {hooks.limits.max_time:.0f} s (--max-time)",
            )
            return
        steps += 1

        if not isinstance(outcome, Done):
            detail = (
                f"{outcome.kind}: {outcome.message}"
                if outcome is not None
                else "malformed: the model stream ended without a result"
            )
            yield TurnEnded(turn=turn, reason="provider_error", detail=detail)
            return

        usage = outcome.usage
        tokens += usage.total_tokens
        text = outcome.message.text
        cells, answer, ignored = _cells_of(outcome, hooks.fenced, steps)
        calls = (
            tuple(ToolCall(c.call_id, "python", c.code or "") for c in cells)
            if hooks.fenced
            else outcome.message.tool_calls
        )
        yield AssistantReply(text=text, tool_calls=calls, step=steps, fenced=hooks.fenced)
        yield ModelUsage(
            model=hooks.model_ref,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost=hooks.cost(usage),
            latency=hooks.clock() - call_start,
            step=steps,
        )

        if not cells:
            if not text.strip():
                empty_replies += 1
                if empty_replies > MAX_EMPTY_REPLIES:
                    yield TurnEnded(
                        turn=turn,
                        reason="empty_reply",
                        detail=f"the model replied with nothing {empty_replies} times",
                    )
                    return
                nudge = EMPTY_REPLY_NUDGE_FENCED if hooks.fenced else EMPTY_REPLY_NUDGE
                yield UserInput(text=nudge, source="system", mode="steer")
                continue
            yield TurnEnded(turn=turn, reason="answered", answer=answer)
            return
        empty_replies = 0

        for cell in cells:
            number = hooks.next_cell()
            if cell.code is None:
                error = cell.error or "error: nothing was run."
                yield CellFinished(
                    cell=number,
                    call_id=cell.call_id,
                    status="rejected",
                    output=error,
                    chars=len(error),
                )
                continue
            yield CellStarted(cell=number, call_id=cell.call_id, code=cell.code)
            counters = TurnCounters(steps=steps, tokens=tokens, elapsed=hooks.clock() - start)
            result = await hooks.execute(
                number, cell.call_id, cell.code, cell_timeout(hooks.limits, counters)
            )
            notes = []
            if ignored:
                notes.append(f"[only the first code block of a reply runs; {ignored} more ignored]")
            if cell.code.strip() == previous_code:
                # Small models that repeat a cell keep repeating it unless told.
                notes.append(REPEATED_CELL_NOTE)
            previous_code = cell.code.strip()
            if notes:
                result = replace(
                    result, output="\n".join([result.output.rstrip(), *notes]).lstrip()
                )
            yield result
        for steer in hooks.steers():
            yield steer


def _cells_of(done: Done, fenced: bool, step: int) -> tuple[list[CellRequest], str | None, int]:
    """The cells a reply asks for, its answer (when it has no cells), and ignored blocks."""
    if fenced:
        parsed = parse_fenced(done.message.text)
        if parsed.code is None:
            return [], parsed.answer, 0
        return [CellRequest(f"fenced_{step}", parsed.code)], None, parsed.ignored_blocks
    cells = [check_tool_call(call) for call in done.message.tool_calls]
    return cells, (None if cells else final_answer(done.message.text)), 0


__all__ = ["MAX_EMPTY_REPLIES", "TurnHooks", "run_turn"]

"""The turn loop: call the model, run its cells, feed the results back, repeat
until it answers without code or a limit says stop.

:func:`run_turn` is an async generator of events. It keeps no state of its
own between calls: everything it needs comes through :class:`TurnHooks`, and
everything it does is an event it yields. The session consumes the events in
order and, before resuming the generator, persists each one and applies it to
the conversation; so when the loop asks ``hooks.request()`` for the next call,
the context already holds every event yielded so far.

A turn always ends with exactly one ``TurnEnded`` (unless it is cancelled, in
which case the session records the interruption). The model's own mistakes
never end a turn at once: an empty reply, a reply cut off at the output limit
or a cell repeated verbatim is told to the model, and only when it keeps
happening does the turn stop, with a reason that says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from recursa.config import Limits
from recursa.control.budget import Admission, Ticket
from recursa.control.limits import (
    Stop,
    TurnCounters,
    before_model_call,
    cell_timeout,
    time_left,
)
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

MAX_NUDGES = 2
"""Consecutive empty or cut-off replies the model is told about before the turn stops."""

REFUSE_REPEAT_AT = 3
"""The third identical cell in a row is not run; the model is told instead."""

STUCK_AT = 5
"""The fifth identical cell in a row ends the turn as ``stuck``."""

REPEATED_CELL_NOTE = (
    "[this cell is the same as your previous one; running it again will not change anything. "
    "Try a different approach, or give your final answer.]"
)
REFUSED_REPEAT = (
    "not run: this cell is identical to your previous {n} cells, so its output would be the same. "
    "Change your approach, or reply with your final answer."
)
EMPTY_NUDGE = (
    "Your last reply was empty. Run code with the python tool, or reply with your final answer."
)
EMPTY_NUDGE_FENCED = "Your last reply was empty. Reply with one ```python block, or with your final answer in plain text."
CUT_OFF_NUDGE = (
    "Your last reply was cut off at the output limit, so it was not used. "
    "Reply again, more briefly."
)


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
    - ``deliver_steers()``: put the steering messages that arrived since the
      last call into the context (the session records their events itself,
      each atomically with marking its message delivered); returns how many.
    - ``cost(usage)``: USD for a call, None when the price is unknown.
    - ``next_cell()``: the next cell number of the session (1, 2, ...).
    - ``clock()``: monotonic seconds.
    - ``admit(request)``: before each model call: a :class:`Ticket` (with a cap
      on the call's output, when a budget needs one) or a ``Stop`` when a budget
      of the session's subtree is spent; ``settle(ticket, usage)`` after the
      call, with its usage (None when it failed).
    - ``make_room(overflow)``: before each model call, after the limits are
      checked: compact the context if it nears the model's window (with
      ``overflow``: because the provider just refused it as too long). It
      records its own events (the summary call's usage, ``compacted``) and
      returns whether it compacted.

    The loop yields while a model call's time limit is armed, which is safe
    because the session handles each event synchronously (it never awaits
    between receiving an event and resuming the loop).
    """

    model: Callable[[Request], AsyncIterator[StreamEvent]]
    request: Callable[[], Request]
    execute: Callable[[int, str, str, float], Awaitable[CellFinished]]
    deliver_steers: Callable[[], int]
    cost: Callable[[Usage], float | None]
    next_cell: Callable[[], int]
    clock: Callable[[], float]
    limits: Limits
    model_ref: str
    fenced: bool
    admit: Callable[[Request], Admission] = lambda request: Ticket(0, None)
    settle: Callable[[Ticket, Usage | None], None] = lambda ticket, usage: None
    make_room: Callable[[bool], Awaitable[bool]] = lambda overflow: _no_room()


async def _no_room() -> bool:
    return False


@dataclass(frozen=True, slots=True)
class _Reply:
    """A model reply read for the loop: its cells, or its answer, or a reason to nudge."""

    calls: tuple[ToolCall, ...]
    cells: list[CellRequest]
    answer: str | None
    ignored_blocks: int
    nudge: str | None


def _read(done: Done, *, fenced: bool, turn: int, step: int) -> _Reply:
    text = done.message.text
    cut_off = done.stop_reason == "max_tokens"
    if fenced:
        parsed = parse_fenced(text)
        if parsed.code is not None and parsed.complete:
            call = ToolCall(f"fenced_{turn}_{step}", "python", json.dumps({"code": parsed.code}))
            cells = [CellRequest(call.id, parsed.code)]
            return _Reply((call,), cells, None, parsed.ignored_blocks, None)
        if cut_off:
            return _Reply((), [], None, 0, CUT_OFF_NUDGE)
        nudge = None if text.strip() else EMPTY_NUDGE_FENCED
        return _Reply((), [], parsed.answer, 0, nudge)
    calls = done.message.tool_calls
    if calls:
        # Arguments cut off mid-way fail to parse and are rejected with a message.
        return _Reply(calls, [check_tool_call(call) for call in calls], None, 0, None)
    if cut_off:
        return _Reply((), [], None, 0, CUT_OFF_NUDGE)
    return _Reply((), [], final_answer(text), 0, None if text.strip() else EMPTY_NUDGE)


async def run_turn(turn: int, hooks: TurnHooks, *, resume: bool = False) -> AsyncIterator[Event]:
    """Run one turn; see the module docstring for the protocol.

    ``resume``: the turn was cut short (the daemon crashed) and goes on from
    the context as stored: no ``turn_started``; its limits count afresh.
    """
    start = hooks.clock()
    steps = 0
    tokens = 0
    nudges = 0
    previous_code: str | None = None
    repeats = 0
    overflowed = False
    if not resume:
        yield TurnStarted(turn=turn)
    while True:
        counters = TurnCounters(steps=steps, tokens=tokens, elapsed=hooks.clock() - start)
        stop = before_model_call(hooks.limits, counters)
        if stop is not None:
            yield TurnEnded(turn=turn, reason=stop.reason, detail=stop.detail)
            return

        # Room for the call: the context is compacted when it nears the window.
        if await _make_room(hooks, counters, overflow=False) is None:
            yield _out_of_time(turn, hooks.limits)
            return

        # One model call, admitted under the budgets of the session's subtree.
        request = hooks.request()
        admission = hooks.admit(request)
        if isinstance(admission, Stop):
            yield TurnEnded(turn=turn, reason=admission.reason, detail=admission.detail)
            return
        if admission.max_output_tokens is not None:
            cap = admission.max_output_tokens
            if request.max_output_tokens is not None:
                cap = min(cap, request.max_output_tokens)
            request = replace(request, max_output_tokens=cap)
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
            limit = hooks.limits.max_time or 0
            detail = f"a model call ran past the turn's time limit of {limit:.0f} s (--max-time)"
            yield TurnEnded(turn=turn, reason="max_time", detail=detail)
            return
        finally:
            hooks.settle(admission, outcome.usage if isinstance(outcome, Done) else None)
        steps += 1
        if isinstance(outcome, Failed) and outcome.kind == "context_overflow" and not overflowed:
            # The window was smaller than thought (or unknown): compact, try once more.
            overflowed = True
            compacted = await _make_room(hooks, counters, overflow=True)
            if compacted is None:
                yield _out_of_time(turn, hooks.limits)
                return
            if compacted:
                continue
        if not isinstance(outcome, Done):
            detail = (
                f"{outcome.kind}: {outcome.message}"
                if outcome is not None
                else "malformed: the model stream ended without a result"
            )
            yield TurnEnded(turn=turn, reason="provider_error", detail=detail)
            return

        # The reply, as it was.
        overflowed = False
        usage = outcome.usage
        tokens += usage.total_tokens
        reply = _read(outcome, fenced=hooks.fenced, turn=turn, step=steps)
        yield AssistantReply(
            text=outcome.message.text, tool_calls=reply.calls, step=steps, fenced=hooks.fenced
        )
        yield ModelUsage(
            model=hooks.model_ref,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            estimated=usage.estimated,
            cost=hooks.cost(usage),
            latency=hooks.clock() - call_start,
            step=steps,
        )

        # What it asks for: cells, another try, or the end of the turn.
        if reply.nudge is not None:
            nudges += 1
            if nudges > MAX_NUDGES:
                empty = reply.nudge in (EMPTY_NUDGE, EMPTY_NUDGE_FENCED)
                what = "empty" if empty else "cut off at the output limit"
                detail = f"the model's last {nudges} replies were {what}"
                yield TurnEnded(
                    turn=turn, reason="empty_reply" if empty else "stuck", detail=detail
                )
                return
            yield UserInput(text=reply.nudge, source="system", mode="steer")
            continue
        nudges = 0

        if not reply.cells:
            if hooks.deliver_steers():  # arrived during the last call: answer them too
                continue
            yield TurnEnded(turn=turn, reason="answered", answer=reply.answer)
            return

        for cell in reply.cells:
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
            code = cell.code.strip()
            repeats = repeats + 1 if code == previous_code else 1
            previous_code = code
            if repeats >= STUCK_AT:
                detail = f"the model sent the same cell {repeats} times in a row"
                yield TurnEnded(turn=turn, reason="stuck", detail=detail)
                return
            if repeats >= REFUSE_REPEAT_AT:
                refusal = REFUSED_REPEAT.format(n=repeats - 1)
                yield CellFinished(
                    cell=number,
                    call_id=cell.call_id,
                    status="rejected",
                    output=refusal,
                    chars=len(refusal),
                )
                continue
            yield CellStarted(cell=number, call_id=cell.call_id, code=cell.code)
            counters = TurnCounters(steps=steps, tokens=tokens, elapsed=hooks.clock() - start)
            result = await hooks.execute(
                number, cell.call_id, cell.code, cell_timeout(hooks.limits, counters)
            )
            notes = []
            if reply.ignored_blocks:
                notes.append(
                    f"[only the first code block of a reply runs; {reply.ignored_blocks} more ignored]"
                )
            if repeats == 2:  # small models that repeat a cell keep repeating it unless told
                notes.append(REPEATED_CELL_NOTE)
            if notes:
                output = "\n".join([result.output.rstrip(), *notes]).lstrip()
                result = replace(result, output=output)
            yield result
        hooks.deliver_steers()


async def _make_room(hooks: TurnHooks, counters: TurnCounters, *, overflow: bool) -> bool | None:
    """``hooks.make_room`` under the turn's time limit; None when the time ran out."""
    try:
        async with asyncio.timeout(time_left(hooks.limits, counters)):
            return await hooks.make_room(overflow)
    except TimeoutError:
        return None


def _out_of_time(turn: int, limits: Limits) -> TurnEnded:
    limit = limits.max_time or 0
    detail = f"compacting the context ran past the turn's time limit of {limit:.0f} s (--max-time)"
    return TurnEnded(turn=turn, reason="max_time", detail=detail)


__all__ = ["MAX_NUDGES", "REFUSE_REPEAT_AT", "STUCK_AT", "TurnHooks", "run_turn"]

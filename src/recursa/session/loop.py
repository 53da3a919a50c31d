"""The turn loop: call the model, run its cells, feed the results back, repeat
until it answers without code or a limit says stop.

:func:`run_turn` is an async generator of events. It keeps no state of its
own between calls: everything it needs comes through :class:`TurnHooks`, and
everything it does is an event it yields. The session consumes the events in
order and, before resuming the generator, persists each one and applies it to
the conversation; so when the loop calls ``hooks.model`` for the next step,
the context already holds every event yielded so far.

The loop knows four things of its session: call the model (through the
session's gateway, which compacts the context first when it must, and admits,
caps, retries and prices the call), run a cell, take steering messages, and
the context (which the model call reads).

A turn always ends with exactly one ``TurnEnded`` (unless it is cancelled, in
which case the session records the interruption). The model's own mistakes
never end a turn at once: an empty reply, a reply cut off at the output limit
(kept in the store, left out of the context) or a cell that repeats one of the
last few is told to the model, and only when it keeps happening does the turn
stop, with a reason that says so.

Fenced-code models (small local ones) also get two answer checks, each at most
once per turn, so a turn gets at most two of them and a conversational reply
is never forced into code: an answer before any cell of the turn has run, and
an answer right after a cell that printed nothing or failed, is sent back once
with a nudge; the next answer is accepted whatever it is.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from recursa.config import Limits
from recursa.control.limits import (
    TurnCounters,
    before_model_call,
    cell_timeout,
    time_left,
)
from recursa.models.types import Done, Failed, ToolCall
from recursa.protocol.calls import CallEnded, CallEvent, Refused
from recursa.protocol.events import (
    AssistantReply,
    CellFinished,
    CellStarted,
    Event,
    TurnEnded,
    TurnEndReason,
    TurnStarted,
    UserInput,
)
from recursa.session.cells import (
    CellRequest,
    check_tool_call,
    final_answer,
    marker_only,
    parse_fenced,
    printed_answer,
    prose_cell,
    repair_answer_marker,
    stated_answer,
)
from recursa.session.gateway import NO_RESULT

MAX_NUDGES = 2
"""Consecutive empty or cut-off replies the model is told about before the turn stops."""

REPEAT_WINDOW = 3
"""In the fenced protocol a cell equal to one of the last this many cells is a
repeat: A B A B ... is caught like A A A (a small model that alternates two
failing cells never ends otherwise). Native-tool turns compare with the
previous cell only."""

REFUSE_REPEAT_AT = 3
"""The third repeated cell in a row is not run; the model is told instead."""

STUCK_AT = 5
"""The fifth repeated cell in a row ends the turn as ``stuck``."""

REPEATED_CELL_NOTE = (
    "[this cell is the same as your previous one; running it again will not change anything. "
    "Try a different approach, or give your final answer.]"
)
ALTERNATED_CELL_NOTE = (
    "[this cell is the same as one you ran {back} cells ago; going back and forth between the "
    "same cells will not change anything. Try a different approach, or give your final answer.]"
)
REFUSED_REPEAT = (
    "not run: this cell is identical to your previous {n} cells, so its output would be the same. "
    "Change your approach, or reply with your final answer."
)
REFUSED_ALTERNATION = (
    "not run: your last {n} cells only repeated earlier ones, and so does this one, so its output "
    "would be the same. Change your approach, or reply with your final answer."
)
REPAIRED_MARKER_NOTE = (
    "[FINAL ANSWER: is not Python, so this cell ran with print(FINAL ANSWER: ...) written as "
    'print(f"FINAL ANSWER: {...}") and bare FINAL ANSWER: lines left out. Print values in '
    "code; write FINAL ANSWER: outside the code block.]"
)
"""Appended to the output of a fenced cell :func:`repair_answer_marker` changed."""
SUGGESTED_ANSWER = (
    " If the output you have, {value}, answers the task, reply: FINAL ANSWER: {value}"
)
"""Added to the notes on a repeated fenced cell when an earlier cell of the turn
printed one short line: a small model that repeats a cell whose output is its
answer copies a concrete reply where it ignores a general rule."""
SUGGESTED_MAX_CHARS = 160
TAKEN_DETAIL = (
    "the answer is the one-line output of a cell the model sent again after it was "
    "offered that line as its answer"
)
"""A fenced turn whose model repeats such a cell a third time ends with that
line as its answer (a small model states an answer by printing it again)."""
EMPTY_NUDGE = (
    "Your last reply was empty. Run code with the python tool, or reply with your final answer."
)
EMPTY_NUDGE_FENCED = "Your last reply was empty. Reply with one ```python block, or with your final answer in plain text."
CUT_OFF_NUDGE = (
    "Your last reply was cut off at the output limit, so it was not used. "
    "Reply again, more briefly."
)
CUT_OFF_NUDGE_FENCED = (
    "Your last reply was cut off at the output limit, so it was not used. Do not write long "
    "values out: reply with one short ```python block that computes and prints them."
)
NO_CODE_NUDGE = (
    "You replied without running code, so nothing checks that answer. Reply with one ```python "
    "block that computes or checks the answer and prints it. If this message needs no code, "
    "repeat your answer after FINAL ANSWER:."
)
NOTHING_PRINTED_NUDGE = (
    "Your last cell printed nothing, so nothing you have seen backs that answer. Send one "
    "```python block that prints the value, or, if you are sure, repeat your answer after "
    "FINAL ANSWER:."
)
FAILED_CELL_NUDGE = (
    "Your last cell failed, so nothing you have seen backs that answer. Send one ```python "
    "block that fixes the error and prints the value, or, if you are sure, repeat your answer "
    "after FINAL ANSWER:."
)


class ModelHook(Protocol):
    """The session's model call for a step; see :class:`TurnHooks`."""

    def __call__(self, step: int, overflow: bool) -> AsyncIterator[CallEvent]: ...


@dataclass(frozen=True, slots=True)
class TurnHooks:
    """What a turn needs from its session. Each hook's contract:

    - ``model(step, overflow)``: one model call over the context as it stands
      (every event yielded so far is in it), through the session's gateway:
      the context is first compacted when it nears the model's window (with
      ``overflow``: because the provider just refused it as too long), then
      the call is admitted under the subtree's budgets, capped, retried and
      priced. Yields ``TextDelta`` and ``ModelRetry`` events, then exactly one
      ``CallEnded`` whose ``usage`` the loop records after the reply.
    - ``execute(cell, call_id, code, time_limit)``: run a cell in the session's
      kernel and return its ``CellFinished``. It must not raise for anything
      the code does (errors, timeouts, a dead kernel are statuses).
    - ``deliver_steers()``: put the steering messages that arrived since the
      last call into the context (the session records their events itself,
      each atomically with marking its message delivered); returns how many.
    - ``next_cell()``: the next cell number of the session (1, 2, ...).
    - ``clock()``: monotonic seconds.
    - ``limits``: the turn's limits (steps, tokens, wall clock).

    The loop yields while a model call's time limit is armed, which is safe
    because the session handles each event synchronously (it never awaits
    between receiving an event and resuming the loop).
    """

    model: ModelHook
    execute: Callable[[int, str, str, float], Awaitable[CellFinished]]
    deliver_steers: Callable[[], int]
    next_cell: Callable[[], int]
    clock: Callable[[], float]
    limits: Limits


@dataclass(frozen=True, slots=True)
class _Reply:
    """A model reply read for the loop: its cells, or its answer, or a reason to nudge."""

    calls: tuple[ToolCall, ...]
    cells: list[CellRequest]
    answer: str | None
    ignored_blocks: int
    nudge: str | None
    fenced: bool = False

    @property
    def cut_off(self) -> bool:
        """Cut off at the output limit and not used (the context leaves it out)."""
        return self.nudge in (CUT_OFF_NUDGE, CUT_OFF_NUDGE_FENCED)


def _read(done: Done, *, fenced: bool, turn: int, step: int, seen: Sequence[str] = ()) -> _Reply:
    text = done.message.text
    cut_off = done.stop_reason == "max_tokens"
    if fenced:
        parsed = parse_fenced(text)
        prose = prose_cell(parsed.code) if parsed.code is not None and parsed.complete else None
        if prose is not None and _backed(_last_word(prose), seen):
            # A sentence in a python fence that ends on a value the model has seen
            # printed: the answer, as a reply without code.
            return _Reply((), [], final_answer(prose), 0, None, fenced=True)
        marked = marker_only(parsed.code) if parsed.code is not None and parsed.complete else None
        if marked is not None and _backed(marked, seen):
            # Only the answer line, put in a fence: not Python, and the value was seen
            # printed: the answer, as a reply without code (not a SyntaxError to loop on).
            return _Reply((), [], marked, 0, None, fenced=True)
        if parsed.code is not None and parsed.complete:
            call = ToolCall(f"fenced_{turn}_{step}", "python", json.dumps({"code": parsed.code}))
            cell = CellRequest(
                call.id,
                parsed.code,
                repaired=repair_answer_marker(parsed.code),
                stated=stated_answer(parsed.code),
            )
            cells = [cell]
            return _Reply((call,), cells, None, parsed.ignored_blocks, None, fenced=True)
        if cut_off:
            return _Reply((), [], None, 0, CUT_OFF_NUDGE_FENCED)
        nudge = None if text.strip() else EMPTY_NUDGE_FENCED
        return _Reply((), [], parsed.answer, 0, nudge)
    calls = done.message.tool_calls
    if calls:
        # Arguments cut off mid-way fail to parse and are rejected with a message.
        return _Reply(calls, [check_tool_call(call) for call in calls], None, 0, None)
    if cut_off:
        return _Reply((), [], None, 0, CUT_OFF_NUDGE)
    return _Reply((), [], final_answer(text), 0, None if text.strip() else EMPTY_NUDGE)


@dataclass(slots=True)
class _Counts:
    """What a turn has done so far, for its limits and the model's mistakes."""

    start: float
    steps: int = 0
    tokens: int = 0
    nudges: int = 0
    recent_code: deque[str] = field(default_factory=lambda: deque(maxlen=1))
    repeats: int = 0
    overflowed: bool = False
    last_cell: CellFinished | None = None
    """The turn's latest cell result (None until a cell has run)."""
    cell_ran: bool = False
    printed: str | None = None
    """The last one-line output of a successful cell this turn (fenced), for
    :data:`SUGGESTED_ANSWER`."""
    seen: list[str] = field(default_factory=list)
    """The outputs of this turn's successful cells (fenced)."""
    asked_for_code: bool = False
    asked_for_output: bool = False

    def counters(self, now: float) -> TurnCounters:
        return TurnCounters(steps=self.steps, tokens=self.tokens, elapsed=now - self.start)


async def run_turn(
    turn: int, hooks: TurnHooks, *, fenced: bool = False, resume: bool = False
) -> AsyncIterator[Event]:
    """Run one turn; see the module docstring for the protocol.

    ``fenced``: the model writes code in fenced blocks instead of tool calls.
    ``resume``: the turn was cut short (the daemon crashed) and goes on from
    the context as stored: no ``turn_started``; its limits count afresh.
    """
    # Native-tool models keep the plain check (the previous cell only); a resumed
    # turn may have run cells before the crash, so it gets no first-answer check.
    window = REPEAT_WINDOW if fenced else 1
    counts = _Counts(start=hooks.clock(), recent_code=deque(maxlen=window), cell_ran=resume)
    if not resume:
        yield TurnStarted(turn=turn)
    while True:
        counters = counts.counters(hooks.clock())
        stop = before_model_call(hooks.limits, counters)
        if stop is not None:
            yield TurnEnded(turn=turn, reason=stop.reason, detail=stop.detail)
            return

        # One model call through the session's gateway, under the turn's time limit.
        ended: CallEnded | None = None
        try:
            async with asyncio.timeout(time_left(hooks.limits, counters)):
                async for item in hooks.model(counts.steps + 1, counts.overflowed):
                    if isinstance(item, CallEnded):
                        ended = item
                    else:
                        yield item
        except TimeoutError:
            yield _out_of_time(turn, hooks.limits)
            return
        outcome = ended.outcome if ended is not None else Failed("malformed", NO_RESULT)
        if isinstance(outcome, Refused):
            yield TurnEnded(turn=turn, reason=outcome.reason, detail=outcome.detail)
            return
        counts.steps += 1
        if isinstance(outcome, Failed):
            if outcome.kind == "context_overflow" and not counts.overflowed:
                # The window was smaller than thought (or unknown): compact, try once more.
                counts.overflowed = True
                continue
            detail = f"{outcome.kind}: {outcome.message}"
            yield TurnEnded(turn=turn, reason="provider_error", detail=detail)
            return

        # The reply, as it was, then its usage (measured with the reply in the context).
        counts.overflowed = False
        counts.tokens += outcome.usage.total_tokens
        reply = _read(outcome, fenced=fenced, turn=turn, step=counts.steps, seen=counts.seen)
        yield AssistantReply(
            text=outcome.message.text,
            tool_calls=reply.calls,
            step=counts.steps,
            fenced=fenced,
            cut_off=reply.cut_off,
        )
        if ended is not None and ended.usage is not None:
            yield ended.usage

        # What it asks for: cells, another try, or the end of the turn.
        if reply.nudge is not None:
            counts.nudges += 1
            if counts.nudges > MAX_NUDGES:
                empty = reply.nudge in (EMPTY_NUDGE, EMPTY_NUDGE_FENCED)
                what = "empty" if empty else "cut off at the output limit"
                detail = f"the model's last {counts.nudges} replies were {what}"
                reason: TurnEndReason = "empty_reply" if empty else "stuck"
                yield TurnEnded(turn=turn, reason=reason, detail=detail)
                return
            yield UserInput(text=reply.nudge, source="system", mode="steer")
            continue
        counts.nudges = 0

        if not reply.cells:
            if hooks.deliver_steers():  # arrived during the last call: answer them too
                continue
            nudge = _answer_check(counts) if fenced else None
            if nudge is not None:
                yield UserInput(text=nudge, source="system", mode="steer")
                continue
            yield TurnEnded(turn=turn, reason="answered", answer=reply.answer)
            return

        async for event in _run_cells(turn, hooks, counts, reply):
            yield event
            if isinstance(event, TurnEnded):
                return
        hooks.deliver_steers()


def _answer_check(counts: _Counts) -> str | None:
    """The nudge for a fenced answer that nothing backs yet, at most one of
    each kind per turn (then the answer is accepted); None to accept it."""
    if not counts.cell_ran:
        if counts.asked_for_code:
            return None
        counts.asked_for_code = True
        return NO_CODE_NUDGE
    last = counts.last_cell
    if last is None or counts.asked_for_output:
        return None
    if last.status in ("error", "timeout", "interrupted", "kernel_died"):
        counts.asked_for_output = True
        return FAILED_CELL_NUDGE
    if last.status == "ok" and not last.output.strip():
        counts.asked_for_output = True
        return NOTHING_PRINTED_NUDGE
    return None


async def _run_cells(
    turn: int, hooks: TurnHooks, counts: _Counts, reply: _Reply
) -> AsyncIterator[Event]:
    """Run a reply's cells in order; a cell repeated too often is refused, and
    one repeated past :data:`STUCK_AT` ends the turn (a ``TurnEnded``, last)."""
    for cell in reply.cells:
        number = hooks.next_cell()
        if cell.code is None:
            counts.last_cell = _rejected(
                number, cell.call_id, cell.error or "error: nothing was run."
            )
            yield counts.last_cell
            continue
        code = cell.code.strip()
        recent = list(counts.recent_code)
        # How many cells back this code last ran (0: not among the recent ones).
        back = next((i for i, c in enumerate(reversed(recent), 1) if c == code), 0)
        same_streak = all(c == code for c in recent[-counts.repeats :])
        counts.repeats = counts.repeats + 1 if back else 1
        counts.recent_code.append(code)
        if counts.repeats >= STUCK_AT:
            what = "the same cell" if same_streak else "cells that repeat earlier ones"
            detail = f"the model sent {what} {counts.repeats} times in a row"
            yield TurnEnded(turn=turn, reason="stuck", detail=detail)
            return
        taken = _kept_repeating(counts) if reply.fenced and back == 1 else None
        if counts.repeats >= REFUSE_REPEAT_AT and taken is not None:
            yield TurnEnded(turn=turn, reason="answered", answer=taken, detail=TAKEN_DETAIL)
            return
        if counts.repeats >= REFUSE_REPEAT_AT:
            refused = REFUSED_REPEAT if same_streak else REFUSED_ALTERNATION
            why = refused.format(n=counts.repeats - 1) + _suggested(counts)
            counts.last_cell = _rejected(number, cell.call_id, why)
            yield counts.last_cell
            continue
        runs = cell.runs or cell.code
        yield CellStarted(cell=number, call_id=cell.call_id, code=runs)
        limit = cell_timeout(hooks.limits, counts.counters(hooks.clock()))
        result = await hooks.execute(number, cell.call_id, runs, limit)
        counts.cell_ran = True
        counts.last_cell = result
        # The model's own code printed its answer: the turn is done once the cell is shown.
        answer = None
        if reply.fenced and result.status == "ok":
            counts.seen.append(result.output)
            _remember_printed(counts, result)
            answer = printed_answer(result.output) or _backed(cell.stated, counts.seen)
        notes = []
        if cell.repaired is not None:
            notes.append(REPAIRED_MARKER_NOTE)
        if reply.ignored_blocks:
            notes.append(
                f"[only the first code block of a reply runs; {reply.ignored_blocks} more ignored]"
            )
        if counts.repeats == 2:  # small models that repeat a cell keep repeating it unless told
            note = REPEATED_CELL_NOTE if back == 1 else ALTERNATED_CELL_NOTE.format(back=back)
            notes.append(note + _suggested(counts))
        if notes:
            output = "\n".join([result.output.rstrip(), *notes]).lstrip()
            result = replace(result, output=output)
        yield result
        if answer is not None:
            yield TurnEnded(turn=turn, reason="answered", answer=answer)
            return


def _last_word(text: str) -> str:
    """The sentence's last word, without the punctuation around it."""
    words = text.split()
    return words[-1].strip(".,;:!?\"'()") if words else ""


def _backed(stated: str | None, seen: Sequence[str]) -> str | None:
    """``stated`` (a ``FINAL ANSWER:`` written inside a cell) when an output the
    model has seen this turn holds it; a value it could not have seen is a guess."""
    value = (stated or "").rstrip(".")
    if not value:
        return None
    whole = re.compile(rf"(?<![\w.]){re.escape(value)}(?!\w|\.\d)")
    return stated if any(whole.search(output) for output in seen) else None


def _kept_repeating(counts: _Counts) -> str | None:
    """The one-line output the model was offered as its answer (the note on the
    cell's second run) when the cell it sends again (the same as the previous
    one) printed exactly that."""
    last = counts.last_cell
    if counts.printed is None or last is None or last.status != "ok":
        return None
    return counts.printed if last.output.strip() == counts.printed else None


def _remember_printed(counts: _Counts, result: CellFinished) -> None:
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    if result.status == "ok" and len(lines) == 1 and len(lines[0]) <= SUGGESTED_MAX_CHARS:
        counts.printed = lines[0]


def _suggested(counts: _Counts) -> str:
    """:data:`SUGGESTED_ANSWER` for the turn's last one-line output, if any."""
    if counts.printed is None:
        return ""
    return SUGGESTED_ANSWER.format(value=counts.printed)


def _rejected(cell: int, call_id: str, why: str) -> CellFinished:
    return CellFinished(cell=cell, call_id=call_id, status="rejected", output=why, chars=len(why))


def _out_of_time(turn: int, limits: Limits) -> TurnEnded:
    limit = limits.max_time or 0
    detail = (
        f"a model call (or compacting the context before it) ran past the turn's time limit "
        f"of {limit:.0f} s (--max-time)"
    )
    return TurnEnded(turn=turn, reason="max_time", detail=detail)


__all__ = ["MAX_NUDGES", "REFUSE_REPEAT_AT", "STUCK_AT", "ModelHook", "TurnHooks", "run_turn"]

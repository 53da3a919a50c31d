"""The compaction controller of one session: it checks the context before each
model call and, when it nears the window (or the agent asks, ``compact.run()``),
replaces a prefix of it with a summary written by a model call.

The decisions (when, where to cut, the prompt, the reply's format) are pure
and live in :mod:`recursa.session.compaction`; this module makes the call and
records what happened, as events through the session's ``record``:

- the summary call's ``model_retry`` events and its ``model_usage`` (step 0:
  it is outside the turn's steps, but counted in the session's usage): the
  call goes through the session's gateway (:mod:`recursa.session.gateway`),
  admitted under its budgets, capped and retried like any other;
- then ``compacted``, which the conversation applies: from that event on, in
  this process and in any replay of the log, the context is the summary
  followed by the entries after the cut.

A compaction that cannot be done (nothing before the last unit, no budget
left, the call failed, an empty summary) changes nothing; a failed automatic
one is recorded as a notice and not tried again until the context has grown
by a step, so a failing summary call does not double every model call.
Compactions are one at a time (a lock): the agent's and the automatic one
never interleave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from recursa.models.types import Failed, Request, UserMessage
from recursa.protocol.calls import Refused
from recursa.protocol.events import (
    Compacted,
    CompactReason,
    Event,
    EventRecord,
    Notice,
)
from recursa.protocol.history import CompactReply
from recursa.session.compaction import (
    CHARS_PER_TOKEN,
    MIN_TRANSCRIPT_CHARS,
    SUMMARY_SYSTEM,
    estimate,
    estimate_tokens,
    keep_budget,
    parse_summary,
    plan_cut,
    summary_prompt,
    summary_tokens,
    threshold,
    transcript_budget,
)
from recursa.session.context import Conversation
from recursa.session.gateway import Gateway

RETRY_AFTER_ENTRIES = 2
"""After a failed automatic compaction, wait for this many more context
entries (a step: a reply and its result) before trying again."""


@dataclass(frozen=True, slots=True)
class CompactorDeps:
    """What a compactor needs from its session."""

    session_id: str
    conversation: Conversation
    window: int | None
    """The model's context window in tokens; None: unknown (no automatic compaction)."""
    system: Callable[[], str]
    """The system prompt the next call gets."""
    gateway: Gateway
    """The session's model-call gateway: the summary call is admitted, capped,
    retried and priced like any other."""
    record: Callable[[Event], EventRecord]
    auto: bool = True
    """False: only the agent's own ``compact.run()`` compacts; a context past the
    window (or a provider's overflow) is not compacted by itself."""


class Compactor:
    def __init__(self, deps: CompactorDeps) -> None:
        self.deps = deps
        self._lock = asyncio.Lock()
        self._failed_at: int | None = None
        """The context's length when an automatic compaction last failed."""

    @property
    def tokens(self) -> int:
        """The context's size now, in tokens (measured where it can be)."""
        conversation = self.deps.conversation
        return estimate(self.deps.system(), conversation.messages, conversation.measured)

    @property
    def due(self) -> bool:
        """The context has passed the window's threshold (never, with no window)."""
        window = self.deps.window
        return window is not None and self.tokens > threshold(window)

    async def make_room(self, overflow: bool = False) -> bool:
        """Before a model call: compact when the context nears the window, or
        (``overflow``) when the provider just said it is over it. True when
        the context was compacted."""
        if not self.deps.auto or not (overflow or self.due):
            return False
        waited = len(self.deps.conversation.entries) - (self._failed_at or 0)
        if self._failed_at is not None and not overflow and waited < RETRY_AFTER_ENTRIES:
            return False
        reply = await self.compact("auto", overflow=overflow)
        return reply.compacted

    async def compact(
        self, reason: CompactReason, instructions: str | None = None, *, overflow: bool = False
    ) -> CompactReply:
        """Compact now. ``auto`` keeps the most recent context (about
        :func:`~recursa.session.compaction.keep_budget`); ``agent`` keeps only
        the step in progress (or the last unit), making the most room."""
        async with self._lock:
            if reason == "auto" and not (overflow or self.due):
                return CompactReply(False, detail="the context fits its window")
            reply = await self._compact(reason, instructions, overflow=overflow)
            if reason == "auto":
                failed = not reply.compacted
                self._failed_at = len(self.deps.conversation.entries) if failed else None
            return reply

    async def _compact(
        self, reason: CompactReason, instructions: str | None, *, overflow: bool
    ) -> CompactReply:
        deps = self.deps
        window = deps.window
        before = self.tokens
        if reason == "agent":
            keep = 0
        elif window is not None and not overflow:
            keep = keep_budget(window)
        else:  # over a window we do not know: keep a quarter of what was there
            keep = before // 4
        entries = list(deps.conversation.entries)
        cut = plan_cut(entries, keep)
        if cut is None:
            detail = "nothing to compact: the context is only the current step"
            return CompactReply(False, tokens_before=before, detail=detail)

        budget = transcript_budget(window)
        if overflow:
            # The request that overflowed was about ``before`` tokens: the real
            # window is smaller than believed, so give the summary half of that.
            budget = min(budget, max(MIN_TRANSCRIPT_CHARS, before * CHARS_PER_TOKEN // 2))
        prompt = summary_prompt(entries[: cut.index], budget, instructions)
        wanted = summary_tokens(window)
        request = Request(
            model=deps.gateway.model_name,
            system=SUMMARY_SYSTEM,
            messages=(UserMessage(prompt),),
            max_output_tokens=wanted,
            cache_key=f"{deps.session_id}/compaction",
        )
        ended = await deps.gateway.complete(request, deps.record)
        outcome = ended.outcome
        if isinstance(outcome, Refused):
            return self._failed(reason, before, f"no budget for the summary: {outcome.detail}")
        if isinstance(outcome, Failed):
            why = f"{outcome.kind}: {outcome.message}"
            return self._failed(reason, before, f"the summary call failed ({why})")
        # A reply past its cap is cut; a token is rarely over six characters.
        summary = parse_summary(outcome.message.text, wanted * CHARS_PER_TOKEN * 2)
        if summary is None:
            return self._failed(reason, before, "the summary call answered with nothing")
        after = estimate_tokens(
            deps.system(),
            [e.message for e in deps.conversation.compacted(summary, cut.through)],
        )
        deps.record(
            Compacted(
                summary=summary,
                through=cut.through,
                tokens_before=before,
                tokens_after=after,
                reason=reason,
                instructions=instructions,
            )
        )
        return CompactReply(True, tokens_before=before, tokens_after=after, through=cut.through)

    def _failed(self, reason: CompactReason, before: int, detail: str) -> CompactReply:
        if reason == "auto":  # the agent's own request gets the reason as its answer
            self.deps.record(Notice(level="warning", text=f"compaction failed: {detail}"))
        return CompactReply(False, tokens_before=before, detail=detail)


__all__ = ["RETRY_AFTER_ENTRIES", "Compactor", "CompactorDeps"]

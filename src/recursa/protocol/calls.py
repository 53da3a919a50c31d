"""The model-call gateway's signature: what every model call yields and returns.

Every model call of the harness (a turn's steps, a compaction summary, a
refinement, a review, later evaluations) goes through one gateway
(:class:`recursa.session.gateway.Gateway`): it admits the call under the
budgets of the caller's subtree, caps its output, retries it, settles it,
prices it and makes its one ``model_usage`` event. This module holds only the
values and the callable types, so that layers below the gateway (the
harness's refine and review) can be handed a call without importing it.

A streamed call yields ``TextDelta`` and ``ModelRetry`` events as they come
and ends with exactly one :class:`CallEnded`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from recursa.models.types import Done, Failed, Request
from recursa.protocol.events import ModelRetry, ModelUsage, TextDelta, TurnEndReason
from recursa.values import frozen


@frozen
class Refused:
    """The gateway made no call: a budget of the caller's subtree is spent.
    ``detail`` is one line for the user and the log."""

    reason: TurnEndReason
    detail: str


@frozen
class CallEnded:
    """The end of one gateway call. ``usage`` is the call's one usage event
    (set exactly when ``outcome`` is a ``Done``); the caller records it."""

    outcome: Done | Failed | Refused
    usage: ModelUsage | None = None


CallEvent = TextDelta | ModelRetry | CallEnded
"""What a streamed gateway call yields; the last item is a :class:`CallEnded`."""


class StreamCall(Protocol):
    """One streamed model call through the gateway. ``step`` is the turn's step
    (1, 2, ...) for a call over the session's context, 0 for any other."""

    def __call__(self, request: Request, *, step: int) -> AsyncIterator[CallEvent]: ...


class Complete(Protocol):
    """One model call with no tools through the gateway: a system prompt and a
    user message in, the reply's text out. Its usage is recorded in the books
    of the session it serves. Raises ``ProviderError`` when the call fails
    (retries spent), and ``ProviderError("aborted")`` when a budget of the
    subtree refuses it (the call is not made)."""

    async def __call__(self, system: str, user: str) -> str: ...


__all__ = ["CallEnded", "CallEvent", "Complete", "Refused", "StreamCall"]

"""The model-call gateway: the one path every model call of a session takes.

A turn's steps, the compaction summary, a refinement and a review all call
through a :class:`Gateway`, so each of them gets, in this order:

1. admission under the budgets of the session's subtree (a call a spent
   budget refuses is not made, and ends as :class:`~recursa.protocol.calls.Refused`);
2. the output cap the budgets leave (never above the request's own);
3. retries of retryable failures, each told as a ``model_retry`` event;
4. settlement: the reservation is replaced by the call's real usage in the
   runtime's budgets as soon as the call ends (or is cancelled), so the books
   count it at once;
5. one ``model_usage`` event (input, output, cache-read and cache-write
   tokens, cost, latency on the injected clock), carried by the call's
   :class:`~recursa.protocol.calls.CallEnded`.

A gateway serves one model for one session; the runtime makes them
(:meth:`recursa.runtime.accounts.Accounts.gateway`). It holds no state
between calls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace

from recursa.control.budget import Admission, Ticket
from recursa.control.limits import TurnStop
from recursa.errors import ProviderError
from recursa.models.retry import with_retries
from recursa.models.types import Done, Failed, Request, Retrying, StreamEvent, Usage, UserMessage
from recursa.models.types import TextDelta as ModelTextDelta
from recursa.protocol.calls import CallEnded, CallEvent, Refused
from recursa.protocol.events import Event, ModelRetry, ModelUsage, TextDelta

NO_RESULT = "the model stream ended without a result"

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewayDeps:
    """What a gateway is made of; the runtime supplies it."""

    provider: Callable[[Request], AsyncIterator[StreamEvent]]
    """One attempt of a call: the provider's stream, ending in ``Done`` or ``Failed``."""
    model_name: str
    """The model's name at its provider (what a request's ``model`` holds)."""
    model_ref: str
    """The model as the session's books name it (``provider/model``)."""
    cost: Callable[[Usage], float | None]
    clock: Callable[[], float]
    """Monotonic seconds (the runtime's injected clock): a call's latency."""
    max_retries: int
    retry_sleep: Callable[[float], Awaitable[None]]
    admit: Callable[[Request], Admission] = lambda request: Ticket(0, None)
    """Before the call: a ticket, or a ``TurnStop`` when a subtree budget is spent."""
    settle: Callable[[Ticket, Usage | None], None] = lambda ticket, usage: None
    """After the call, with its usage (None: it used nothing the books count)."""


class Gateway:
    """Model calls for one session and one model; see the module docstring."""

    def __init__(self, deps: GatewayDeps) -> None:
        self.deps = deps

    @property
    def model_name(self) -> str:
        return self.deps.model_name

    @property
    def model_ref(self) -> str:
        return self.deps.model_ref

    async def stream(self, request: Request, *, step: int = 0) -> AsyncGenerator[CallEvent, None]:
        """One call, streamed: ``TextDelta`` (tagged with ``step``) and
        ``ModelRetry`` events as they come, then exactly one ``CallEnded``.
        Text streamed before a ``ModelRetry`` is void. The reservation is
        settled even when the consumer stops early or is cancelled."""
        deps = self.deps
        admission = deps.admit(request)
        if isinstance(admission, TurnStop):
            yield CallEnded(Refused(admission.reason, admission.detail))
            return
        if admission.max_output_tokens is not None:
            cap = admission.max_output_tokens
            if request.max_output_tokens is not None:
                cap = min(cap, request.max_output_tokens)
            request = replace(request, max_output_tokens=cap)
        began = deps.clock()
        outcome: Done | Failed | None = None
        try:
            attempts = with_retries(
                lambda: deps.provider(request),
                max_retries=deps.max_retries,
                sleep=deps.retry_sleep,
            )
            async with aclosing(attempts):
                async for item in attempts:
                    match item:
                        case ModelTextDelta(text=text):
                            yield TextDelta(text=text, step=step)
                        case Retrying(kind=kind, message=message, attempt=attempt, delay=delay):
                            logger.warning(
                                "model call to %r: %s %r; retry %d in %.1f s",
                                deps.model_ref,
                                kind,
                                message,
                                attempt,
                                delay,
                            )
                            yield ModelRetry(
                                kind=kind, message=message, attempt=attempt, delay=delay
                            )
                        case Done() | Failed():
                            outcome = item
                        case _:
                            pass
        finally:
            deps.settle(admission, outcome.usage if isinstance(outcome, Done) else None)
        if outcome is None:
            outcome = Failed("malformed", NO_RESULT)
        if isinstance(outcome, Failed):
            logger.warning(
                "model call to %r failed: %s %r", deps.model_ref, outcome.kind, outcome.message
            )
            yield CallEnded(outcome)
            return
        yield CallEnded(outcome, self._usage(outcome.usage, deps.clock() - began, step))

    async def complete(
        self, request: Request, record: Callable[[Event], object], *, step: int = 0
    ) -> CallEnded:
        """One call, not streamed: its retries and its usage are recorded
        through ``record`` (the books of the session it serves) as they happen."""
        ended: CallEnded | None = None
        async with aclosing(self.stream(request, step=step)) as events:
            async for item in events:
                match item:
                    case ModelRetry():
                        record(item)
                    case CallEnded():
                        ended = item
                    case _:
                        pass
        assert ended is not None  # stream() always ends with one
        if ended.usage is not None:
            record(ended.usage)
        return ended

    async def text(self, system: str, user: str, record: Callable[[Event], object]) -> str:
        """A call with no tools, its reply's text (see :class:`~recursa.protocol.calls.Complete`)."""
        request = Request(
            model=self.deps.model_name, system=system, messages=(UserMessage(user),), tools=()
        )
        ended = await self.complete(request, record)
        match ended.outcome:
            case Done(message=message):
                return message.text
            case Failed(kind=kind, message=message, status=status):
                raise ProviderError(kind, message, status=status)
            case Refused(detail=detail):
                raise ProviderError("aborted", f"the call was not made: {detail}")

    def _usage(self, usage: Usage, latency: float, step: int) -> ModelUsage:
        return ModelUsage(
            model=self.deps.model_ref,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            estimated=usage.estimated,
            cost=self.deps.cost(usage),
            latency=latency,
            step=step,
        )


__all__ = ["Gateway", "GatewayDeps"]

"""The runtime's books: what model calls cost, the budgets they count
against, and the gateways they go through.

Every model call of a session (its turns, its compactions, the refinements
and reviews it causes) is made through a :class:`~recursa.session.gateway.Gateway`
that :meth:`Accounts.gateway` builds for the session and a model. The
gateway admits the call under the budget of every budgeted session from the
caller up to the root (its *chain*) and settles it in the one
:class:`~recursa.control.budget.Budgets` of the runtime as soon as the call
ends: a refinement's call is in the books at once, like a turn's.

A chain's spending so far is read from the store once, when the chain is
first used, and kept in the budgets from then on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from recursa.config import DEFAULT_MAX_RETRIES, Config
from recursa.control.budget import Admission, Budgets, Limit, Spent, Ticket
from recursa.models import catalog
from recursa.models.registry import Providers, parse_ref
from recursa.models.types import (
    AssistantMessage,
    Message,
    Request,
    StreamEvent,
    Usage,
    extends,
)
from recursa.session.gateway import Gateway, GatewayDeps
from recursa.store import SessionRow, Store


class Accounts:
    """Prices, subtree budgets and gateways for the runtime's sessions."""

    def __init__(
        self,
        config: Config,
        store: Store,
        providers: Providers,
        *,
        clock: Callable[[], float],
        retry_sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.config = config
        self.store = store
        self.providers = providers
        self.clock = clock
        self.retry_sleep = retry_sleep
        self.budgets = Budgets()
        """Reservations and spending against subtree budgets."""
        self._chains: dict[str, tuple[Limit, ...]] = {}

    def cost_of(self, model: str) -> Callable[[Usage], float | None]:
        """The cost function for ``model``. Published prices hold for the
        official endpoints only; another server answering to the same model
        name is priced by ``[prices]``, else unknown (None)."""
        table = self.config.providers.get(parse_ref(model).provider)
        builtin = table is None or table.base_url is None

        def cost(usage: Usage) -> float | None:
            return catalog.cost(model, usage, self.config.prices, builtin=builtin)

        return cost

    def priced(self, model: str) -> bool:
        """``model`` has a known price, so a cost limit on its calls can hold."""
        return self.cost_of(model)(Usage(1000, 1000)) is not None

    def gateway(self, session_id: str | None, model: str) -> Gateway:
        """The gateway for ``model``'s calls on behalf of ``session_id``
        (None: a call no session's budget covers, e.g. reviewing a global entry
        nobody proposed). Raises ``ModelUnavailable`` for an unusable model."""
        provider, name = self.providers.get(model)
        table = self.config.providers.get(parse_ref(model).provider)
        cost = self.cost_of(model)

        def call(request: Request) -> AsyncIterator[StreamEvent]:
            return provider.stream(request)

        counted = _Counted()

        def admit(request: Request) -> Admission:
            if session_id is None:
                return Ticket(0, None)
            chars = len(request.system) + counted.chars(request.messages)
            return self.budgets.admit(
                self.chain(session_id),
                input_chars=chars,
                wanted_output=request.max_output_tokens,
                now=self.store.now(),
                cost_of=cost,
            )

        def settle(ticket: Ticket, usage: Usage | None) -> None:
            self.budgets.settle(ticket, usage, cost(usage) if usage is not None else None)

        return Gateway(
            GatewayDeps(
                provider=call,
                model_name=name,
                model_ref=model,
                cost=cost,
                clock=self.clock,
                max_retries=table.max_retries if table else DEFAULT_MAX_RETRIES,
                retry_sleep=self.retry_sleep,
                admit=admit,
                settle=settle,
            )
        )

    def chain(self, session_id: str) -> tuple[Limit, ...]:
        """The budgets a session's model calls count against: its own and every
        ancestor's. Spending so far is read from the store once, then kept."""
        chain = self._chains.get(session_id)
        if chain is not None:
            return chain
        limits: list[Limit] = []
        row: SessionRow | None = self.store.session(session_id)
        while row is not None:
            budget = row.meta.get("budget")
            if isinstance(budget, dict):
                limit = Limit(
                    session_id=row.id,
                    tokens=as_int(budget.get("tokens")),
                    cost=as_float(budget.get("cost")),
                    steps=as_int(budget.get("steps")),
                    time=as_float(budget.get("time")),
                    started=as_float(budget.get("started")) or row.created_at,
                )
                limits.append(limit)
                if row.id not in self.budgets.spent:
                    totals = self.store.usage_totals(row.id, tree=True)
                    self.budgets.spent[row.id] = Spent(
                        tokens=totals.input_tokens + totals.output_tokens,
                        cost=totals.cost,
                        steps=totals.calls,
                    )
            row = self.store.session(row.parent_id) if row.parent_id else None
        chain = tuple(limits)
        self._chains[session_id] = chain
        return chain

    def forget(self, session_id: str) -> None:
        """Drop what is kept for a deleted session."""
        self._chains.pop(session_id, None)


class _Counted:
    """The characters of a gateway's conversation, each message counted once:
    a conversation grows by appending, so a call counts the messages added
    since the last (found by identity, in one pass in C). Any other change
    (a compaction) is counted whole."""

    def __init__(self) -> None:
        self._messages: tuple[Message, ...] = ()
        self._chars = 0

    def chars(self, messages: Sequence[Message]) -> int:
        now, before = tuple(messages), self._messages
        if extends(before, now):
            total = self._chars + sum(map(_chars, now[len(before) :]))
        else:
            total = sum(map(_chars, now))
        self._messages, self._chars = now, total
        return total


def _chars(message: Message) -> int:
    """The characters of a message's text and tool-call arguments (counted,
    not joined: this runs over the whole conversation before every call)."""
    if isinstance(message, AssistantMessage) and message.tool_calls:
        return len(message.text) + sum(len(call.arguments) for call in message.tool_calls)
    return len(message.text)


def as_int(value: object) -> int | None:
    """A stored number as an int (None: not a number)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def as_float(value: object) -> float | None:
    """A stored number as a float (None: not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


__all__ = ["Accounts", "as_float", "as_int"]

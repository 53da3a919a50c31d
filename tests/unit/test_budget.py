from __future__ import annotations

import pytest

from recursa.control.budget import (
    CHARS_PER_TOKEN_ESTIMATE,
    MIN_OUTPUT_TOKENS,
    Budgets,
    Limit,
    Ticket,
)
from recursa.control.limits import TurnStop
from recursa.models.types import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from recursa.runtime import accounts


def per_million(input_price: float, output_price: float):  # type: ignore[no-untyped-def]
    def cost(usage: Usage) -> float:
        return (usage.input_tokens * input_price + usage.output_tokens * output_price) / 1e6

    return cost


FREE = per_million(0, 0)


def test_no_budget_admits_without_a_cap() -> None:
    assert Budgets().admit(
        (), input_chars=10_000, wanted_output=None, now=0, cost_of=FREE
    ) == Ticket(0, None)


def test_output_is_capped_to_what_the_subtree_has_left() -> None:
    budgets = Budgets()
    chain = (Limit("child", tokens=1000),)
    ticket = budgets.admit(chain, input_chars=300, wanted_output=4096, now=0, cost_of=FREE)
    assert isinstance(ticket, Ticket)
    input_estimate = 300 // CHARS_PER_TOKEN_ESTIMATE + 1
    assert ticket.max_output_tokens == 1000 - input_estimate


def test_concurrent_calls_cannot_spend_the_same_tokens() -> None:
    budgets = Budgets()
    chain = (Limit("child", tokens=1000),)
    first = budgets.admit(chain, input_chars=300, wanted_output=400, now=0, cost_of=FREE)
    second = budgets.admit(chain, input_chars=300, wanted_output=400, now=0, cost_of=FREE)
    third = budgets.admit(chain, input_chars=300, wanted_output=400, now=0, cost_of=FREE)
    assert isinstance(first, Ticket) and isinstance(second, Ticket)
    assert first.tokens + second.tokens <= 1000
    assert isinstance(third, TurnStop) and third.reason == "budget"
    # Settling with what a call really used frees the rest of its reservation.
    budgets.settle(first, Usage(input_tokens=90, output_tokens=10), 0.0)
    again = budgets.admit(chain, input_chars=300, wanted_output=100, now=0, cost_of=FREE)
    assert isinstance(again, Ticket)


def test_an_ancestor_budget_limits_every_descendant() -> None:
    budgets = Budgets()
    parent = Limit("parent", tokens=500)
    child_chain = (Limit("child", tokens=10_000), parent)
    ticket = budgets.admit(child_chain, input_chars=600, wanted_output=None, now=0, cost_of=FREE)
    assert isinstance(ticket, Ticket)
    assert ticket.max_output_tokens == 500 - (600 // CHARS_PER_TOKEN_ESTIMATE + 1)
    budgets.settle(ticket, Usage(input_tokens=300, output_tokens=150), 0.0)
    sibling = budgets.admit((parent,), input_chars=300, wanted_output=None, now=0, cost_of=FREE)
    assert isinstance(sibling, TurnStop)
    assert "parent" in sibling.detail


def test_steps_time_and_cost() -> None:
    budgets = Budgets()
    steps = (Limit("s", steps=1),)
    ticket = budgets.admit(steps, input_chars=10, wanted_output=None, now=0, cost_of=FREE)
    assert isinstance(ticket, Ticket)
    assert isinstance(
        budgets.admit(steps, input_chars=10, wanted_output=None, now=0, cost_of=FREE), TurnStop
    )

    timed = (Limit("t", time=60, started=100),)
    assert isinstance(
        budgets.admit(timed, input_chars=10, wanted_output=None, now=159, cost_of=FREE), Ticket
    )
    assert isinstance(
        budgets.admit(timed, input_chars=10, wanted_output=None, now=160, cost_of=FREE), TurnStop
    )

    priced = per_million(1.0, 4.0)  # $1 in, $4 out per million
    costed = (Limit("c", cost=0.001),)
    capped = budgets.admit(costed, input_chars=300, wanted_output=None, now=0, cost_of=priced)
    assert isinstance(capped, Ticket)
    assert capped.max_output_tokens is not None
    assert capped.cost <= 0.001 + 1e-12
    unknown = budgets.admit(
        costed, input_chars=30, wanted_output=None, now=0, cost_of=lambda u: None
    )
    assert isinstance(unknown, TurnStop)


def test_a_call_too_small_to_be_useful_is_refused() -> None:
    budgets = Budgets()
    chain = (Limit("tiny", tokens=MIN_OUTPUT_TOKENS + 10),)
    assert isinstance(
        budgets.admit(chain, input_chars=90, wanted_output=None, now=0, cost_of=FREE), TurnStop
    )


def test_a_conversation_is_counted_once_per_message_as_it_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[object] = []
    count = accounts._chars

    def counting(message: Message) -> int:
        seen.append(message)
        return count(message)

    monkeypatch.setattr(accounts, "_chars", counting)
    history: tuple[Message, ...] = (
        UserMessage("four"),
        AssistantMessage("ok", (ToolCall("c1", "python", '{"code": "1"}'),)),
        ToolResult("c1", "1"),
        AssistantMessage("done"),
    )
    counted = accounts._Counted()

    def fresh(messages: tuple[Message, ...]) -> int:
        return sum(map(count, messages))

    assert counted.chars(history[:2]) == fresh(history[:2]) == 4 + 2 + 13
    assert counted.chars(history) == fresh(history)
    assert seen == list(history)  # the first two were not counted again
    seen.clear()
    compacted = (UserMessage("summary"), *history[2:])
    assert counted.chars(compacted) == fresh(compacted)
    assert seen == list(compacted)  # not an extension: counted whole
    assert counted.chars(()) == 0

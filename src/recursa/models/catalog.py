"""Facts about well-known models: context windows and prices.

A model reference is ``PROVIDER/MODEL`` (see :mod:`recursa.models.registry`).
The built-in table covers the official ``openai`` and ``anthropic`` providers
only: the same model name served by another endpoint (a proxy, vLLM) may be
priced differently, so it is unknown unless the configuration says otherwise.
``local/*`` and ``faux/*`` run here and cost nothing.

Lookups match the model name exactly, then a dated or ``-latest`` variant of
a known name: ``gpt-4o-mini-2024-07-18`` and ``claude-3-5-haiku-20241022``
resolve to ``gpt-4o-mini`` and ``claude-3-5-haiku`` (the longest known name
followed by a version suffix). Other suffixes (``gpt-4o-audio-preview``) are
different models and stay unknown, because a wrong price is worse than none.

Prices are USD per million tokens, as published by each vendor for standard
(non-batch, short-context) use when this table was written. They change: the
configuration's ``[prices]`` table overrides them per reference, and
``[context_windows]`` overrides the windows. An unknown model has no price
and its cost is ``None``, never 0, so the books never claim a call was free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from recursa.config import Price
from recursa.models.types import Usage

FREE_PROVIDERS: frozenset[str] = frozenset({"local", "faux"})
"""Providers whose models run in-process and cost nothing."""

ANTHROPIC_CACHE_WRITE_FACTOR = 1.25
"""Anthropic bills a (five-minute) prompt-cache write at 1.25x the input price."""

_VERSION_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the catalog knows about one model: its window in tokens and its price."""

    context_window: int
    price: Price


def _facts(window: int, input: float, output: float, cached: float | None) -> ModelFacts:
    return ModelFacts(window, Price(input=input, output=output, cached_input=cached))


# Prices as published by OpenAI and Anthropic (USD per million tokens: input,
# output, cached input). Config [prices] overrides any of them.
_OPENAI: dict[str, ModelFacts] = {
    "gpt-5": _facts(400_000, 1.25, 10.00, 0.125),
    "gpt-5-mini": _facts(400_000, 0.25, 2.00, 0.025),
    "gpt-5-nano": _facts(400_000, 0.05, 0.40, 0.005),
    "gpt-4.1": _facts(1_047_576, 2.00, 8.00, 0.50),
    "gpt-4.1-mini": _facts(1_047_576, 0.40, 1.60, 0.10),
    "gpt-4.1-nano": _facts(1_047_576, 0.10, 0.40, 0.025),
    "gpt-4o": _facts(128_000, 2.50, 10.00, 1.25),
    "gpt-4o-mini": _facts(128_000, 0.15, 0.60, 0.075),
    # The first gpt-4o snapshot kept its launch price and has no cache discount.
    "gpt-4o-2024-05-06": _facts(128_000, 5.00, 15.00, None),
    "o1": _facts(200_000, 15.00, 60.00, 7.50),
    "o3": _facts(200_000, 2.00, 8.00, 0.50),
    "o3-mini": _facts(200_000, 1.10, 4.40, 0.55),
    "o4-mini": _facts(200_000, 1.10, 4.40, 0.275),
}

# Anthropic's cached input (a cache read) is 0.1x input; a cache write is
# 1.25x input (ANTHROPIC_CACHE_WRITE_FACTOR), computed in cost().
_ANTHROPIC: dict[str, ModelFacts] = {
    "claude-opus-4-5": _facts(200_000, 5.00, 25.00, 0.50),
    "claude-opus-4-1": _facts(200_000, 15.00, 75.00, 1.50),
    "claude-opus-4": _facts(200_000, 15.00, 75.00, 1.50),
    "claude-sonnet-4-5": _facts(200_000, 3.00, 15.00, 0.30),
    "claude-sonnet-4": _facts(200_000, 3.00, 15.00, 0.30),
    "claude-3-7-sonnet": _facts(200_000, 3.00, 15.00, 0.30),
    "claude-3-5-sonnet": _facts(200_000, 3.00, 15.00, 0.30),
    "claude-haiku-4-5": _facts(200_000, 1.00, 5.00, 0.10),
    "claude-3-5-haiku": _facts(200_000, 0.80, 4.00, 0.08),
    "claude-3-haiku": _facts(200_000, 0.25, 1.25, 0.03),
    "claude-3-opus": _facts(200_000, 15.00, 75.00, 1.50),
}

KNOWN_MODELS: Mapping[str, Mapping[str, ModelFacts]] = {
    "openai": _OPENAI,
    "anthropic": _ANTHROPIC,
}
"""The built-in table: provider name, then model name."""

_ZERO = Price(input=0.0, output=0.0, cached_input=0.0)


def _split(ref: str) -> tuple[str, str]:
    provider, _, model = ref.partition("/")
    return provider, model


def _base_name(model: str, known: Mapping[str, object]) -> str | None:
    """``model`` if known, else the known name it is a dated or -latest variant of."""
    if model in known:
        return model
    stripped = _VERSION_SUFFIX.sub("", model)
    return stripped if stripped != model and stripped in known else None


def _lookup(ref: str, table: Mapping[str, object]) -> object | None:
    """An override by exact reference, or by the reference of the undated name."""
    if ref in table:
        return table[ref]
    provider, model = _split(ref)
    stripped = _VERSION_SUFFIX.sub("", model)
    if stripped != model:
        return table.get(f"{provider}/{stripped}")
    return None


def facts(ref: str) -> ModelFacts | None:
    """The built-in facts for ``ref``, ignoring configuration; None when unknown."""
    provider, model = _split(ref)
    known = KNOWN_MODELS.get(provider)
    if known is None:
        return None
    name = _base_name(model, known)
    return None if name is None else known[name]


def price_for(ref: str, overrides: Mapping[str, Price], *, builtin: bool = True) -> Price | None:
    """The price of ``ref``: a configured override, the built-in price, zero for
    ``local/*`` and ``faux/*``, or None when nothing is known.

    ``builtin=False`` (a provider pointed at its own base URL, e.g. a local
    server answering as ``openai/gpt-4o``) leaves out the built-in prices: the
    published price of a name says nothing about another server's bill.
    """
    override = _lookup(ref, overrides)
    if isinstance(override, Price):
        return override
    if _split(ref)[0] in FREE_PROVIDERS:
        return _ZERO
    if not builtin:
        return None
    found = facts(ref)
    return None if found is None else found.price


def context_window(ref: str, overrides: Mapping[str, int]) -> int | None:
    """The context window of ``ref`` in tokens: configured, built in, or None."""
    override = _lookup(ref, overrides)
    if isinstance(override, int):
        return override
    found = facts(ref)
    return None if found is None else found.context_window


def _is_anthropic(ref: str) -> bool:
    provider, model = _split(ref)
    return provider == "anthropic" or model.startswith("claude-")


def cost(
    ref: str, usage: Usage, overrides: Mapping[str, Price], *, builtin: bool = True
) -> float | None:
    """USD for one call's ``usage``; None when the model's price is unknown, or
    when the usage is only an estimate (the server did not report it).

    ``usage.input_tokens`` counts every prompt token. Cached tokens are billed
    at ``cached_input`` (or ``input`` when that is unknown), cache writes at the
    price's ``cache_write`` when it has one, else 1.25x input for Anthropic
    models and the input price otherwise; the rest of the input at ``input``.
    """
    price = price_for(ref, overrides, builtin=builtin)
    if price is None or (usage.estimated and price != _ZERO):
        return None
    cached = max(0, usage.cached_tokens)
    written = max(0, usage.cache_write_tokens)
    plain = max(0, usage.input_tokens - cached - written)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    write_rate = price.cache_write
    if write_rate is None:
        write_rate = price.input * (ANTHROPIC_CACHE_WRITE_FACTOR if _is_anthropic(ref) else 1.0)
    total = (
        plain * price.input
        + cached * cached_rate
        + written * write_rate
        + max(0, usage.output_tokens) * price.output
    )
    return total / 1_000_000


__all__ = [
    "ANTHROPIC_CACHE_WRITE_FACTOR",
    "FREE_PROVIDERS",
    "KNOWN_MODELS",
    "ModelFacts",
    "context_window",
    "cost",
    "facts",
    "price_for",
]

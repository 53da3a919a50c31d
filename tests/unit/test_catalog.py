"""The model catalog: prices and context windows, dated variants, overrides, and
costs that are None (never 0) for unknown models."""

from __future__ import annotations

import pytest

from recursa.config import Price
from recursa.models.catalog import context_window, cost, facts, price_for
from recursa.models.types import Usage

NO_PRICES: dict[str, Price] = {}
NO_WINDOWS: dict[str, int] = {}


@pytest.mark.parametrize(
    ("ref", "base"),
    [
        ("openai/gpt-4o-mini-2024-07-18", "openai/gpt-4o-mini"),
        ("openai/gpt-4.1-mini-2025-04-14", "openai/gpt-4.1-mini"),
        ("anthropic/claude-3-5-haiku-20241022", "anthropic/claude-3-5-haiku"),
        ("anthropic/claude-3-5-haiku-latest", "anthropic/claude-3-5-haiku"),
        ("anthropic/claude-haiku-4-5-20251001", "anthropic/claude-haiku-4-5"),
    ],
)
def test_dated_variants_resolve_to_their_model(ref: str, base: str) -> None:
    assert price_for(ref, NO_PRICES) == price_for(base, NO_PRICES)
    assert price_for(ref, NO_PRICES) is not None
    assert context_window(ref, NO_WINDOWS) == context_window(base, NO_WINDOWS)


def test_the_longest_known_name_wins() -> None:
    mini = price_for("openai/gpt-4o-mini-2024-07-18", NO_PRICES)
    full = price_for("openai/gpt-4o", NO_PRICES)
    assert mini is not None
    assert full is not None
    assert mini.input < full.input


def test_an_exact_snapshot_entry_beats_its_undated_name() -> None:
    launch = price_for("openai/gpt-4o-2024-05-06", NO_PRICES)
    current = price_for("openai/gpt-4o-2024-08-06", NO_PRICES)
    assert launch == Price(input=5.0, output=15.0, cached_input=None)
    assert current == price_for("openai/gpt-4o", NO_PRICES)


@pytest.mark.parametrize(
    "ref",
    [
        "openai/gpt-4o-audio-preview",  # a different model, not a dated variant
        "openai/gpt-9",
        "anthropic/claude-unknown",
        "vllm/gpt-4o",  # a known name on another endpoint may cost anything
        "nonsense",
    ],
)
def test_unknown_models_have_no_price_and_no_cost(ref: str) -> None:
    assert price_for(ref, NO_PRICES) is None
    assert cost(ref, Usage(1000, 1000), NO_PRICES) is None
    assert context_window(ref, NO_WINDOWS) is None
    assert facts(ref) is None


@pytest.mark.parametrize("ref", ["local/qwen2.5-coder-1.5b", "local//abs/model.gguf", "faux/echo"])
def test_local_and_faux_models_are_free(ref: str) -> None:
    assert cost(ref, Usage(50_000, 2_000, 1_000), NO_PRICES) == 0.0


def test_configured_prices_override_the_table_and_cover_dated_variants() -> None:
    overrides = {"openai/gpt-4o-mini": Price(input=1.0, output=2.0)}
    assert price_for("openai/gpt-4o-mini", overrides) == Price(input=1.0, output=2.0)
    assert price_for("openai/gpt-4o-mini-2024-07-18", overrides) == Price(input=1.0, output=2.0)
    assert cost("vllm/qwen", Usage(1_000_000, 0), {"vllm/qwen": Price(0.5, 1.0)}) == 0.5


def test_openai_cost_bills_cached_tokens_at_the_cached_rate() -> None:
    # gpt-4o-mini: input 0.15, cached 0.075, output 0.60 per million.
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cached_tokens=400_000)
    value = cost("openai/gpt-4o-mini", usage, NO_PRICES)
    assert value == pytest.approx(0.6 * 0.15 + 0.4 * 0.075 + 0.60)


def test_anthropic_cache_writes_cost_a_quarter_more_than_input() -> None:
    # claude-haiku-4-5: input 1.00, cache read 0.10, output 5.00 per million.
    usage = Usage(
        input_tokens=1_000_000, output_tokens=0, cached_tokens=200_000, cache_write_tokens=300_000
    )
    value = cost("anthropic/claude-haiku-4-5", usage, NO_PRICES)
    assert value == pytest.approx(0.5 * 1.00 + 0.2 * 0.10 + 0.3 * 1.25)


def test_unknown_cached_rate_falls_back_to_the_input_rate() -> None:
    overrides = {"vllm/m": Price(input=2.0, output=0.0)}
    usage = Usage(input_tokens=1_000_000, cached_tokens=500_000, cache_write_tokens=250_000)
    assert cost("vllm/m", usage, overrides) == pytest.approx(2.0)


def test_context_windows_come_from_the_table_or_the_configuration() -> None:
    assert context_window("openai/gpt-4o", NO_WINDOWS) == 128_000
    assert context_window("anthropic/claude-haiku-4-5", NO_WINDOWS) == 200_000
    overrides = {"openai/gpt-4o": 64_000, "local/tiny": 2048}
    assert context_window("openai/gpt-4o", overrides) == 64_000
    assert context_window("local/tiny", overrides) == 2048
    assert context_window("local/other", overrides) is None

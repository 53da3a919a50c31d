"""``recursa kernel-env``: the managed environment kernels run in (see
:mod:`recursa.kernel.venv`): show it, make it afresh, install into it."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer

from recursa.cli.commands import WholeHelpGroup
from recursa.cli.root import app
from recursa.cli.tables import Col, print_table
from recursa.config import load_config
from recursa.errors import KernelError

kernel_env_app = typer.Typer(
    cls=WholeHelpGroup,
    help="The Python environment kernels run in: show it, reset it, add packages.",
    no_args_is_help=True,
)
app.add_typer(kernel_env_app, name="kernel-env")


def _progress(line: str) -> None:
    print(line, file=sys.stderr)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


@kernel_env_app.command()
def show(
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Where the environment is, its Python, its packages and their sizes."""
    from recursa.daemon import client as daemon

    config = load_config()
    env = daemon.kernel_env(config)
    ready = env.ready()
    packages = env.packages() if ready else []
    missing = env.missing() if ready else []
    if json_out:
        print(
            json.dumps(
                {
                    "setting": config.kernel.python,
                    "path": str(env.path),
                    "python": str(env.python),
                    "ready": ready,
                    "size": env.size() if ready else 0,
                    "packages": [
                        {"name": p.name, "version": p.version, "size": p.size} for p in packages
                    ],
                    "missing": missing,
                }
            )
        )
        return
    print(f"[kernel] python: {config.kernel.python}")
    print(f"path:            {env.path}")
    if not ready:
        print("state:           not made yet (made on first use, or by recursa kernel-env prepare)")
        return
    print(f"python:          {env.python}")
    print(f"size:            {_size(env.size())}")
    if missing:
        print(f"missing:         {', '.join(missing)} (recursa kernel-env prepare installs them)")
    print()
    if packages:
        print_table(
            (Col("PACKAGE", flex=True), Col("VERSION"), Col("SIZE", right=True)),
            ((p.name, p.version, _size(p.size)) for p in packages),
        )
    else:
        print("no packages of its own (it uses recursa's: ipykernel, pip)")


def _warn_missing(missing: list[str]) -> None:
    if missing:
        print(
            f"warning: the kernel environment lacks {', '.join(missing)} "
            "(pip could not install them; kernels work without them)",
            file=sys.stderr,
        )


@kernel_env_app.command()
def prepare() -> None:
    """Make the environment if needed and install what of the data stack it
    lacks; what is installed in it stays (the quickstart runs this)."""
    from recursa.daemon import client as daemon

    env = daemon.kernel_env(load_config())
    _warn_missing(env.prepare(progress=_progress))
    print(env.path)


@kernel_env_app.command()
def reset(
    bare: Annotated[
        bool, typer.Option("--bare", help="Without the data stack (no network needed).")
    ] = False,
) -> None:
    """Make the environment afresh, with the data stack (numpy, pandas,
    matplotlib, requests, pyyaml); what was installed in it is gone. Refused
    while the daemon runs: its kernels run in it."""
    from recursa.daemon import client as daemon

    config = load_config()
    running = asyncio.run(daemon.daemon_status(config.home))
    if running is not None:
        raise KernelError(
            f"the daemon (pid {running.pid}) runs kernels in the kernel environment; "
            "stop it first: recursa daemon stop"
        )
    env = daemon.kernel_env(config)
    missing = env.create(data_stack=not bare, progress=_progress)
    if not bare:
        _warn_missing(missing)
    print(env.path)


@kernel_env_app.command(context_settings={"ignore_unknown_options": True})
def add(
    packages: Annotated[list[str], typer.Argument(help="What pip install takes.")],
) -> None:
    """pip install packages into the environment (made first if needed); pip's
    own options pass through (``--no-index``, ``-U``)."""
    from recursa.daemon import client as daemon

    daemon.kernel_env(load_config()).install(packages, progress=print)

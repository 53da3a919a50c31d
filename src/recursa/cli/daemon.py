"""``recursa daemon start | stop | status`` and ``recursa shutdown``."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer

from recursa.cli import app
from recursa.config import environment, load_config
from recursa.daemon import process
from recursa.protocol.wire import to_json

daemon_app = typer.Typer(help="The local daemon that owns every session.", no_args_is_help=True)
app.add_typer(daemon_app, name="daemon")


@daemon_app.command("start")
def start() -> None:
    """Start the daemon for RECURSA_HOME (sessions come back as they were)."""
    config = load_config()
    before = asyncio.run(process.status(config.home))
    if before is not None:
        print(f"the daemon is already running (pid {before.pid})")
        return
    state = asyncio.run(process.ensure_running(config.home, env=environment()))
    print(f"daemon started (pid {state.pid})")


@daemon_app.command("stop")
def stop_daemon(
    force: Annotated[
        bool, typer.Option("--force", help="Do not snapshot namespaces; stop at once.")
    ] = False,
) -> None:
    """Stop the daemon: running turns are interrupted, namespaces snapshotted."""
    _shutdown(force)


@daemon_app.command("status")
def status(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Whether a daemon runs, and what it holds. Exit 1 when none runs."""
    config = load_config()
    found = asyncio.run(process.status(config.home))
    if json_out:
        print(json.dumps({"running": found is not None, **(to_json(found) if found else {})}))
    elif found is None:
        print(f"no daemon is running for RECURSA_HOME {config.home}", file=sys.stderr)
    else:
        recovery = " (recovering)" if found.recovering else ""
        print(
            f"daemon pid {found.pid}{recovery}: {found.sessions} sessions, "
            f"{found.loaded} loaded, {found.running} running"
        )
    if found is None:
        raise typer.Exit(1)


@app.command()
def shutdown(
    force: Annotated[
        bool, typer.Option("--force", help="Do not snapshot namespaces; stop at once.")
    ] = False,
) -> None:
    """Stop the daemon (the same as recursa daemon stop)."""
    _shutdown(force)


def _shutdown(force: bool) -> None:
    config = load_config()
    pid = asyncio.run(process.stop(config.home, force=force))
    print(f"daemon stopped (pid {pid})")

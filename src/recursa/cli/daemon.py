"""``recursa daemon start | stop | status | openapi`` and ``recursa shutdown``."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer

from recursa.cli.commands import WholeHelpGroup
from recursa.cli.common import ForceOpt
from recursa.cli.exits import EXIT_FAILED
from recursa.cli.root import app
from recursa.environ import home_dir
from recursa.protocol.wire import DaemonStatus, to_json

daemon_app = typer.Typer(
    cls=WholeHelpGroup, help="The local daemon that owns every session.", no_args_is_help=True
)
app.add_typer(daemon_app, name="daemon")


@daemon_app.command("start")
def start() -> None:
    """Start the daemon for RECURSA_HOME (sessions come back as they were)."""
    from recursa.config import load_config
    from recursa.daemon import client as daemon

    config = load_config()
    before = asyncio.run(daemon.daemon_status(config.home))
    if before is not None:
        print(f"the daemon is already running (pid {before.pid})")
        return
    print(f"daemon started (pid {asyncio.run(daemon.start_daemon(config))})")


@daemon_app.command("stop")
def stop_daemon(
    force: ForceOpt = False,
) -> None:
    """Stop the daemon: running turns are interrupted, namespaces snapshotted."""
    _shutdown(force)


@daemon_app.command("status")
def status(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Whether a daemon runs, and what it holds. Exit 1 when none runs."""
    from recursa.daemon import client as daemon

    home = home_dir()  # the daemon's own configuration is not this call's business
    found = asyncio.run(daemon.daemon_status(home))
    if json_out:
        print(json.dumps(status_json(found)))
    elif found is None:
        print(f"no daemon is running for RECURSA_HOME {home}", file=sys.stderr)
    else:
        recovery = " (recovering)" if found.recovering else ""
        print(
            f"daemon pid {found.pid}{recovery}: {found.sessions} sessions, "
            f"{found.loaded} loaded, {found.running} running"
        )
    if found is None:
        raise typer.Exit(EXIT_FAILED)


def status_json(found: DaemonStatus | None) -> dict[str, object]:
    """``daemon status --json``: ``running`` says whether a daemon runs (a bool);
    the count of sessions running a turn is ``running_sessions``."""
    if found is None:
        return {"running": False}
    fields = to_json(found)
    fields["running_sessions"] = fields.pop("running")
    return {"running": True, **fields}


@daemon_app.command("openapi")
def openapi() -> None:
    """Print the daemon's people's API as an OpenAPI document (JSON)."""
    from recursa.daemon import client as daemon

    print(json.dumps(daemon.openapi_document(), indent=2))


@app.command()
def shutdown(
    force: ForceOpt = False,
) -> None:
    """Stop the daemon (the same as recursa daemon stop)."""
    _shutdown(force)


def _shutdown(force: bool) -> None:
    from recursa.daemon import client as daemon

    # By the home alone: a daemon is stopped even when the configuration file
    # was broken after it started.
    pid = asyncio.run(daemon.stop_daemon(home_dir(), force=force))
    print(f"daemon stopped (pid {pid})")

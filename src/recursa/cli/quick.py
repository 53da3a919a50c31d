"""Calls that only read from a running daemon, answered without the full
command line: ``recursa agents`` and ``recursa agents --json``.

Most of a CLI call's time is imports (typer, pydantic for the wire types,
asyncio for the client); a listing needs none of them. Here a call makes one
read (:mod:`recursa.daemon.peek`: the state and token files, one ``GET`` over
the unix socket) and prints the same table (:mod:`recursa.cli.listing`) or
the same JSON as the full path does.

Anything out of the ordinary is the full path's to handle, with its errors
and its recoveries: no daemon (it starts one), a daemon of another protocol,
a refused token, a reply that is not what this version expects. The quick
path then prints nothing and :func:`answer` returns None.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from recursa.cli.listing import AGENT_COLUMNS, NO_SESSIONS, agent_rows
from recursa.cli.tables import print_listing
from recursa.daemon import peek


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of a call answered here, or None when the full command
    line is to answer it (then nothing was printed)."""
    if list(argv) not in (["agents"], ["agents", "--json"]):
        return None
    body = peek.get("/sessions")
    if body is None:
        return None
    json_out = "--json" in argv
    try:
        hook = None if json_out else (lambda fields: SimpleNamespace(**fields))
        items: Any = json.loads(body, object_hook=hook)
        if not isinstance(items, list):
            return None
        rows = [] if json_out else list(agent_rows(items, time.time()))
    except (ValueError, TypeError, AttributeError):
        return None  # not this version's reply: the full path says what is wrong
    print_listing(items, json_out, NO_SESSIONS, AGENT_COLUMNS, rows)
    return 0


__all__ = ["answer"]

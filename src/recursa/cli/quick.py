"""Calls that only read from a running daemon, answered without the full
command line: ``recursa agents [--json]``, ``recursa usage SESSION [--json]``
and ``recursa logs SESSION [--json]``.

Most of a CLI call's time is imports (typer for the command line, asyncio
for the client); a listing needs neither. Here a call makes its
reads (:mod:`recursa.daemon.peek`: the state and token files, a ``GET`` over
the unix socket) and prints the same table (:mod:`recursa.cli.listing`), the
same transcript (:mod:`recursa.cli.render`) or the same JSON as the full path
does. A history longer than :data:`MAX_LOG_BYTES` is the full path's, which
streams it.

Anything out of the ordinary is the full path's to handle, with its errors
and its recoveries: no daemon (it starts one), a daemon of another protocol,
a refused token, a reply that is not what this version expects. The quick
path then prints nothing and :func:`answer` returns None.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from recursa.cli.exits import EXIT_FAILED
from recursa.cli.listing import (
    AGENT_COLUMNS,
    NO_SESSIONS,
    USAGE_COLUMNS,
    agent_rows,
    usage_json,
    usage_rows,
)
from recursa.cli.tables import print_listing, print_table
from recursa.daemon import peek
from recursa.environ import color_enabled

MAX_LOG_BYTES = 8 << 20
"""The longest history (its NDJSON) ``logs`` reads whole here."""

REFERENCE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,199}")
"""A session reference the quick path sends as it is (ids, and plain names);
any other (text to quote or to refuse) is the full path's."""


def answer(argv: Sequence[str]) -> int | None:
    """The exit code of a call answered here, or None when the full command
    line is to answer it (then nothing was printed)."""
    words = [a for a in argv if a != "--json"]
    json_out = len(words) < len(argv)
    if len(argv) - len(words) > 1 or not words or argv[0] != words[0]:
        return None
    if words == ["agents"]:
        show = _agents(json_out)
    elif len(words) == 2 and words[0] == "usage" and REFERENCE.fullmatch(words[1]):
        show = _usage(words[1], json_out)
    elif len(words) == 2 and words[0] == "logs" and REFERENCE.fullmatch(words[1]):
        show = _logs(words[1], json_out)
    else:
        return None
    if show is None:
        return None
    try:
        show()
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:  # a reader that stopped (| head): no more output
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    return 0


def _agents(json_out: bool) -> Callable[[], None] | None:
    """What prints the session tree, all of it worked out (nothing printed
    yet), or None for the full path."""
    body = peek.get("/sessions")
    if body is None:
        return None
    try:
        items: Any = json.loads(body, object_hook=None if json_out else _namespace)
        if not isinstance(items, list) or (
            json_out and not all(isinstance(item, dict) for item in items)
        ):
            return None
        rows = [] if json_out else list(agent_rows(items, time.time()))
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None  # not this version's reply: the full path says what is wrong
    return lambda: print_listing(items, json_out, NO_SESSIONS, AGENT_COLUMNS, rows)


def _usage(ref: str, json_out: bool) -> Callable[[], None] | None:
    """What prints a session's usage tree, worked out, or None (no such
    session, among others: the full path says so)."""
    body = peek.get(f"/sessions/{ref}/usage")
    if body is None:
        return None
    try:
        node = json.loads(body, object_hook=_namespace)
        if json_out:
            text = json.dumps({"session": usage_json(node)}, ensure_ascii=False)
            return lambda: print(text)
        rows = usage_rows(node, 0)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    return lambda: print_table(USAGE_COLUMNS, rows)


def _logs(ref: str, json_out: bool) -> Callable[[], None] | None:
    """What prints a session's history, worked out, or None (a history too
    long to read whole, an error or shutdown line, among others)."""
    from recursa.cli.render import TranscriptPrinter, json_line, session_footer
    from recursa.protocol.events import record_from_dict, record_to_dict

    body = peek.get(f"/sessions/{ref}/events?after=0&follow=0", limit=MAX_LOG_BYTES)
    if body is None:
        return None
    try:
        records = []
        for line in body.splitlines():
            data = json.loads(line) if line.strip() else None
            if data is None or data.get("type") == "heartbeat":
                continue
            record = record_from_dict(data)  # an error or shutdown line is no event
            if record.seq:
                records.append(record)
        # Rendered here, whole, before anything is printed: a record this
        # version cannot show is the full path's to report.
        text = io.StringIO()
        if json_out:
            for record in records:
                json_line(record_to_dict(record), text)
        else:
            info = peek.get(f"/sessions/{ref}")
            if info is None:
                return None
            printer = TranscriptPrinter(out=text, color=color_enabled(sys.stdout))
            for record in records:
                printer.handle(record)
            print(session_footer(json.loads(info, object_hook=_namespace)), file=text)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return lambda: print(text.getvalue(), end="")


def _namespace(fields: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(**fields)


__all__ = ["answer"]

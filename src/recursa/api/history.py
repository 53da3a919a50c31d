"""``history`` and ``compact``: this session's full record, and its context, from a kernel.

The model's context is compacted when it nears the model's window: an early
part of it is replaced by a summary. The events themselves are never lost:
``history`` reads the session's event log, which holds every message, every
cell's code and the full output of every cell (the model was shown a bounded
part). ``compact.run()`` compacts on request, to make room before a long piece
of work. Both reach the daemon with the kernel's token, so they always read
and change the caller's own session.

Arguments are checked here, before any request: a wrong type is a TypeError,
a bad value a ValueError.
"""

from __future__ import annotations

from typing import Any

from recursa.api import client

DEFAULT_RESULTS = 20
MAX_RESULTS = 200
DEFAULT_EVENTS = 50
MAX_EVENTS = 1000

Hit = dict[str, Any]
"""One search hit: seq, type, turn, ts, text (an excerpt around the match), cell,
full (the text is from the cell's complete output)."""
EventDict = dict[str, Any]
"""One event: its fields (``type`` first), seq, session_id, ts and turn."""


class History:
    """This session's full history, including what compaction took out of context.

    ``await history.search(query, limit=20)``
        Events whose text contains ``query`` (case-insensitive), newest first:
        messages, replies, cell code, cell outputs (searched in full, even the
        parts you were never shown), answers and notices. Each hit is a dict:
        ``seq``, ``type``, ``turn``, ``ts``, ``text`` (an excerpt around the
        match), ``cell`` and ``full`` (the excerpt is from the cell's complete output).
    ``await history.events(type=None, after=None, limit=50)``
        Events oldest first, as dicts (their fields, ``seq``, ``ts``, ``turn``):
        those after seq ``after``, or the newest ``limit``. ``type`` keeps one
        kind: ``user_input``, ``assistant_reply``, ``cell_started``,
        ``cell_finished``, ``turn_ended``, ``compacted``, ...
    ``await history.turn(n)``
        Every event of turn ``n``: its inputs, replies, cells and end.
    ``await history.output(cell)``
        The complete output of cell ``cell`` (a str), however long it was.
    """

    async def search(self, query: str, limit: int = DEFAULT_RESULTS) -> list[Hit]:
        """Events matching ``query`` (case-insensitive substring), newest first."""
        __tracebackhide__ = True
        what = "history.search()"
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if not query:
            raise ValueError("query is empty")
        body = {"query": query, "limit": _count(limit, "limit", MAX_RESULTS)}
        data = await client.run("history_search", body, what=what)
        return _dicts(data, what)

    async def events(
        self, type: str | None = None, after: int | None = None, limit: int = DEFAULT_EVENTS
    ) -> list[EventDict]:
        """Events oldest first: after seq ``after``, or the newest ``limit``."""
        __tracebackhide__ = True
        what = "history.events()"
        if type is not None and not isinstance(type, str):
            raise TypeError(f"type must be a str, not {_name(type)}")
        if after is not None:
            if isinstance(after, bool) or not isinstance(after, int):
                raise TypeError(f"after must be an int (a seq), not {_name(after)}")
            if after < 0:
                raise ValueError("after must be 0 or more")
        body = {"type": type, "after": after, "limit": _count(limit, "limit", MAX_EVENTS)}
        data = await client.run("history_events", body, what=what)
        return _dicts(data, what)

    async def turn(self, n: int) -> list[EventDict]:
        """Every event of turn ``n``, in order."""
        __tracebackhide__ = True
        what = "history.turn()"
        number = _whole(n, "n")
        return _dicts(await client.run("history_turn", {"turn": number}, what=what), what)

    async def output(self, cell: int) -> str:
        """The complete output of cell ``cell``."""
        __tracebackhide__ = True
        what = "history.output()"
        number = _whole(cell, "cell")
        data = await client.run("history_output", {"cell": number}, what=what)
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise client.malformed(what)
        return str(data["text"])

    def __repr__(self) -> str:
        return (
            "<history: await history.search(query), history.events(type=None, after=None, "
            "limit=50), history.turn(n), history.output(cell); help(history)>"
        )


class Compact:
    """Compaction of your context, on request.

    ``await compact.run(instructions=None)``
        Replace everything in your context but the step in progress with a
        summary written by a model call; ``instructions`` says what the summary
        must keep. Returns ``{"compacted", "tokens_before", "tokens_after",
        "through", "detail"}`` (``detail`` says why nothing was compacted).
        The originals stay readable with ``history``.

    The context is also compacted by itself when it nears the model's window.
    """

    async def run(self, instructions: str | None = None) -> dict[str, Any]:
        """Compact the context now; the outcome (see ``help(compact)``)."""
        __tracebackhide__ = True
        from recursa.protocol.history import CompactReply
        from recursa.protocol.wire import to_json

        what = "compact.run()"
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be a str, not {_name(instructions)}")
        body = {"instructions": instructions}
        data = await client.run("compact", body, what=what)
        return to_json(client.decode(CompactReply, data, what))

    def __repr__(self) -> str:
        return "<compact: await compact.run(instructions=None); help(compact)>"


def _count(value: object, name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {_name(value)}")
    if not 1 <= value <= most:
        raise ValueError(f"{name} must be from 1 to {most}, not {value}")
    return value


def _whole(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {_name(value)}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, not {value}")
    return value


def _dicts(data: object, what: str) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise client.malformed(what)
    return data


def _name(value: object) -> str:
    return type(value).__name__


history = History()
compact = Compact()

__all__ = ["Compact", "History", "compact", "history"]

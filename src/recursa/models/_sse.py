"""A small incremental decoder for server-sent events (the HTML ``text/event-stream`` format).

Both HTTP adapters read their streaming responses as raw bytes and decode the
events here instead of in the SDKs, whose per-chunk pydantic object model costs
more than the rest of a step's model-side work. The rules are the standard's,
as the SDKs' own decoder applies them, so the same bytes give the same events:

- A line ends at CR, LF or CRLF; a CRLF split across two chunks is one ending.
  Chunks may split anywhere, even inside a UTF-8 character.
- ``data:`` lines accumulate, joined by ``\\n``; ``event:`` names the event;
  ``id:`` and ``retry:`` are kept as the standard says; lines starting with
  ``:`` are comments; other fields are ignored. One space after the colon is
  dropped.
- A blank line dispatches the event, unless nothing was set since the last one
  (the last ``id`` counts, as the standard keeps it across events).
- At the end of the stream an unterminated last line is still read, but an
  event not closed by a blank line is not dispatched.

Lines are decoded as strict UTF-8: undecodable bytes raise
:class:`UnicodeDecodeError`, a :class:`ValueError`, which the adapters report
as a malformed stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its ``event`` name (None when unnamed) and ``data``."""

    event: str | None
    data: str


class SSEDecoder:
    """Turns byte chunks into :class:`ServerSentEvent` values, keeping partial lines."""

    __slots__ = ("_buffer", "_data", "_event", "_last_id", "_retry", "_skip_lf")

    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False  # the last chunk ended in CR: a leading LF is its CRLF
        self._event: str | None = None
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        """The events completed by ``chunk``, read lazily: an undecodable line
        raises only once the events before it have been taken."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if self._buffer:
            chunk = self._buffer + chunk
            self._buffer = b""
        if not chunk:
            return
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        end = last[-1:]
        if end == b"\r":
            self._skip_lf = True  # complete, but an LF may follow in the next chunk
        elif end != b"\n":
            self._buffer = lines.pop()
        for raw in lines:
            event = self._line(raw.rstrip(b"\r\n").decode())
            if event is not None:
                yield event

    def finish(self) -> Iterator[ServerSentEvent]:
        """The events completed by the end of the stream (an unterminated last line)."""
        buffer, self._buffer = self._buffer, b""
        if buffer:
            event = self._line(buffer.decode())
            if event is not None:
                yield event

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            if self._event is None and not self._data and not self._last_id and self._retry is None:
                return None
            event = ServerSentEvent(self._event, "\n".join(self._data))
            self._event = None
            self._data = []
            self._retry = None
            return event
        if line[0] == ":":
            return None
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value or None
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            with contextlib.suppress(ValueError):
                self._retry = int(value)
        return None


__all__ = ["SSEDecoder", "ServerSentEvent"]

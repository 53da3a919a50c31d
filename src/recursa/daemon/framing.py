"""The little of HTTP/1.1's framing both of the daemon's clients read: a
reply's status line and headers, and a chunked body. Pure functions on
bytes: :mod:`recursa.daemon.http1` (asyncio) reads with them as bytes come,
:mod:`recursa.daemon.peek` (a plain socket) on a whole reply.

Every malformed piece is a ``ValueError`` with one line.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_HEAD_BYTES = 64 * 1024
"""The most a reply's status line and headers may take."""


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status code and headers (names in lower case) of a reply's head
    (without its closing blank line)."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP reply: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"a bad header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def is_chunked(headers: Mapping[str, str]) -> bool:
    """Whether the reply's body is chunked (which comes before any length)."""
    return "chunked" in headers.get("transfer-encoding", "").lower()


def content_length(headers: Mapping[str, str]) -> int | None:
    """The reply's ``content-length``; None when it has none."""
    length = headers.get("content-length")
    if length is None:
        return None
    if not (length.isascii() and length.isdigit()):
        raise ValueError(f"a bad content-length: {length[:40]!r}")
    return int(length)


def chunk_size(line: bytes) -> int:
    """The size a chunk's size line gives (``1a3;ext``, without its CRLF)."""
    digits = line.split(b";", 1)[0].rstrip(b" \t")
    if not digits or digits.strip(b"0123456789abcdefABCDEF") or b"\n" in line or b"\r" in line:
        raise ValueError(f"a bad chunk size: {line[:40]!r}")
    return int(digits, 16)


def dechunk(body: bytes) -> bytes:
    """A whole chunked body's content; ``ValueError`` for one cut short (no
    last chunk) or malformed."""
    pieces: list[bytes] = []
    at = 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            raise ValueError("a chunked body cut short")
        size = chunk_size(body[at:end])
        start = end + 2
        if size == 0:
            # Trailers (none from uvicorn), then the blank line that ends the body.
            rest = body[start:]
            trailers_then_end = (
                rest.endswith(b"\r\n\r\n")
                and rest.find(b"\r\n\r\n") == len(rest) - 4
                and not rest.startswith(b"\r\n")
            )
            if rest != b"\r\n" and not trailers_then_end:
                raise ValueError("a chunked body cut short, or more after it")
            return b"".join(pieces)
        if body[start + size : start + size + 2] != b"\r\n":
            raise ValueError("a chunk cut short or without its CRLF")
        pieces.append(body[start : start + size])
        at = start + size + 2


__all__ = ["MAX_HEAD_BYTES", "chunk_size", "content_length", "dechunk", "is_chunked", "parse_head"]

"""What a response's head says, for :mod:`recursa.models._http`: pure functions
over bytes that raise httpx's ``RemoteProtocolError`` for what a server gets
wrong, read as h11 reads it (RFC 9112), with the differences that module's
docstring names."""

from __future__ import annotations

import re

import httpx2

MAX_HEAD_BYTES = 102_400
"""The longest status line and headers a response may have (httpcore's limit for h11)."""
MAX_LINE_BYTES = 4096
"""The longest line of the chunked framing (a chunk's size and extensions)."""
HEAD_END = re.compile(rb"\r?\n\r?\n")
LINE_END = re.compile(rb"\r?\n")
"""Lines end in CRLF, or in a bare LF (which RFC 9112 lets a recipient take, as h11 does)."""

_NO_BODY_STATUS = frozenset({204, 304})


def status_of(head: bytes, request: httpx2.Request) -> tuple[bytes, int, bytes, list[bytes]]:
    """A head's version, status, reason and header lines."""
    status_line, *lines = LINE_END.split(head)
    version, _, rest = status_line.partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise httpx2.RemoteProtocolError(
            f"not an HTTP/1 status line: {status_line[:80]!r}", request=request
        )
    return version, int(code), reason, lines


def headers_of(lines: list[bytes], request: httpx2.Request) -> list[tuple[bytes, bytes]]:
    """The header lines as (name, value); a line that starts with a space or
    tab continues the one before (obs-fold, joined with a space as RFC 9112
    §5.2 says a recipient may, and h11 does)."""
    headers: list[tuple[bytes, bytes]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t") and headers:
            name, value = headers[-1]
            joined = b"%b %b" % (value, line.strip(b" \t"))
            headers[-1] = (name, joined.strip(b" \t"))
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or any(c in name for c in b" \t"):
            raise httpx2.RemoteProtocolError(
                f"a malformed header line: {line[:80]!r}", request=request
            )
        headers.append((name, value.strip(b" \t")))
    return headers


def framing(
    request: httpx2.Request, status: int, headers: list[tuple[bytes, bytes]]
) -> tuple[int | None, bool, bool]:
    """How the body is framed (RFC 9112 §6.3): its length (None: chunked, or
    to the connection's end), whether chunked, whether the connection is kept."""
    keep, chunked = True, False
    lengths: set[bytes] = set()
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"connection":
            keep = keep and b"close" not in {t.strip() for t in value.lower().split(b",")}
        elif lowered == b"transfer-encoding":
            if chunked:
                raise httpx2.RemoteProtocolError(
                    "more than one transfer-encoding header", request=request
                )
            if value.lower() != b"chunked":  # as h11: no other coding
                raise httpx2.RemoteProtocolError(
                    f"an unsupported transfer-encoding: {value[:40]!r}", request=request
                )
            chunked = True
        elif lowered == b"content-length":
            lengths.update(v.strip(b" \t") for v in value.split(b","))
    length = _length(lengths, request) if lengths else None
    if request.method == "HEAD" or status in _NO_BODY_STATUS:
        return 0, False, keep
    if chunked:
        return None, True, keep  # chunked wins over a length
    return length, False, keep and length is not None


def chunk_size(line: bytes, request: httpx2.Request) -> int:
    """The size a chunk's line gives (hexadecimal, at most 16 digits; any
    extension after ``;`` is ignored)."""
    digits = line.split(b";", 1)[0].strip(b" \t")
    try:
        if (
            not digits
            or len(digits) > 16
            or not all(c in b"0123456789abcdefABCDEF" for c in digits)
        ):
            raise ValueError
        return int(digits, 16)
    except ValueError:
        raise httpx2.RemoteProtocolError(
            f"a malformed chunk size: {line[:40]!r}", request=request
        ) from None


def _length(values: set[bytes], request: httpx2.Request) -> int:
    """The body's length from every value of every content-length header,
    which must agree (RFC 9110 §8.6)."""
    if len(values) != 1:
        raise httpx2.RemoteProtocolError("conflicting content-length headers", request=request)
    (only,) = values
    if not only.isdigit() or len(only) > 19:  # past 19 digits: no body is that long
        raise httpx2.RemoteProtocolError(
            f"a malformed content-length: {only[:40]!r}", request=request
        )
    return int(only)


__all__ = [
    "HEAD_END",
    "LINE_END",
    "MAX_HEAD_BYTES",
    "MAX_LINE_BYTES",
    "chunk_size",
    "framing",
    "headers_of",
    "status_of",
]

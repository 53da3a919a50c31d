"""Vendor-neutral rules for turning an HTTP provider's failure into a :class:`Failed`.

Both HTTP adapters (:mod:`recursa.models.openai`, :mod:`recursa.models.anthropic`)
pull the facts out of their SDK's exception (status, headers, error type and
code, server message) and hand them to these functions, so the mapping from a
vendor failure to a :data:`~recursa.errors.FailureKind` is written once:

==========================================  ==========================
status or error type                        kind
==========================================  ==========================
401, 402, 403                               ``auth``
429 with ``insufficient_quota``             ``auth`` (fix the account)
429, ``rate_limit_error``                   ``rate_limit``
529, any type or code naming "overloaded"   ``overloaded``
503 whose message says "overloaded"         ``overloaded``
500-504 (and any other 5xx)                 ``server_error``
408, ``timeout_error``                      ``timeout``
400, 404, 409, 413, 422 (other 4xx)         ``invalid_request``
  ... whose message names a context limit   ``context_overflow``
==========================================  ==========================

Transport failures are classified by the adapters: an SDK timeout is
``timeout``, a connection that cannot be made is ``network``, and a stream cut
short or undecodable after the response began is ``malformed``.

Every message is one line, starts with the provider name and never contains
a configured secret or a URL's credentials: :func:`clean` collapses
whitespace, truncates, and replaces each with ``[redacted]``.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Iterable, Mapping

from recursa.errors import FailureKind, one_line
from recursa.models.types import Failed
from recursa.redact import REDACTED, redact

MESSAGE_LIMIT = 300
"""Characters of a server's message kept in a failure message."""

_CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context window|prompt is too long"
    r"|too many tokens|input is too long|reduce the length of the messages",
    re.IGNORECASE,
)

_TITLES: dict[FailureKind, str] = {
    "auth": "authentication failed",
    "rate_limit": "rate limited",
    "overloaded": "overloaded",
    "server_error": "server error",
    "timeout": "timed out",
    "network": "connection failed",
    "invalid_request": "invalid request",
    "context_overflow": "context window exceeded",
    "aborted": "aborted",
    "malformed": "malformed stream",
    "unknown": "request failed",
}


def is_context_overflow(text: str | None) -> bool:
    """True when an error message or code says the prompt does not fit the model."""
    return bool(text) and _CONTEXT_OVERFLOW.search(text or "") is not None


def kind_for_error_type(error_type: str | None, code: str | None = None) -> FailureKind | None:
    """The kind an error *type* or *code* names on its own, whatever the status.

    Used for errors that arrive inside a 200 stream (no useful status) and to
    refine a status: an ``overloaded_error`` is ``overloaded`` even when sent
    with status 500 or 503.
    """
    names = " ".join(n for n in (error_type, code) if n).lower()
    if not names:
        return None
    if "overloaded" in names:
        return "overloaded"
    if is_context_overflow(names):
        return "context_overflow"
    if "rate_limit" in names:
        return "rate_limit"
    if "authentication" in names or "permission" in names or "invalid_api_key" in names:
        return "auth"
    if "timeout" in names:
        return "timeout"
    if "invalid_request" in names or "not_found" in names:
        return "invalid_request"
    if "server_error" in names or names in ("api_error", "internal_error"):
        return "server_error"
    return None


def kind_for_status(
    status: int, *, error_type: str | None = None, code: str | None = None, message: str = ""
) -> FailureKind:
    """The failure kind for an HTTP error ``status`` and what the body says about it."""
    named = kind_for_error_type(error_type, code)
    if status in (401, 402, 403):
        return "auth"
    if status == 429:
        # OpenAI sends an exhausted quota as a 429; no wait cures it.
        quota = "insufficient_quota" in f"{error_type} {code}"
        return "auth" if quota else "rate_limit"
    if status == 529 or named == "overloaded":
        return "overloaded"
    if status == 503 and "overloaded" in message.lower():
        return "overloaded"
    if status == 408:
        return "timeout"
    if 500 <= status <= 599:
        return "server_error"
    if 400 <= status <= 499:
        if named == "context_overflow" or is_context_overflow(message):
            return "context_overflow"
        return "invalid_request"
    return named or "unknown"


def retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait as the server asks: ``retry-after-ms``, then ``retry-after``.

    ``retry-after`` may be a number of seconds or an HTTP date (compared with
    ``now``, default the wall clock). Missing or unreadable headers give None.
    """
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def clean(text: object, secrets: Iterable[str] = ()) -> str:
    """``text`` as one short line with every secret and every URL's credentials
    replaced by ``[redacted]`` (:func:`recursa.redact.redact`)."""
    line = redact(one_line(str(text)))
    for secret in secrets:
        if secret:
            line = line.replace(secret, REDACTED)
    if len(line) > MESSAGE_LIMIT:
        line = line[: MESSAGE_LIMIT - 3].rstrip() + "..."
    return line


def describe(vendor: str, kind: FailureKind, detail: str = "", status: int | None = None) -> str:
    """``"openai: rate limited (429): <detail>"``: one line, vendor first."""
    head = f"{vendor}: {_TITLES[kind]}"
    if status is not None:
        head += f" ({status})"
    return f"{head}: {detail}" if detail else head


def status_failure(
    vendor: str,
    status: int,
    *,
    message: str,
    error_type: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> Failed:
    """The :class:`Failed` for an HTTP error response."""
    kind = kind_for_status(status, error_type=error_type, code=code, message=message)
    detail = clean(message, secrets)
    return Failed(
        kind,
        describe(vendor, kind, detail, status),
        status=status,
        retry_after=retry_after(headers),
    )


def stream_error_failure(
    vendor: str,
    *,
    message: str,
    error_type: str | None = None,
    code: str | None = None,
    secrets: Iterable[str] = (),
) -> Failed:
    """The :class:`Failed` for an error event sent inside an open (status 200) stream."""
    kind = kind_for_error_type(error_type, code)
    if kind is None:
        kind = "context_overflow" if is_context_overflow(message) else "unknown"
    label = error_type or code
    detail = clean(f"{label}: {message}" if label else message, secrets)
    return Failed(kind, describe(vendor, kind, detail))


def failure(
    vendor: str, kind: FailureKind, detail: object = "", secrets: Iterable[str] = ()
) -> Failed:
    """A :class:`Failed` of ``kind`` with a cleaned one-line message."""
    return Failed(kind, describe(vendor, kind, clean(detail, secrets) if detail else ""))


__all__ = [
    "MESSAGE_LIMIT",
    "clean",
    "describe",
    "failure",
    "is_context_overflow",
    "kind_for_error_type",
    "kind_for_status",
    "retry_after",
    "status_failure",
    "stream_error_failure",
]

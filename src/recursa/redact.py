"""Credentials out of text that is written down: logs, events, error messages.

A provider's base URL may carry a user and a key (``http://user:key@host/v1``)
and HTTP libraries log the URL of every request. :func:`redact` removes the
user information of every URL in a text, the values of credential-like query
parameters (``?api_key=...``), and any configured secret given by value.
:class:`RedactingFilter` applies it to every record a logging handler writes,
so nothing logged by recursa or by a library (httpx, openai, uvicorn) carries
one; the daemon installs it on its handlers with :func:`redact_logs`.

Redaction is textual and conservative: it may hide a harmless ``user@`` of a
URL, never the other way round. It does not change the text otherwise.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6
"""Secrets given by value are redacted from this length on: a shorter value
protects nothing, and replacing it everywhere would garble every line."""

_USERINFO = re.compile(
    # A scheme, ``//``, then user information up to the last ``@`` before the
    # host: it holds no whitespace, slash, question mark or hash.
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#@]*(?:@[^\s/?#@]*)*@"
)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:api[_-]?key|key|access[_-]?token|token|secret|password|passwd|auth)=)"
    r"[^&;#\s\"']+",
    re.IGNORECASE,
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL credentials and each of ``secrets`` replaced by ``[redacted]``.

    ``http://user:key@host/v1`` becomes ``http://[redacted]@host/v1``;
    ``...?api_key=abc&x=1`` becomes ``...?api_key=[redacted]&x=1``. Empty
    secrets are ignored; longer secrets are replaced first, so one that holds
    another is not left half visible.
    """
    if "://" in text:
        text = _USERINFO.sub(rf"\g<head>{REDACTED}@", text)
    if "=" in text:
        text = _QUERY_SECRET.sub(rf"\g<head>{REDACTED}", text)
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """A handler filter that redacts every record before it is formatted: the
    message with its arguments, the traceback text and the stack text.

    ``secrets`` may be replaced after the filter is installed (the daemon
    learns its credentials after logging is set up). The filter never drops
    a record.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: frozenset[str] = frozenset(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it as such
            return True
        clean = redact(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


def redact_logs(
    secrets: Iterable[str] = (), *, logger: logging.Logger | None = None
) -> RedactingFilter:
    """Install one :class:`RedactingFilter` on every handler of ``logger``
    (default: the root logger, where records of every library end up) and
    return it. A handler that already has one gets its secrets updated."""
    target = logger or logging.getLogger()
    installed = RedactingFilter(secrets)
    for handler in target.handlers:
        for existing in handler.filters:
            if isinstance(existing, RedactingFilter):
                existing.secrets = installed.secrets
                installed = existing
                break
        else:
            handler.addFilter(installed)
    return installed


__all__ = ["MIN_SECRET_CHARS", "REDACTED", "RedactingFilter", "redact", "redact_logs"]

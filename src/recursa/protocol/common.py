"""What the event grammar and the daemon's wire share, apart from both: the
protocol's version, a session's status, and compact JSON text.

A client that lists sessions (``recursa agents``) needs these and the wire's
replies, not the event grammar (:mod:`recursa.protocol.events`, which
re-exports them) and what it builds at import.
"""

from __future__ import annotations

import json
from typing import Literal

PROTOCOL_VERSION = 1
"""Bumped when a field is removed or renamed or a meaning changes (see
:mod:`recursa.protocol.events`)."""
API_PREFIX = "/v1"
"""Where the daemon's HTTP API begins."""

SessionStatus = Literal["admitted", "running", "idle", "inactive", "deleted"]
"""admitted → running ⇄ idle → inactive → idle; ``deleted`` is a tombstone (history kept)."""


def json_text(value: object) -> str:
    """Compact JSON that is always valid UTF-8.

    Non-ASCII text stays readable, but a lone surrogate (what a non-UTF-8
    byte becomes in Python) is written as its ``\\uXXXX`` escape: it can only
    occur inside a JSON string, where that escape is valid and decodes back
    to the same character. So nothing is lost and nothing downstream (SQLite,
    a terminal, a pipe) fails to encode the text.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


__all__ = ["PROTOCOL_VERSION", "SessionStatus", "json_text"]

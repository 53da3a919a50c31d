"""What the CLI's command groups share: a daemon client for one command, JSON out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from recursa.config import load_config

if TYPE_CHECKING:
    from recursa.daemon.client import DaemonClient

T = TypeVar("T")


def with_client(work: Callable[[DaemonClient], Awaitable[T]]) -> T:
    """Run ``work`` with a client of the daemon, starting one when none runs."""

    async def go() -> T:
        from recursa.daemon.client import connect

        async with connect(load_config()) as client:
            return await work(client)

    return asyncio.run(go())


def dump(value: object) -> None:
    """One JSON document on stdout."""
    print(json.dumps(value, ensure_ascii=False))


__all__ = ["dump", "with_client"]


def typed_text(text: str) -> str:
    """Text from the command line or stdin as valid Unicode: bytes that are not
    UTF-8 (which Python decodes to lone surrogates) become visible ``\\xNN``
    escapes, so the text crosses the wire (JSON, the store) and nothing is lost."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

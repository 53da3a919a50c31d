"""Recording the raw bytes of a streamed answer from the fake model server.

:func:`record_stream` sends one streaming request over real HTTP to a
:class:`~recursa.testing.fake_server.FakeModelServer` scripted with one item
and returns the response body exactly as it arrived (the SSE bytes, after the
chunked transfer encoding is undone). Tests feed such recordings to the
adapters' own stream readers and to the SDKs' parsers and compare the results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2

from recursa.testing.fake_script import ScriptItem
from recursa.testing.fake_server import FakeModelServer
from recursa.testing.fake_wire import Vendor

_PATHS: dict[Vendor, str] = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}

DEFAULT_BODIES: dict[Vendor, dict[str, Any]] = {
    "openai": {
        "model": "gpt-4o-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
    },
    "anthropic": {
        "model": "claude-haiku-4-5",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    },
}
"""The request sent when :func:`record_stream` is given none: a minimal
streaming request, with usage asked for (OpenAI)."""


async def record_stream(
    vendor: Vendor, item: ScriptItem, body: Mapping[str, Any] | None = None
) -> bytes:
    """The body of the streamed answer to ``body`` (default :data:`DEFAULT_BODIES`)
    when the fake server answers with ``item``.

    Raises ``httpx2.HTTPStatusError`` for an item answered with an error status,
    and the transport's error for one whose body is cut short.
    """
    async with FakeModelServer() as server:
        server.push(item)
        async with (
            httpx2.AsyncClient(base_url=server.url) as client,
            client.stream(
                "POST", _PATHS[vendor], json=dict(body or DEFAULT_BODIES[vendor])
            ) as response,
        ):
            response.raise_for_status()
            return b"".join([chunk async for chunk in response.aiter_raw()])


__all__ = ["DEFAULT_BODIES", "record_stream"]

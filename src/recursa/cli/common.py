"""What the CLI's command groups share: their common arguments, a daemon client
for one command, JSON out, and a listing's output."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from recursa.cli.tables import dump, print_listing
from recursa.errors import UsageError
from recursa.protocol.fields import MAX_NAME_CHARS

if TYPE_CHECKING:
    from recursa.daemon.client import DaemonClient

T = TypeVar("T")


def reference(value: str | None) -> str | None:
    """A session's or entry's reference from the command line, checked before it
    goes anywhere: :class:`UsageError` (one line, exit 2) when it holds bytes
    that are not UTF-8 (which Python decodes to lone surrogates) or is longer
    than any reference can be (:data:`~recursa.protocol.fields.MAX_NAME_CHARS`).
    None (an optional reference left out) passes."""
    if value is None:
        return None
    if len(value) > MAX_NAME_CHARS:
        raise UsageError(
            f"a reference has at most {MAX_NAME_CHARS} characters; this one has {len(value):,}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = typed_text(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise UsageError(f"a reference is UTF-8 text; '{shown}' holds other bytes") from None
    return value


SessionArg = Annotated[
    str, typer.Argument(help="Session id, id prefix or name.", callback=reference)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout.")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Do not snapshot namespaces; stop at once.")
]


def with_client(work: Callable[[DaemonClient], Awaitable[T]]) -> T:
    """Run ``work`` with a client of the daemon, starting one when none runs
    (the configuration file is read only then, by :func:`~recursa.daemon.client.connect`)."""

    async def go() -> T:
        from recursa.daemon.client import connect

        async with connect() as client:
            return await work(client)

    return asyncio.run(go())


def typed_text(text: str) -> str:
    """Text from the command line or stdin as valid Unicode: bytes that are not
    UTF-8 (which Python decodes to lone surrogates) become visible ``\\xNN``
    escapes, so the text crosses the wire (JSON, the store) and nothing is lost."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


__all__ = [
    "ForceOpt",
    "JsonOpt",
    "SessionArg",
    "dump",
    "print_listing",
    "reference",
    "typed_text",
    "with_client",
]

"""What the daemon serves: the runtime's operations, as the daemon calls them.

The HTTP app (:mod:`recursa.daemon.app`) is a thin translation from requests
to these calls and from their results and errors to responses. The runtime
implements it (:class:`recursa.runtime.host.RuntimeHost`); tests of the
transport use a fake.

Errors are the ordinary error tree: ``NotFound`` (404), ``ModelUnavailable``
(422), ``UsageError``/``ValueError`` (400), ``UncertainCommand`` (409), any
other ``RecursaError`` by its class, and anything else is a bug (500).
``session`` arguments accept an id, a unique id prefix or a name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from recursa.protocol.events import EventRecord
from recursa.protocol.wire import (
    CommandKey,
    CreateSession,
    DaemonStatus,
    Receipt,
    SendMessage,
    SessionInfo,
)


class Host(Protocol):
    async def status(self) -> DaemonStatus:
        """The daemon's pid, version, counts, and whether recovery is still running."""
        ...

    async def create_session(
        self, request: CreateSession, command: CommandKey | None
    ) -> SessionInfo:
        """Admit a root session and queue its task (when given). Idempotent by ``command``."""
        ...

    async def sessions(self) -> list[SessionInfo]:
        """Every session, roots and sub-agents, oldest first."""
        ...

    async def session(self, session: str) -> SessionInfo: ...

    async def send(self, session: str, request: SendMessage, command: CommandKey | None) -> Receipt:
        """Store a message durably, then deliver it by its mode. Idempotent by ``command``."""
        ...

    async def interrupt(self, session: str) -> SessionInfo:
        """Stop the running turn; the session stays, idle."""
        ...

    async def stop(self, session: str, command: CommandKey | None) -> SessionInfo:
        """Interrupt the session and unload it (snapshot the kernel, stop it): inactive."""
        ...

    def events(self, session: str, *, after: int, follow: bool) -> AsyncIterator[EventRecord]:
        """The session's events with ``seq > after`` in order; with ``follow``, then
        every new one (transient ones too, with ``seq == 0``) until the consumer
        stops. Nothing is missed or repeated between the stored and the live part.
        Raises ``NotFound`` when iteration starts, for an unknown session."""
        ...

    async def shutdown(self, *, force: bool) -> None:
        """Begin stopping the daemon: ``force`` skips snapshots and kills kernels.
        Returns once the stop has begun; the server exits when it is done."""
        ...


__all__ = ["Host"]

"""What a session's model sees, and how the session calls it.

:class:`ModelContext` owns the session's side of every model call: the
system prompt (base prompt, context files, the runtime's supplements, the
harness's supplemental prompt), the kernel's prelude (skills), the request
built from the conversation, and compaction, which is a transform of the
context before a call. A turn's call (:meth:`ModelContext.call`) first lets
the compactor make room, then goes through the session's gateway
(:mod:`recursa.session.gateway`) with the context as it then stands.

The system prompt and the prelude are read once per turn (:meth:`begin_turn`),
so the harness's state is fixed within a turn.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from recursa.models.types import Failed, Message, Request
from recursa.protocol.calls import CallEnded, CallEvent
from recursa.protocol.events import Event, EventRecord
from recursa.protocol.history import CompactReply
from recursa.session.cells import PYTHON_TOOL
from recursa.session.compactor import Compactor, CompactorDeps
from recursa.session.context import (
    BASE_PROMPT,
    FENCED_PROMPT,
    Conversation,
    find_context_files,
    system_prompt,
)
from recursa.session.deps import SessionDeps

log = logging.getLogger("recursa.session")

NOT_COMPACTED = "the context is over the model's window, and compacting it did not make it smaller"


class ModelContext:
    """The model's view of one session; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        cwd: Path,
        deps: SessionDeps,
        conversation: Conversation,
        record: Callable[[Event], EventRecord],
    ) -> None:
        self.session_id = session_id
        self.deps = deps
        self.fenced = not deps.model_info.native_tools
        self.conversation = conversation
        self._context_files = find_context_files(cwd)
        self._system = self._build_system()
        self.prelude: tuple[str, str] | None = None
        """The kernel's prelude (skills) for this turn."""
        self.compactor = Compactor(
            CompactorDeps(
                session_id=session_id,
                conversation=conversation,
                window=deps.model_info.context_window,
                system=lambda: self._system,
                gateway=deps.gateway,
                record=record,
                auto=deps.compaction,
            )
        )

    def begin_turn(self) -> None:
        """Read the harness's state for the turn that starts."""
        self._system = self._build_system()
        self.prelude = self._build_prelude()

    async def call(self, step: int, overflow: bool) -> AsyncIterator[CallEvent]:
        """A turn's model call (the loop's ``model`` hook): compaction first,
        then the gateway, over the context as it then stands."""
        compacted = await self.compactor.make_room(overflow)
        if overflow and not compacted:
            yield CallEnded(Failed("context_overflow", NOT_COMPACTED))
            return
        async for item in self.deps.gateway.stream(self.request(), step=step):
            yield item

    def request(self) -> Request:
        """The request for the next call, from the conversation as it stands."""
        return Request(
            model=self.deps.gateway.model_name,
            system=self._system,
            messages=self.conversation.snapshot(),
            tools=() if self.fenced else (PYTHON_TOOL,),
            cache_key=self.session_id,
        )

    async def compact(self, instructions: str | None = None) -> CompactReply:
        """The agent's compaction (``compact.run()``): all of the context but the step in progress."""
        return await self.compactor.compact("agent", instructions)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages the next model call gets (compactions applied)."""
        return self.conversation.snapshot()

    @property
    def tokens(self) -> int:
        """The size of the model's context now, in tokens (measured where it can be)."""
        return self.compactor.tokens

    def _build_system(self) -> str:
        """The base prompt, the context files, the runtime's fixed supplements,
        then the harness's supplemental prompt as it is now."""
        supplements = list(self.deps.supplements)
        try:
            supplements.append(self.deps.host.supplement(self.session_id))
        except Exception:  # the harness must not stop the session
            log.exception("session %s: building the supplemental prompt failed", self.session_id)
        base = FENCED_PROMPT if self.fenced else BASE_PROMPT
        return system_prompt(base, self._context_files, supplements)

    def _build_prelude(self) -> tuple[str, str] | None:
        try:
            return self.deps.host.prelude(self.session_id)
        except Exception:  # the harness must not stop the session
            log.exception("session %s: building the kernel prelude failed", self.session_id)
            return None


__all__ = ["NOT_COMPACTED", "ModelContext"]

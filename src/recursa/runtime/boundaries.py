"""The runtime's side of every session's turn boundaries
(:class:`~recursa.session.SessionHost`): what a turn starts from (the
harness's supplemental prompt, the kernel's prelude and environment) and
what happens when it ends (harness edits applied, a sub-agent's answer sent
to its parent, the turn-end controls run)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from recursa.kernel import ApiCall
from recursa.kernel.wire import JSONDict
from recursa.protocol.events import TurnEnded
from recursa.protocol.wire import error_body
from recursa.runtime.tree import display_name
from recursa.session import Session

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime

log = logging.getLogger("recursa.runtime")


class TurnControl(Protocol):
    """Something that looks at every turn's end and may continue the session
    (``session.send(..., source="gate"|"goal"|...)``); see ``Runtime.controls``."""

    async def after_turn(self, session: Session, ended: TurnEnded) -> None: ...


class Boundaries:
    """One for the runtime; every session it builds gets it as its host."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def turn_ended(self, session: Session, ended: TurnEnded) -> None:
        """At every turn's end, in the transaction that records it: the harness's
        staged edits are applied, and a sub-agent's end goes to its parent."""
        try:
            self.runtime.learning.turn_ended(session)
        except Exception:  # the harness must not keep the answer from the parent
            log.exception("session %s: applying harness edits failed", session.id)
        self._report_to_parent(session, ended)

    async def after_turn(self, session: Session, ended: TurnEnded) -> None:
        """The turn-end controls, in order; one's failure does not skip the next."""
        for control in list(self.runtime.controls):
            try:
                await control.after_turn(session, ended)
            except Exception:
                log.exception("session %s: turn-end control %r failed", session.id, control)

    def activity(self) -> None:
        self.runtime.pulse.notify()

    def supplement(self, session_id: str) -> str:
        return self.runtime.learning.supplement(session_id).text

    def prelude(self, session_id: str) -> tuple[str, str] | None:
        return self.runtime.learning.prelude(session_id)

    def kernel_env(self, session_id: str) -> Mapping[str, str]:
        runtime = self.runtime
        if runtime.api_socket is None:
            return {}
        runtime.store.tokens.revoke(session_id)  # a session speaks through one kernel at a time
        token = runtime.store.tokens.mint(session_id)
        return {"RECURSA_API_SOCKET": str(runtime.api_socket), "RECURSA_KERNEL_TOKEN": token}

    def kernel_relay(self, session_id: str) -> ApiCall:
        """The kernel API as ``session_id``, for a kernel that reaches it over its
        own channels. Like :meth:`kernel_env` it mints the session's one token
        (revoking the last), which stays in this process: the kernel never
        sees it, and revoking it (the kernel let go) closes the relay too.
        Whoever serves the API (:attr:`Runtime.kernel_api_as`) is looked up at
        each call: a daemon recovers sessions, reattaching their kernels,
        before its server exists."""
        runtime = self.runtime
        tokens = runtime.store.tokens
        tokens.revoke(session_id)
        token = tokens.mint(session_id)

        async def call(
            method: str,
            path: str,
            body: JSONDict | None,
            timeout: float | None,  # noqa: ASYNC109 -- the relay bounds the call
        ) -> tuple[int, Any]:
            call_as = runtime.kernel_api_as
            if call_as is None:
                return 503, error_body("internal", "the recursa API is not served to this kernel")
            return await call_as(token)(method, path, body, timeout)

        return call

    def _report_to_parent(self, child: Session, ended: TurnEnded) -> None:
        """A sub-agent's turn ended: its answer (or why it stopped) goes to its parent."""
        runtime = self.runtime
        row = runtime.store.session(child.id)
        if row.parent_id is None:
            return
        parent_row = runtime.store.session(row.parent_id)
        if parent_row.status == "deleted":
            return
        who = display_name(row) or row.id
        if ended.reason == "answered" and ended.answer is not None:
            text = f"sub-agent {who} finished: {ended.answer}"
        else:
            text = f"sub-agent {who} stopped ({ended.reason}): {ended.detail}"
        if runtime.closed:
            # Closing: store it for the parent, which takes it when it next runs
            # (a session built now would start a turn during shutdown).
            runtime.store.inbox.enqueue(
                parent_row.id, text, source="child", mode="auto", sender=row.id, kind="answer"
            )
            return
        runtime.get(parent_row.id).send(
            text, mode="auto", source="child", sender=row.id, kind="answer"
        )


__all__ = ["Boundaries", "TurnControl"]

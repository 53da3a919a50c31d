"""What a session is built from: :class:`SessionDeps`, which the runtime fills
in (the store, kernels, the model-call gateway, limits), and :class:`SessionHost`,
the runtime's side of a session's turn boundaries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from recursa.config import DEFAULT_INLINE_INPUT_SHARE, Limits
from recursa.kernel import ApiCall
from recursa.models.types import ModelInfo
from recursa.protocol.events import TurnEnded
from recursa.session.gateway import Gateway
from recursa.session.kernel_slot import KernelSource
from recursa.store import Store
from recursa.supervisor import Supervisor

if TYPE_CHECKING:
    from recursa.session.session import Session


class SessionHost(Protocol):
    """The runtime's side of a session. A hook must not raise for the
    session's sake: the session logs what one raises and goes on."""

    def turn_ended(self, session: Session, ended: TurnEnded) -> None:
        """After every turn ends, in the transaction that records the end (the
        harness's staged edits applied, a sub-agent's answer queued for its parent)."""

    async def after_turn(self, session: Session, ended: TurnEnded) -> None:
        """After each turn and its checkpoint, before the session looks for
        more input: the turn-end controls (autonomous gates, goals), which
        continue the session by queueing a message (and do nothing to stop it)."""

    def activity(self) -> None:
        """The session started or stopped working, or a message arrived."""

    def supplement(self, session_id: str) -> str:
        """The supplemental prompt (harness state), read at the start of every
        turn, so that edits applied at a turn boundary shape the next turn,
        never the running one."""

    def prelude(self, session_id: str) -> tuple[str, str] | None:
        """What the kernel runs silently before cells (skills): see SlotDeps."""

    def kernel_env(self, session_id: str) -> Mapping[str, str]:
        """Variables to set in every kernel the session gets (the kernel API's
        socket and token)."""

    def kernel_relay(self, session_id: str) -> ApiCall | None:
        """The kernel API as the session, for a kernel that reaches it over its
        own channels (``api_transport="comm"``), got after every start in place
        of :meth:`kernel_env`; None when it is not served."""


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """What a session is built from; the runtime supplies it."""

    store: Store
    kernels: KernelSource
    gateway: Gateway
    """Every model call of the session (its turns' and its compactions') goes through it."""
    model_info: ModelInfo
    limits: Limits
    clock: Callable[[], float]
    workspace: Path
    host: SessionHost
    tasks: Supervisor
    """The runtime's: the session's worker and its kernel's start and unload run under it."""
    supplements: tuple[str, ...] = field(default_factory=tuple)
    snapshot_max_bytes: int = 1 << 30
    checkpoint_each_turn: bool = True
    inline_input_share: float = DEFAULT_INLINE_INPUT_SHARE
    """An input past this share of the model's window is put in the kernel as a
    variable instead (:mod:`recursa.session.inputs`); 0: never."""
    compaction: bool = True
    """False: the context is never compacted by itself (``[sessions] compaction``)."""
    prestart_kernel: bool = True
    kernel_backend: str = "local"
    """Where the session's kernels run (``local`` or ``gateway``), chosen at its creation."""
    """Start getting a kernel as a turn begins (a root session: its first cell
    then finds it ready); False: on the first cell (sub-agents, many of which
    never run one)."""


__all__ = ["SessionDeps", "SessionHost"]

"""What a session is built from: :class:`SessionDeps`, which the runtime fills
in (the store, kernels, the model, limits and the hooks it runs at turn
boundaries)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from recursa.config import Limits
from recursa.control.budget import Admission, Ticket
from recursa.models.types import ModelInfo, Request, StreamEvent, Usage
from recursa.protocol.events import TurnEnded
from recursa.session.kernel_slot import KernelSource
from recursa.store import Store

if TYPE_CHECKING:
    from recursa.session.session import Session


class ModelCaller(Protocol):
    def __call__(self, request: Request) -> AsyncIterator[StreamEvent]: ...


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """What a session is built from; the runtime supplies it."""

    store: Store
    kernels: KernelSource
    call_model: ModelCaller
    cost: Callable[[Usage], float | None]
    model_info: ModelInfo
    model_name: str
    limits: Limits
    clock: Callable[[], float]
    workspace: Path
    max_retries: int = 4
    retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    supplements: tuple[str, ...] = field(default_factory=tuple)
    snapshot_max_bytes: int = 1 << 30
    checkpoint_each_turn: bool = True
    admit: Callable[[Request], Admission] = lambda request: Ticket(0, None)
    """Before each model call: a ticket, or a Stop when a subtree budget is spent."""
    settle: Callable[[Ticket, Usage | None], None] = lambda ticket, usage: None
    kernel_env: Callable[[], Mapping[str, str]] | None = None
    """Variables to set in every kernel the session gets (the kernel API's socket and token)."""
    on_turn_end: Callable[[Session, TurnEnded], None] | None = None
    """Called after every turn ends (the runtime tells a sub-agent's parent)."""
    on_activity: Callable[[], None] = lambda: None
    """Called when the session starts or stops working, or a message arrives."""
    supplement: Callable[[], str] | None = None
    """The supplemental prompt (harness state), read at the start of every turn
    so that edits applied at a turn boundary shape the next turn, never the
    running one."""
    after_turn: Callable[[Session, TurnEnded], Awaitable[None]] | None = None
    """After each turn and its checkpoint, before the session looks for more
    input: the runtime's turn-end controls (autonomous gates, goals), which
    continue the session by queueing a message (and do nothing to stop it)."""
    prestart_kernel: bool = True
    """Start getting a kernel as a turn begins (a root session: its first cell
    then finds it ready); False: on the first cell (sub-agents, many of which
    never run one)."""
    prelude: Callable[[], tuple[str, str] | None] | None = None
    """What the kernel runs silently before cells (skills): see SlotDeps."""


__all__ = ["ModelCaller", "SessionDeps"]

"""The turn loop, context building, cells, and the Session shell."""

from recursa.session.loop import TurnHooks, run_turn
from recursa.session.session import KernelSource, SendMode, Session, SessionDeps, SessionHost

__all__ = [
    "KernelSource",
    "SendMode",
    "Session",
    "SessionDeps",
    "SessionHost",
    "TurnHooks",
    "run_turn",
]

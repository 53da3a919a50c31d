"""The turn loop, context building, cells, and the Session shell."""

from recursa.session.loop import TurnHooks, run_turn
from recursa.session.session import KernelSource, SendMode, Session, SessionDeps

__all__ = ["KernelSource", "SendMode", "Session", "SessionDeps", "TurnHooks", "run_turn"]

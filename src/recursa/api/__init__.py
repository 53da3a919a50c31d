"""The kernel-side API: what the model finds pre-imported in its kernel.

- :data:`rlm` (:mod:`recursa.api.rlm`): start sub-agents, get handles to them;
- :data:`agent_message` (:mod:`recursa.api.messages`): messages to and from
  the other agents of the tree, and this session's inbox;
- :data:`harness` and :data:`refine` (:mod:`recursa.api.harness`): the
  Continual Harness: entries staged for the turn boundary, read back, rolled
  back; refinement proposals from the session's recent events.

These run inside the kernel process and reach the daemon over its unix socket
with the session's kernel token (:mod:`recursa.api.client`): the daemon
derives the caller from the token, so a kernel can never act as another
session. This package imports only :mod:`recursa.errors` and itself when it
loads; the wire values and ``httpx2`` are imported on the first call, so
:func:`install` costs a kernel start next to nothing.
"""

from __future__ import annotations

from typing import Any

from recursa.api.harness import HarnessApi, Refiner, harness, refine
from recursa.api.messages import AgentMessenger, Message, agent_message
from recursa.api.rlm import Rlm, SubagentHandle, rlm
from recursa.errors import SubagentFailed

NAMES = ("rlm", "agent_message", "harness", "refine")
"""What :func:`install` binds."""


def install(namespace: dict[str, Any]) -> None:
    """Bind ``rlm``, ``agent_message``, ``harness`` and ``refine`` into
    ``namespace`` (a kernel's user namespace, at its start)."""
    namespace["rlm"] = rlm
    namespace["agent_message"] = agent_message
    namespace["harness"] = harness
    namespace["refine"] = refine


__all__ = [
    "NAMES",
    "AgentMessenger",
    "HarnessApi",
    "Message",
    "Refiner",
    "Rlm",
    "SubagentFailed",
    "SubagentHandle",
    "agent_message",
    "harness",
    "install",
    "refine",
    "rlm",
]

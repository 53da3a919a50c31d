"""The kernel-side API: what the model finds pre-imported in its kernel.

- :data:`rlm` (:mod:`recursa.api.rlm`): start sub-agents, get handles to them;
- :data:`llm` (:mod:`recursa.api.llm`): light model calls (a prompt in, the
  reply's text out), accounted to this session;
- :data:`agent_message` (:mod:`recursa.api.messages`): messages to and from
  the other agents of the tree, and this session's inbox;
- :data:`harness` and :data:`refine` (:mod:`recursa.api.harness`): the
  Continual Harness: entries staged for the turn boundary, read back, rolled
  back; refinement proposals from the session's recent events;
- :data:`goal` and :data:`heartbeat` (:mod:`recursa.api.goals`): the
  session's goal (read it, complete it) and the prompts it schedules for
  itself;
- :data:`history` and :data:`compact` (:mod:`recursa.api.history`): the
  session's full event log, including what compaction took out of the
  context, and compaction on request;
- :func:`search` (:mod:`recursa.api.text`): the passages of a long text that
  best match the words of a question (local, no daemon call).

These run inside the kernel process and reach the daemon over its unix socket
with the session's kernel token (:mod:`recursa.api.client`): the daemon
derives the caller from the token, so a kernel can never act as another
session. This package imports only :mod:`recursa.errors` and itself when it
loads; the wire values and ``httpx2`` are imported on the first call, so
:func:`install` costs a kernel start next to nothing.

Everything else that runs in a kernel on the harness's behalf is a module
here too, never code sent as text: the IPython extension every kernel loads
(:mod:`recursa.api.extension`), its output streams
(:mod:`recursa.api.streams`, :mod:`recursa.api.pump`), ``on_restore``
(:mod:`recursa.api.hooks`), and the harness's silent commands
(:mod:`recursa.api.commands`: snapshots and restores with
:mod:`recursa.api.namespace` and :mod:`recursa.api.snapfile`, skills with
:mod:`recursa.api.skills`). Those are not imported by this package.
"""

from __future__ import annotations

from typing import Any

from recursa.api.goals import GoalApi, HeartbeatApi, goal, heartbeat
from recursa.api.harness import HarnessApi, Refiner, harness, refine
from recursa.api.history import Compact, History, compact, history
from recursa.api.llm import Llm, LlmBatchError, llm
from recursa.api.messages import AgentMessenger, Message, agent_message
from recursa.api.rlm import Rlm, SubagentHandle, rlm
from recursa.api.text import search
from recursa.errors import SubagentFailed

NAMES = (
    "rlm",
    "llm",
    "agent_message",
    "harness",
    "refine",
    "goal",
    "heartbeat",
    "history",
    "compact",
    "search",
)
"""What :func:`install` binds."""


def install(namespace: dict[str, Any]) -> None:
    """Bind :data:`NAMES` (``rlm``, ``llm``, ``agent_message``, ``harness``, ``refine``, ``goal``,
    ``heartbeat``, ``history``, ``compact``, ``search``) into ``namespace`` (a kernel's user
    namespace, at its start)."""
    namespace["rlm"] = rlm
    namespace["llm"] = llm
    namespace["agent_message"] = agent_message
    namespace["harness"] = harness
    namespace["refine"] = refine
    namespace["goal"] = goal
    namespace["heartbeat"] = heartbeat
    namespace["history"] = history
    namespace["compact"] = compact
    namespace["search"] = search


__all__ = [
    "NAMES",
    "AgentMessenger",
    "Compact",
    "GoalApi",
    "HarnessApi",
    "HeartbeatApi",
    "History",
    "Llm",
    "LlmBatchError",
    "Message",
    "Refiner",
    "Rlm",
    "SubagentFailed",
    "SubagentHandle",
    "agent_message",
    "compact",
    "goal",
    "harness",
    "heartbeat",
    "history",
    "install",
    "llm",
    "refine",
    "rlm",
    "search",
]

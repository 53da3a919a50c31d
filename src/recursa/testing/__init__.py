"""The public test kit: what recursa's own tests use, for users' tests too.

- the faux provider: ``register_script("name", [code(...), reply(...)])`` then
  model ``faux/name``;
- ``FakeModelServer``: a loopback server speaking the OpenAI and Anthropic
  streaming wire formats, with injected faults;
- ``make_runtime(tmp_path)``: a real Runtime rooted in a temporary directory.

``make_runtime`` is imported on first use, so ``python -m
recursa.testing.fake_server`` starts without loading kernels or the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from recursa.models.faux import (
    FauxFault,
    FauxReply,
    FauxScript,
    code,
    fault,
    register_script,
    reply,
    tool_call,
)
from recursa.testing.fake_script import Fault, Reply, ToolCallSpec
from recursa.testing.fake_server import FakeModelServer

if TYPE_CHECKING:
    from recursa.testing.runtime import RecordingSleep, make_runtime


def __getattr__(name: str) -> object:
    if name in ("make_runtime", "RecordingSleep"):
        from recursa.testing import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'recursa.testing' has no attribute {name!r}")


__all__ = [
    "FakeModelServer",
    "Fault",
    "FauxFault",
    "FauxReply",
    "FauxScript",
    "RecordingSleep",
    "Reply",
    "ToolCallSpec",
    "code",
    "fault",
    "make_runtime",
    "register_script",
    "reply",
    "tool_call",
]

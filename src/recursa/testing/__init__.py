"""The public test kit: what recursa's own tests use, for users' tests too.

- the faux provider: ``register_script("name", [code(...), reply(...)])`` then
  model ``faux/name``;
- ``FakeModelServer``: a loopback server speaking the OpenAI and Anthropic
  streaming wire formats, with injected faults;
- ``make_runtime(tmp_path)``: a real Runtime rooted in a temporary directory.

The fake server and ``make_runtime`` are imported on first use, so ``python
-m recursa.testing.fake_server`` runs its module once, without loading
kernels or the store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from recursa.models.faux import (
    FauxFault,
    FauxReply,
    FauxScript,
    code,
    fault,
    per_session,
    register_script,
    reply,
    tool_call,
)

if TYPE_CHECKING:
    from recursa.testing.fake_script import Fault, Reply, ToolCallSpec
    from recursa.testing.fake_server import FakeModelServer
    from recursa.testing.runtime import RecordingSleep, make_runtime

_LAZY = {
    "FakeModelServer": "recursa.testing.fake_server",
    "Fault": "recursa.testing.fake_script",
    "Reply": "recursa.testing.fake_script",
    "ToolCallSpec": "recursa.testing.fake_script",
    "RecordingSleep": "recursa.testing.runtime",
    "make_runtime": "recursa.testing.runtime",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'recursa.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
    "per_session",
    "register_script",
    "reply",
    "tool_call",
]

"""Checks of the request values that predate :class:`~recursa.protocol.checked.Checked`.

The daemon's routes (:mod:`recursa.daemon.routes`) build every request with
:func:`~recursa.protocol.wire.from_json`; a value whose type is in
:data:`CHECKS` is then passed through its check, which raises ``ValueError``
with one line (a 400) or returns the value normalized. Request values of the
operation table's own modules check themselves; what any value means (a
depth limit, a spec that does not parse) is the host's to judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from recursa.protocol.control import AddSchedule, CompleteGoal
from recursa.protocol.harness import KINDS, SCOPES
from recursa.protocol.history import (
    MAX_EVENTS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_RESULTS,
    CompactRequest,
    EventsRequest,
    SearchRequest,
)
from recursa.protocol.person_ops import RefineSession
from recursa.protocol.wire import (
    AgentMessage,
    Budget,
    HarnessEdit,
    RefineRequest,
    Shutdown,
    Spawn,
)

MODES = ("steer", "follow_up")


def checked_spawn(spawn: Spawn) -> Spawn:
    """``spawn`` with its types checked and its numbers normalized."""
    _text(spawn.task, "task")
    for name in ("name", "model", "spec"):
        value = getattr(spawn, name)
        if value is not None:
            _text(value, name)
    budget = spawn.budget
    if budget is None:
        return spawn
    if not isinstance(budget, Budget):
        raise ValueError("budget must be an object of tokens, cost, steps and time")
    checked = Budget(
        tokens=_limit(budget.tokens, "tokens", whole=True),
        cost=_limit(budget.cost, "cost", whole=False),
        steps=_limit(budget.steps, "steps", whole=True),
        time=_limit(budget.time, "time", whole=False),
    )
    return Spawn(spawn.task, spawn.name, spawn.model, spawn.spec, checked)


def checked_message(message: AgentMessage) -> AgentMessage:
    """``message`` with its types checked (the mode is checked by ``from_json``)."""
    _text(message.text, "text")
    if not isinstance(message.to, str) or not message.to:
        raise ValueError('to must be "parent", "child:NAME", "sibling:NAME" or "all"')
    return message


def checked_edit(edit: HarnessEdit) -> HarnessEdit:
    """``edit`` with its types checked; what the values mean (a skill's code, an
    update that changes nothing) is the harness's."""
    if edit.op == "create":
        if edit.entry is not None:
            raise ValueError("a create names no entry (it gets a new id)")
    elif not isinstance(edit.entry, str) or not edit.entry.strip():
        raise ValueError(f"{edit.op} needs the entry: an id, id prefix or title")
    for name in ("kind", "title", "content", "code", "scope"):
        value = getattr(edit, name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string")
    if edit.kind is not None and edit.kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {edit.kind!r}")
    if edit.scope is not None and edit.scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {edit.scope!r}")
    if edit.meta is not None and not isinstance(edit.meta, dict):
        raise ValueError("meta must be an object")
    version = edit.to_version
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueError("to_version must be a whole number")
    for name in ("reason", "effect"):
        if not isinstance(getattr(edit, name), str):
            raise ValueError(f"{name} must be a string")
    return edit


def checked_schedule(body: AddSchedule) -> AddSchedule:
    """``body`` with its types checked; the spec's meaning is the host's."""
    for name in ("spec", "prompt"):
        if not isinstance(getattr(body, name), str):
            raise ValueError(f"{name} must be a string")
    if body.mode not in MODES:
        raise ValueError(f"mode must be steer or follow_up, not {body.mode!r}")
    if body.label is not None and not isinstance(body.label, str):
        raise ValueError("label must be a string")
    return body


def checked_search(body: SearchRequest) -> SearchRequest:
    query = body.query
    if not isinstance(query, str) or not query:
        raise ValueError("query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"query must be at most {MAX_QUERY_CHARS} characters")
    count_field(body.limit, "limit", MAX_SEARCH_RESULTS)
    return body


def checked_events(body: EventsRequest) -> EventsRequest:
    if body.type is not None and not isinstance(body.type, str):
        raise ValueError("type must be an event type (a string)")
    after = body.after
    if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
        raise ValueError("after must be an event's seq (a whole number)")
    count_field(body.limit, "limit", MAX_EVENTS)
    return body


def count_field(value: object, name: str, most: int) -> int:
    """A count from a request: a whole number from 1 to ``most``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number")
    if not 1 <= value <= most:
        raise ValueError(f"{name} must be from 1 to {most}, not {value}")
    return value


def instructions_of(value: object) -> str | None:
    """A refinement's or compaction's instructions: None, or a string (blank is None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("instructions must be a string")
    return value if value.strip() else None


def _complete(body: CompleteGoal) -> CompleteGoal:
    if not isinstance(body.summary, str):
        raise ValueError("summary must be a string")
    return body


def _shutdown(body: Shutdown) -> Shutdown:
    if not isinstance(body.force, bool):
        raise ValueError("force must be true or false")
    return body


CHECKS: dict[type[Any], Callable[[Any], Any]] = {
    Spawn: checked_spawn,
    AgentMessage: checked_message,
    HarnessEdit: checked_edit,
    AddSchedule: checked_schedule,
    SearchRequest: checked_search,
    EventsRequest: checked_events,
    CompleteGoal: _complete,
    Shutdown: _shutdown,
    RefineRequest: lambda body: RefineRequest(instructions_of(body.instructions)),
    CompactRequest: lambda body: CompactRequest(instructions_of(body.instructions)),
    RefineSession: lambda body: RefineSession(body.session, instructions_of(body.instructions)),
}
"""The check of each request type that does not check itself."""


def _text(value: object, name: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string")


def _limit(value: Any, name: str, *, whole: bool) -> Any:
    """A budget limit: None, or a positive finite number (a whole one for counts)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"budget {name} must be a number")
    if whole and not float(value).is_integer():
        raise ValueError(f"budget {name} must be a whole number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"budget {name} must be more than 0")
    return int(value) if whole else float(value)


__all__ = [
    "CHECKS",
    "checked_edit",
    "checked_message",
    "checked_schedule",
    "checked_spawn",
    "count_field",
    "instructions_of",
]

"""The kernels' routes: what the kernel-side API (:mod:`recursa.api`) asks.

All are under ``/v1/kernel/`` and reached with a kernel token only
(:mod:`recursa.daemon.auth`); the caller is the session the token was minted
for, never anything in the request. Bodies and replies are the wire values
of :mod:`recursa.protocol.wire` as JSON::

    POST   /kernel/rlm                   Spawn        → Handle     201
    GET    /kernel/subagents                          → [Handle]
    GET    /kernel/subagents/{ref}                    → Handle
    POST   /kernel/subagents/{ref}/wait  {"timeout": seconds|null} → Handle   (a long poll)
    DELETE /kernel/subagents/{ref}                    → Handle
    POST   /kernel/messages              AgentMessage → [Receipt]
    POST   /kernel/inbox                 {"wait": seconds}  → [InboxMessage]  (a long poll)
    POST   /kernel/harness/edits         HarnessEdit  → HarnessReceipt  201
    GET    /kernel/harness/entries?kind=K&scope=S&status=S    → [HarnessEntry]
    GET    /kernel/harness/entries/{entry}                    → HarnessEntry
    GET    /kernel/harness/entries/{entry}/history            → [HarnessEntry]
    GET    /kernel/harness/entries/{entry}/diff?from=V&to=V   → {"diff": text}
    POST   /kernel/refine                RefineRequest → RefineReply
    POST   /kernel/history/search        SearchRequest → [HistoryHit]
    POST   /kernel/history/events        EventsRequest → [event]
    GET    /kernel/history/turns/{n}                   → [event]
    GET    /kernel/history/outputs/{cell}              → {"cell": n, "text": full output}
    POST   /kernel/compact               CompactRequest → CompactReply   (a model call)

``ref`` is one of the caller's children, by id or name. ``entry`` is a
harness entry the caller can see (global, or local to it), by id, id prefix
or title; it may contain slashes, so an entry whose title ends in
``/history`` or ``/diff`` is reached by its id. Harness edits are staged for
the caller's next turn boundary, always as the model's. A long poll waits on
the host alone (:func:`~recursa.daemon.replies.long_poll`): the host's wait is
cancelled when the kernel goes away (a cell interrupted mid-wait) or the
daemon stops. Waits are bounded by
:data:`~recursa.daemon.replies.MAX_WAIT_SECONDS`.

Requests are checked here for shape and type (a 400 with one line), so the
host gets well-typed values; what they mean (a depth limit, an unknown spec
or recipient, a size or rate limit) is the host's to judge.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recursa.daemon.auth import principal_of
from recursa.daemon.host import KernelHost
from recursa.daemon.replies import (
    StopSignal,
    guarded,
    json_object,
    json_reply,
    long_poll,
    read_json,
    seconds_field,
)
from recursa.errors import AuthError
from recursa.protocol.harness import KINDS, SCOPES, STATUSES
from recursa.protocol.history import (
    MAX_EVENTS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_RESULTS,
    CompactRequest,
    EventsRequest,
    SearchRequest,
)
from recursa.protocol.wire import (
    API_PREFIX,
    AgentMessage,
    Budget,
    HarnessEdit,
    RefineRequest,
    Spawn,
    from_json,
    to_json,
)


def kernel_routes(host: KernelHost, stop: StopSignal) -> list[Route]:
    """The routes above, over ``host``; ``stop`` ends their long polls."""
    api = _KernelApi(host, stop)
    p = f"{API_PREFIX}/kernel"
    return [
        Route(f"{p}/rlm", guarded(api.spawn), methods=["POST"]),
        Route(f"{p}/subagents", guarded(api.subagents), methods=["GET"]),
        Route(f"{p}/subagents/{{ref}}", guarded(api.subagent), methods=["GET"]),
        Route(f"{p}/subagents/{{ref}}/wait", guarded(api.wait), methods=["POST"]),
        Route(f"{p}/subagents/{{ref}}", guarded(api.delete), methods=["DELETE"]),
        Route(f"{p}/messages", guarded(api.message), methods=["POST"]),
        Route(f"{p}/inbox", guarded(api.inbox), methods=["POST"]),
        Route(f"{p}/harness/edits", guarded(api.harness_edit), methods=["POST"]),
        Route(f"{p}/harness/entries", guarded(api.harness_entries), methods=["GET"]),
        # The entry may hold slashes (a title): the routes with an action first.
        Route(
            f"{p}/harness/entries/{{entry:path}}/history",
            guarded(api.harness_history),
            methods=["GET"],
        ),
        Route(
            f"{p}/harness/entries/{{entry:path}}/diff", guarded(api.harness_diff), methods=["GET"]
        ),
        Route(f"{p}/harness/entries/{{entry:path}}", guarded(api.harness_entry), methods=["GET"]),
        Route(f"{p}/refine", guarded(api.refine), methods=["POST"]),
        Route(f"{p}/history/search", guarded(api.history_search), methods=["POST"]),
        Route(f"{p}/history/events", guarded(api.history_events), methods=["POST"]),
        Route(f"{p}/history/turns/{{turn:int}}", guarded(api.history_turn), methods=["GET"]),
        Route(f"{p}/history/outputs/{{cell:int}}", guarded(api.history_output), methods=["GET"]),
        Route(f"{p}/compact", guarded(api.compact), methods=["POST"]),
    ]


class _KernelApi:
    def __init__(self, host: KernelHost, stop: StopSignal) -> None:
        self._host = host
        self._stop = stop

    async def spawn(self, request: Request) -> Response:
        caller = _caller(request)
        spawn = checked_spawn(from_json(Spawn, json_object(await read_json(request))))
        return json_reply(to_json(await self._host.spawn(caller, spawn)), status=201)

    async def subagents(self, request: Request) -> Response:
        handles = await self._host.subagents(_caller(request))
        return json_reply([to_json(handle) for handle in handles])

    async def subagent(self, request: Request) -> Response:
        return json_reply(to_json(await self._host.subagent(_caller(request), _ref(request))))

    async def wait(self, request: Request) -> Response:
        caller, ref = _caller(request), _ref(request)
        body = json_object(await read_json(request, empty_ok=True))
        timeout = seconds_field(body, "timeout", allow_null=True)
        handle = await long_poll(request, self._stop, self._host.wait(caller, ref, timeout))
        return json_reply(to_json(handle))

    async def delete(self, request: Request) -> Response:
        caller, ref = _caller(request), _ref(request)
        return json_reply(to_json(await self._host.delete_subagent(caller, ref)))

    async def message(self, request: Request) -> Response:
        caller = _caller(request)
        message = checked_message(from_json(AgentMessage, json_object(await read_json(request))))
        receipts = await self._host.message(caller, message)
        return json_reply([to_json(receipt) for receipt in receipts])

    async def inbox(self, request: Request) -> Response:
        caller = _caller(request)
        body = json_object(await read_json(request, empty_ok=True))
        wait = seconds_field(body, "wait", allow_null=False) or 0.0
        messages = await long_poll(request, self._stop, self._host.inbox(caller, wait))
        return json_reply([to_json(message) for message in messages])

    async def harness_edit(self, request: Request) -> Response:
        caller = _caller(request)
        edit = checked_edit(from_json(HarnessEdit, json_object(await read_json(request))))
        return json_reply(to_json(await self._host.stage_edit(caller, edit)), status=201)

    async def harness_entries(self, request: Request) -> Response:
        kind, scope, status = harness_filters(request)
        entries = await self._host.visible_entries(_caller(request), kind, scope, status)
        return json_reply([to_json(entry) for entry in entries])

    async def harness_entry(self, request: Request) -> Response:
        entry = await self._host.visible_entry(_caller(request), entry_ref(request))
        return json_reply(to_json(entry))

    async def harness_history(self, request: Request) -> Response:
        versions = await self._host.visible_history(_caller(request), entry_ref(request))
        return json_reply([to_json(version) for version in versions])

    async def harness_diff(self, request: Request) -> Response:
        caller, ref = _caller(request), entry_ref(request)
        old, new = version_param(request, "from"), version_param(request, "to")
        return json_reply({"diff": await self._host.visible_diff(caller, ref, old, new)})

    async def refine(self, request: Request) -> Response:
        caller = _caller(request)
        body = from_json(RefineRequest, json_object(await read_json(request, empty_ok=True)))
        reply = await self._host.refine_caller(caller, instructions_of(body))
        return json_reply(to_json(reply))

    async def history_search(self, request: Request) -> Response:
        caller = _caller(request)
        body = from_json(SearchRequest, json_object(await read_json(request)))
        query = body.query
        if not isinstance(query, str) or not query:
            raise ValueError("query must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"query must be at most {MAX_QUERY_CHARS} characters")
        limit = count_field(body.limit, "limit", MAX_SEARCH_RESULTS)
        hits = await self._host.history_search(caller, query, limit)
        return json_reply([to_json(hit) for hit in hits])

    async def history_events(self, request: Request) -> Response:
        caller = _caller(request)
        body = from_json(EventsRequest, json_object(await read_json(request, empty_ok=True)))
        if body.type is not None and not isinstance(body.type, str):
            raise ValueError("type must be an event type (a string)")
        after = body.after
        if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
            raise ValueError("after must be an event's seq (a whole number)")
        limit = count_field(body.limit, "limit", MAX_EVENTS)
        events = await self._host.history_events(caller, body.type, after, limit)
        return json_reply([event.to_dict() for event in events])

    async def history_turn(self, request: Request) -> Response:
        caller, turn = _caller(request), request.path_params["turn"]
        events = await self._host.history_turn(caller, turn, MAX_EVENTS)
        return json_reply([event.to_dict() for event in events])

    async def history_output(self, request: Request) -> Response:
        caller, cell = _caller(request), request.path_params["cell"]
        return json_reply({"cell": cell, "text": await self._host.history_output(caller, cell)})

    async def compact(self, request: Request) -> Response:
        caller = _caller(request)
        body = from_json(CompactRequest, json_object(await read_json(request, empty_ok=True)))
        instructions = instructions_of(RefineRequest(body.instructions))
        return json_reply(to_json(await self._host.compact(caller, instructions)))


def checked_spawn(spawn: Spawn) -> Spawn:
    """``spawn`` with its types checked (ValueError, one line) and numbers normalized."""
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
    """``edit`` with its types checked (ValueError, one line); what the values
    mean (a skill's code, an update that changes nothing) is the harness's."""
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


def count_field(value: object, name: str, most: int) -> int:
    """A count from a request: a whole number from 1 to ``most``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number")
    if not 1 <= value <= most:
        raise ValueError(f"{name} must be from 1 to {most}, not {value}")
    return value


def instructions_of(body: RefineRequest) -> str | None:
    """A refinement's instructions: None, or a string (blank is None)."""
    if body.instructions is None:
        return None
    if not isinstance(body.instructions, str):
        raise ValueError("instructions must be a string")
    return body.instructions if body.instructions.strip() else None


def harness_filters(request: Request) -> tuple[str | None, str | None, str | None]:
    """The ``kind``, ``scope`` and ``status`` query parameters, checked."""
    found: list[str | None] = []
    for name, allowed in (("kind", KINDS), ("scope", SCOPES), ("status", STATUSES)):
        value = request.query_params.get(name) or None
        if value is not None and value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        found.append(value)
    return found[0], found[1], found[2]


def version_param(request: Request, name: str) -> int | None:
    """An optional version number from the query (0 or more)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"{name} must be a version number, not {raw!r}")
    return int(raw)


def entry_ref(request: Request) -> str:
    ref = request.path_params["entry"]
    if not isinstance(ref, str) or not ref.strip():
        raise ValueError("a harness entry id, id prefix or title is required")
    return ref


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


def _caller(request: Request) -> str:
    principal = principal_of(request.scope)
    if principal.kind != "kernel" or not principal.session_id:
        raise AuthError("kernel routes need a kernel's token")  # auth admits none: defense
    return principal.session_id


def _ref(request: Request) -> str:
    ref = request.path_params["ref"]
    if not isinstance(ref, str) or not ref:
        raise ValueError("a sub-agent id or name is required")
    return ref


__all__ = [
    "checked_edit",
    "checked_message",
    "checked_spawn",
    "count_field",
    "entry_ref",
    "harness_filters",
    "instructions_of",
    "kernel_routes",
    "version_param",
]

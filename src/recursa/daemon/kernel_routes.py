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

``ref`` is one of the caller's children, by id or name. A long poll waits on
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
from recursa.protocol.wire import (
    API_PREFIX,
    AgentMessage,
    Budget,
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


__all__ = ["checked_message", "checked_spawn", "kernel_routes"]

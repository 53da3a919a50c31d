"""The routes of goals and schedules: for clients (``recursa goal``, ``recursa
schedule``) and for kernels (``goal``, ``heartbeat``).

Client routes (under :data:`~recursa.protocol.wire.API_PREFIX`, client token)::

    GET    /sessions/{ref}/goal                    → GoalInfo | null
    PUT    /sessions/{ref}/goal      SetGoal       → GoalInfo
    POST   /sessions/{ref}/goal/{action}           → GoalInfo     (pause | resume | clear)
    GET    /schedules?session=REF&all=0|1          → [ScheduleInfo]
    POST   /sessions/{ref}/schedules AddSchedule   → ScheduleInfo  201
    DELETE /schedules/{job}                        → ScheduleInfo  (cancelled)

Kernel routes (under ``/kernel/``, kernel token; the caller is the token's session)::

    GET    /kernel/goal                            → GoalInfo | null
    POST   /kernel/goal/complete     CompleteGoal  → GoalInfo
    POST   /kernel/heartbeats        AddSchedule   → ScheduleInfo  201
    GET    /kernel/heartbeats                      → [ScheduleInfo]
    PATCH  /kernel/heartbeats/{job}  UpdateSchedule → ScheduleInfo
    DELETE /kernel/heartbeats/{job}                → ScheduleInfo

The values are those of :mod:`recursa.protocol.control`. Requests are checked
here for shape and type (a 400 with one line); what they mean (a spec that
does not parse, a goal that cannot be resumed) is the host's to judge. A
client's ``job`` is a job id; a kernel's is one of its jobs' id or label.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from recursa.daemon.auth import principal_of
from recursa.daemon.host import Host, KernelHost
from recursa.daemon.replies import guarded, json_object, json_reply, read_json
from recursa.errors import AuthError
from recursa.protocol.control import (
    AddSchedule,
    CompleteGoal,
    GoalAction,
    SetGoal,
    UpdateSchedule,
)
from recursa.protocol.wire import API_PREFIX, CommandKey, from_json, to_json

CommandKeyOf = Callable[[Request], CommandKey | None]

GOAL_ACTIONS: tuple[GoalAction, ...] = get_args(GoalAction)
MODES = ("steer", "follow_up")
CONTROL_KERNEL_METHODS = (
    "caller_goal",
    "complete_goal",
    "heartbeat_create",
    "heartbeat_list",
    "heartbeat_update",
    "heartbeat_delete",
)
"""What a kernel host must have to serve the kernels' goal and heartbeat routes."""


def control_routes(host: Host, command_key: CommandKeyOf) -> list[Route]:
    """The client routes above; ``command_key`` reads a request's idempotency key."""
    api = _ClientApi(host, command_key)
    p = API_PREFIX
    return [
        Route(f"{p}/sessions/{{ref}}/goal", guarded(api.goal), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}/goal", guarded(api.set_goal), methods=["PUT"]),
        Route(f"{p}/sessions/{{ref}}/goal/{{action}}", guarded(api.change_goal), methods=["POST"]),
        Route(f"{p}/schedules", guarded(api.schedules), methods=["GET"]),
        Route(f"{p}/sessions/{{ref}}/schedules", guarded(api.add_schedule), methods=["POST"]),
        Route(f"{p}/schedules/{{job}}", guarded(api.cancel_schedule), methods=["DELETE"]),
    ]


def control_kernel_routes(host: KernelHost) -> list[Route]:
    """The kernel routes above."""
    api = _KernelApi(host)
    p = f"{API_PREFIX}/kernel"
    return [
        Route(f"{p}/goal", guarded(api.goal), methods=["GET"]),
        Route(f"{p}/goal/complete", guarded(api.complete), methods=["POST"]),
        Route(f"{p}/heartbeats", guarded(api.create), methods=["POST"]),
        Route(f"{p}/heartbeats", guarded(api.list), methods=["GET"]),
        Route(f"{p}/heartbeats/{{job}}", guarded(api.update), methods=["PATCH"]),
        Route(f"{p}/heartbeats/{{job}}", guarded(api.delete), methods=["DELETE"]),
    ]


class _ClientApi:
    def __init__(self, host: Host, command_key: CommandKeyOf) -> None:
        self._host = host
        self._key = command_key

    async def goal(self, request: Request) -> Response:
        found = await self._host.goal(_ref(request))
        return json_reply(None if found is None else to_json(found))

    async def set_goal(self, request: Request) -> Response:
        body = checked_goal(from_json(SetGoal, json_object(await read_json(request))))
        goal = await self._host.set_goal(_ref(request), body, self._key(request))
        return json_reply(to_json(goal))

    async def change_goal(self, request: Request) -> Response:
        action = request.path_params["action"]
        if action not in GOAL_ACTIONS:
            raise ValueError(f"a goal can be {', '.join(GOAL_ACTIONS)}d, not {action!r}")
        goal = await self._host.change_goal(_ref(request), action, self._key(request))
        return json_reply(to_json(goal))

    async def schedules(self, request: Request) -> Response:
        session = request.query_params.get("session") or None
        everything = request.query_params.get("all", "0")
        if everything not in ("0", "1"):
            raise ValueError(f"all must be 0 or 1, not {everything!r}")
        jobs = await self._host.schedules(session, everything == "1")
        return json_reply([to_json(job) for job in jobs])

    async def add_schedule(self, request: Request) -> Response:
        body = checked_schedule(from_json(AddSchedule, json_object(await read_json(request))))
        job = await self._host.add_schedule(_ref(request), body, self._key(request))
        return json_reply(to_json(job), status=201)

    async def cancel_schedule(self, request: Request) -> Response:
        raw = request.path_params["job"]
        if not (isinstance(raw, str) and raw.isascii() and raw.isdigit()):
            raise ValueError(f"a job is named by its number, not {raw!r}")
        job = await self._host.cancel_schedule(int(raw), self._key(request))
        return json_reply(to_json(job))


class _KernelApi:
    def __init__(self, host: KernelHost) -> None:
        self._host = host

    async def goal(self, request: Request) -> Response:
        found = await self._host.caller_goal(_caller(request))
        return json_reply(None if found is None else to_json(found))

    async def complete(self, request: Request) -> Response:
        caller = _caller(request)
        body = from_json(CompleteGoal, json_object(await read_json(request, empty_ok=True)))
        if not isinstance(body.summary, str):
            raise ValueError("summary must be a string")
        return json_reply(to_json(await self._host.complete_goal(caller, body.summary)))

    async def create(self, request: Request) -> Response:
        caller = _caller(request)
        body = checked_schedule(from_json(AddSchedule, json_object(await read_json(request))))
        return json_reply(to_json(await self._host.heartbeat_create(caller, body)), status=201)

    async def list(self, request: Request) -> Response:
        jobs = await self._host.heartbeat_list(_caller(request))
        return json_reply([to_json(job) for job in jobs])

    async def update(self, request: Request) -> Response:
        caller, job = _caller(request), _job(request)
        body = checked_update(from_json(UpdateSchedule, json_object(await read_json(request))))
        return json_reply(to_json(await self._host.heartbeat_update(caller, job, body)))

    async def delete(self, request: Request) -> Response:
        caller, job = _caller(request), _job(request)
        return json_reply(to_json(await self._host.heartbeat_delete(caller, job)))


def checked_goal(body: SetGoal) -> SetGoal:
    """``body`` with its types checked (ValueError, one line)."""
    if not isinstance(body.objective, str):
        raise ValueError("objective must be a string")
    _whole(body.budget, "budget")
    return body


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


def checked_update(body: UpdateSchedule) -> UpdateSchedule:
    for name in ("spec", "prompt", "label"):
        value = getattr(body, name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string")
    if body.mode is not None and body.mode not in MODES:
        raise ValueError(f"mode must be steer or follow_up, not {body.mode!r}")
    return body


def _whole(value: Any, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a whole number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number")


def _ref(request: Request) -> str:
    ref = request.path_params["ref"]
    if not isinstance(ref, str) or not ref:
        raise ValueError("a session id or name is required")
    return ref


def _job(request: Request) -> str:
    job = request.path_params["job"]
    if not isinstance(job, str) or not job.strip():
        raise ValueError("a job id or label is required")
    return job


def _caller(request: Request) -> str:
    principal = principal_of(request.scope)
    if principal.kind != "kernel" or not principal.session_id:
        raise AuthError("kernel routes need a kernel's token")  # auth admits none: defense
    return principal.session_id


__all__ = [
    "CONTROL_KERNEL_METHODS",
    "checked_goal",
    "checked_schedule",
    "checked_update",
    "control_kernel_routes",
    "control_routes",
]

"""``rlm``: sub-agents as handles, from inside a kernel.

``await rlm(task, ...)`` asks the daemon to admit a child session of this one
and returns a :class:`SubagentHandle` at once; it never waits for the child.
Options are checked here, before any request: an unknown keyword is Python's
TypeError, a bad value a TypeError or ValueError.

A handle holds plain values only (no connection), so it survives a namespace
snapshot and works in the kernel it is restored into.
"""

from __future__ import annotations

import math
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from recursa.api import client
from recursa.api.client import optional_text_arg as _option
from recursa.api.client import text_arg as _text
from recursa.api.messages import one_receipt, send_message
from recursa.duration import parse_duration
from recursa.errors import SubagentFailed

if TYPE_CHECKING:
    from recursa.protocol.wire import Handle, Receipt, Usage

BUDGET_KEYS = ("tokens", "cost", "steps", "time")


class SubagentHandle:
    """A sub-agent started by ``rlm()``: a child session that keeps running
    on its own. Attributes are as last seen: ``id``, ``name``, ``workspace``
    (its directory), ``model``, ``status``, ``depth``, ``done``, ``answer``,
    ``reason``, ``usage``.

    ``await handle.status()``      a fresh view (a Handle; also updates these attributes)
    ``await handle.wait(timeout=None)``
        block until its work ends; the final view. TimeoutError after
        ``timeout`` seconds (it keeps running).
    ``await handle.result(timeout=None)``
        wait, then its answer (a str); SubagentFailed if it ended without one.
    ``await handle.send(text, mode="auto")``
        a message to it (a Receipt); a finished child wakes up with it.
    """

    def __init__(self, view: Handle) -> None:
        self._update(view)

    @property
    def status(self) -> Status:
        """The last seen status (a str); call it for a fresh view: ``await handle.status()``."""
        return Status(self._status, self)

    async def refresh(self) -> Handle:
        """A fresh view of the child (what ``await handle.status()`` does)."""
        __tracebackhide__ = True
        data = await client.run("subagent", {"ref": self.id}, what="handle.status()")
        return self._update(_handle(data))

    async def wait(self, timeout: float | None = None) -> Handle:  # noqa: ASYNC109
        """Block until the child's work ends, then its final view. After ``timeout``
        seconds (None: no limit) raise TimeoutError; the child keeps running."""
        __tracebackhide__ = True
        seconds = client.seconds(timeout, "timeout", allow_none=True)
        data = await client.run(
            "wait",
            {"ref": self.id, "timeout": seconds},
            timeout=client.poll_timeout(seconds),
            what="handle.wait()",
        )
        view = self._update(_handle(data))
        if not view.done:
            raise TimeoutError(
                f"sub-agent {self._label()} is still {view.status} after {seconds:g}s; "
                "it keeps running (wait again, or rlm.delete_subagent(handle))"
            )
        return view

    async def result(self, timeout: float | None = None) -> str:  # noqa: ASYNC109
        """Wait (like :meth:`wait`) and return the child's answer; SubagentFailed
        if its work ended without one."""
        __tracebackhide__ = True
        view = await self.wait(timeout)
        if view.answer is None:
            why = view.reason or view.status
            raise SubagentFailed(f"sub-agent {self._label()} ended without an answer: {why}")
        return view.answer

    async def send(self, text: str, mode: str = "auto") -> Receipt:
        """Send ``text`` to this child ("auto", "steer" or "follow_up"); a Receipt."""
        __tracebackhide__ = True
        receipts = await send_message(text, to=f"child:{self.id}", mode=mode, what="handle.send()")
        return one_receipt(receipts, "handle.send()")

    def _update(self, view: Handle) -> Handle:
        self.id: str = view.id
        self.name: str | None = view.name
        self.parent_id: str | None = view.parent_id
        self.workspace: str = view.workspace
        self.model: str = view.model
        self._status: str = view.status
        self.depth: int = view.depth
        self.done: bool = view.done
        self.answer: str | None = view.answer
        self.reason: str | None = view.reason
        self.usage: Usage = view.usage
        return view

    def _label(self) -> str:
        return repr(self.name) if self.name else self.id

    def __repr__(self) -> str:
        tail = ""
        if self.answer is not None:
            answer = self.answer if len(self.answer) <= 60 else self.answer[:59] + "…"
            tail = f", answer={answer!r}"
        elif self.reason:
            tail = f", reason={self.reason!r}"
        return (
            f"SubagentHandle(name={self.name!r}, id={self.id!r}, status={self._status!r}, "
            f"depth={self.depth}, model={self.model!r}, workspace={self.workspace!r}{tail})"
        )


class Status(str):
    """A handle's last seen status, a plain string (``handle.status == "running"``);
    calling it asks for a fresh view: ``await handle.status()``."""

    _handle: SubagentHandle

    def __new__(cls, value: str, handle: SubagentHandle) -> Status:
        status = super().__new__(cls, value)
        status._handle = handle
        return status

    def __call__(self) -> Coroutine[Any, Any, Handle]:
        return self._handle.refresh()

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return (str, (str(self),))  # kept by a snapshot as the plain string


class Rlm:
    """Sub-agents: child sessions that run concurrently with you.

    ``handle = await rlm(task, name=None, model=None, spec=None, budget=None, backend=None)``
        Start a child on ``task`` and return its SubagentHandle at once (it
        never waits for the child). ``name``: how you and its siblings address
        it (``child:NAME``); ``model``: its model (default: yours); ``spec``: a
        sub-agent spec to start from; ``budget``: limits for its whole subtree,
        a dict of ``tokens``, ``cost`` (USD), ``steps``, ``time`` (seconds or
        "10m", "1h30m"); ``backend``: where its kernel runs, "local" or
        "gateway" (default: where yours does).
        Its final answer comes to your inbox as a message, and from
        ``await handle.result()``.
    ``await rlm.list_subagents()``            your children (deleted ones too), oldest first.
    ``await rlm.delete_subagent(handle or name)``
        cancel a child and its subtree; its history stays. Its final view.
    """

    async def __call__(
        self,
        task: str,
        name: str | None = None,
        model: str | None = None,
        spec: str | None = None,
        budget: Mapping[str, float | str] | None = None,
        backend: str | None = None,
    ) -> SubagentHandle:
        """Start a child session on ``task``; its SubagentHandle, at once."""
        __tracebackhide__ = True
        if backend is not None and backend not in ("local", "gateway"):
            raise ValueError(f"backend is 'local' or 'gateway', not {backend!r}")
        body: dict[str, Any] = {
            "task": _text(task, "task"),
            "name": _option(name, "name"),
            "model": _option(model, "model"),
            "spec": _option(spec, "spec"),
            "budget": check_budget(budget),
            "backend": backend,
        }
        data = await client.run("spawn", body, what="rlm()")
        return SubagentHandle(_handle(data))

    async def list_subagents(self) -> list[SubagentHandle]:
        """Your children, deleted ones included, oldest first."""
        __tracebackhide__ = True
        from recursa.protocol.wire import Handle

        data = await client.run("subagents", what="rlm.list_subagents()")
        views = client.decode_list(Handle, data, "rlm.list_subagents()")
        return [SubagentHandle(view) for view in views]

    async def delete_subagent(self, subagent: SubagentHandle | str) -> Handle:
        """Cancel a child (a handle, an id or a name) and its subtree, and
        tombstone them; their history stays. The child's final view."""
        __tracebackhide__ = True
        if isinstance(subagent, SubagentHandle):
            ref = subagent.id
        elif isinstance(subagent, str) and subagent:
            ref = subagent
        else:
            raise TypeError(
                f"delete_subagent takes a handle, an id or a name, not {type(subagent).__name__}"
            )
        data = await client.run("delete_subagent", {"ref": ref}, what="rlm.delete_subagent()")
        view = _handle(data)
        if isinstance(subagent, SubagentHandle):
            subagent._update(view)
        return view

    def __repr__(self) -> str:
        return (
            "<rlm: handle = await rlm(task, name=None, model=None, spec=None, budget=None); "
            "await rlm.list_subagents(); await rlm.delete_subagent(handle); help(rlm)>"
        )


def check_budget(budget: object) -> dict[str, float | int] | None:
    """The budget as the wire carries it: known keys, positive values, time in seconds."""
    if budget is None:
        return None
    if not isinstance(budget, Mapping):
        raise TypeError(
            f"budget must be a dict of {', '.join(BUDGET_KEYS)}, not {type(budget).__name__}"
        )
    unknown = sorted(str(key) for key in budget if key not in BUDGET_KEYS)
    if unknown:
        raise ValueError(
            f"unknown budget key {', '.join(map(repr, unknown))}: use {', '.join(BUDGET_KEYS)}"
        )
    out: dict[str, float | int] = {}
    for key, value in budget.items():
        if value is None:
            continue
        if key == "time":
            out[key] = _duration(value)
        elif key == "cost":
            out[key] = _positive(value, key, whole=False)
        else:
            out[key] = int(_positive(value, key, whole=True))
    return out


def _duration(value: object) -> float:
    """Budget time: seconds, or a duration as text (:mod:`recursa.duration`)."""
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except ValueError as exc:
            raise ValueError(f"budget time: {exc}") from None
    return _positive(value, "time", whole=False)


def _positive(value: object, key: str, *, whole: bool) -> float:
    kind = "a whole number" if whole else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"budget {key} must be {kind}, not {type(value).__name__}")
    if whole and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"budget {key} must be {kind}, not {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"budget {key} must be more than 0, not {value!r}")
    return number


def _handle(data: object) -> Handle:
    from recursa.protocol.wire import Handle

    return client.decode(Handle, data, "a sub-agent call")


rlm = Rlm()

__all__ = ["BUDGET_KEYS", "Rlm", "Status", "SubagentHandle", "check_budget", "rlm"]

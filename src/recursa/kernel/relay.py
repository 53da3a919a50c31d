"""The daemon's end of the kernel API over a kernel's own Jupyter channels.

A kernel bootstrapped for it (:mod:`recursa.api.channel`) sends each request
of its API as a ``comm_msg`` on iopub with the comm id
:data:`~recursa.protocol.wire.KERNEL_COMM_ID`; its channels hand those to a
:class:`Relay` (:attr:`recursa.kernel.wire.Channels.on_comm`), which performs
each request through an injected :data:`ApiCall` in a task of its own and sends
the reply as a ``comm_msg`` on control, where the kernel reads it even while a
cell awaits.

The message's ``data``, one of:

- a request ``{"id", "method", "path", "body", "timeout"}``: ``id`` a short
  string the kernel chose, ``path`` under the API prefix (``/kernel/...``),
  ``body`` an object or null, ``timeout`` the seconds the kernel waits for the
  reply, or null;
- a cancellation ``{"id", "cancel": true}``: the kernel stopped waiting
  (an interrupt); the request's task is cancelled and nothing is answered.

The reply's ``data`` is ``{"id", "status", "body"}``: the HTTP status and JSON
body the kernel API gave, or an error body of the same shape
(``{"error": {"kind", "message"}}``) for a request the relay refuses.

What a kernel sends is written by model code, so everything is checked:
a message that is not a well-formed request with an id is ignored (there is
nobody to answer), a malformed request with an id gets an ``invalid`` error,
and at most :data:`MAX_IN_FLIGHT` requests run at once per kernel (more are
answered with an error). The relay never says whose request it is: the
:data:`ApiCall` is bound to the kernel's session by whoever serves it
(``Kernel.serve_api``), so a message cannot speak for any other session.
Replies meant for a process that has since been replaced (a restart: new
channels) are dropped, and its requests' tasks cancelled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from recursa.config import ApiTransport
from recursa.errors import KernelError
from recursa.kernel.wire import JSONDict, Message
from recursa.protocol.wire import KERNEL_COMM_ID, error_body

ApiCall = Callable[[str, str, JSONDict | None, float | None], Awaitable[tuple[int, Any]]]
"""Performs one kernel-API request as the kernel's session:
``(method, path, body, timeout) -> (status, json)``; ``path`` is under the API
prefix, ``timeout`` the seconds the kernel waits (None: no bound)."""

MAX_IN_FLIGHT = 64
"""Requests one kernel may have running at once; more are refused with an error."""
MAX_ID_CHARS = 64
MAX_PATH_CHARS = 4096
MAX_BODY_CHARS = 16 * 1024 * 1024
"""The longest request body, as JSON text (the kernel socket's limit too)."""
MAX_TIMEOUT = 86_400.0 + 60.0
"""The longest wait a request may name (the API's longest long poll, and a margin)."""
REPLY_GRACE = 5.0
"""Seconds a request may run beyond the wait the kernel named before it is
given up on (the kernel has stopped waiting by then)."""
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_PATH = re.compile(r"/kernel/[\x21-\x7e]*")
"""A kernel route: printable ASCII, no spaces."""

log = logging.getLogger(__name__)


class CommChannels(Protocol):
    """What the relay needs of a kernel's channels: :class:`~recursa.kernel.wire.Channels`,
    or any other transport to a kernel (a gateway's) that offers the same two."""

    on_comm: Callable[[Message], None] | None
    """Where the channels hand every ``comm_msg`` of the API's comm from iopub."""

    def send(
        self, msg_type: str, content: JSONDict, *, control: bool = False, block: bool = True
    ) -> str:
        """Send a message (on control when ``control``); KernelError once closed,
        or, when not ``block``, when the kernel is not reading what was sent."""
        ...


class _Request:
    __slots__ = ("body", "method", "path", "timeout")

    def __init__(self, method: str, path: str, body: JSONDict | None, timeout: float | None):
        self.method = method
        self.path = path
        self.body = body
        self.timeout = timeout


class Relay:
    """Serves the kernel API to one kernel over its channels, through ``call``.

    :meth:`attach` is called with every new channels of the kernel (a
    restart makes new ones); :meth:`aclose` when the kernel is shut down.
    ``call`` may be set later (:attr:`call`), and replaced: requests that
    arrive while it is None are answered ``unavailable``.
    Invariants: runs on one event loop; every task it starts is in
    :attr:`_running` until it ends (and in :attr:`_tasks`, by its request's id,
    until it ends or is cancelled); none outlives :meth:`aclose`.
    """

    def __init__(self, call: ApiCall | None = None) -> None:
        self.call = call
        self._channels: CommChannels | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        """How many requests are running."""
        return len(self._tasks)

    def attach(self, channels: CommChannels) -> None:
        """Serve the requests that arrive on ``channels`` from now on; those of
        earlier channels are cancelled and never answered."""
        self._drop_all()
        self._channels = channels
        channels.on_comm = self.receive

    def reset_kernel(self) -> None:
        """Tell the kernel (taken over from a daemon that died) that no reply
        will come to the calls it has in flight, which then fail at once."""
        channels = self._channels
        if channels is None:
            return
        content = {"comm_id": KERNEL_COMM_ID, "data": {"reset": True}}
        try:
            channels.send("comm_msg", content, control=True, block=False)
        except KernelError:
            log.info("could not reset a reattached kernel's API calls")

    def detach(self) -> None:
        """Serve no channels: cancel every request, answer nothing."""
        self._drop_all()

    async def aclose(self) -> None:
        """:meth:`detach`, and wait until every request's task has ended
        (those cancelled before included)."""
        self._drop_all()
        if self._running:
            await asyncio.wait(set(self._running))

    def _drop_all(self) -> None:
        if self._channels is not None and self._channels.on_comm == self.receive:
            self._channels.on_comm = None
        self._channels = None
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()

    # -- receiving --------------------------------------------------------------------------

    def receive(self, msg: Message) -> None:
        """Take one ``comm_msg`` of the API's comm (see the module docstring).
        Never raises: what the kernel sends is model code's."""
        channels = self._channels
        if channels is None:
            return
        data = msg.content.get("data")
        if not isinstance(data, dict):
            return
        request_id = data.get("id")
        if not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_ID_CHARS:
            return  # nobody to answer
        if data.get("cancel") is True:
            task = self._tasks.pop(request_id, None)
            if task is not None:
                task.cancel()
            return
        try:
            request = _parse(data)
        except ValueError as exc:
            self._reply(channels, request_id, 400, error_body("invalid", str(exc)))
            return
        if request_id in self._tasks:
            message = f"request id {request_id!r} is already in flight"
            self._reply(channels, request_id, 400, error_body("invalid", message))
            return
        if len(self._tasks) >= MAX_IN_FLIGHT:
            message = f"too many kernel API calls in flight at once (at most {MAX_IN_FLIGHT})"
            self._reply(channels, request_id, 400, error_body("invalid", message))
            return
        call = self.call
        if call is None:
            message = "the recursa API is not served to this kernel"
            self._reply(channels, request_id, 503, error_body("internal", message))
            return
        task = asyncio.get_running_loop().create_task(
            self._run(channels, request_id, request, call), name="recursa-kernel-api-relay"
        )
        self._tasks[request_id] = task
        self._running.add(task)
        task.add_done_callback(lambda done: self._ended(request_id, done))

    def _ended(self, request_id: str, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._tasks.get(request_id) is task:
            del self._tasks[request_id]

    async def _run(
        self, channels: CommChannels, request_id: str, request: _Request, call: ApiCall
    ) -> None:
        bound = None if request.timeout is None else request.timeout + REPLY_GRACE
        try:
            async with asyncio.timeout(bound):
                status, body = await call(
                    request.method, request.path, request.body, request.timeout
                )
        except TimeoutError:
            return  # the kernel gave up on it before now
        except Exception:
            log.exception(
                "kernel API request %s %s failed in the relay", request.method, request.path
            )
            status, body = 500, error_body("internal", "the kernel API relay failed")
        self._reply(channels, request_id, status, body)

    def _reply(self, channels: CommChannels, request_id: str, status: int, body: Any) -> None:
        if channels is not self._channels:
            return  # meant for a process replaced since
        content = {
            "comm_id": KERNEL_COMM_ID,
            "data": {"id": request_id, "status": status, "body": body},
        }
        try:
            # Never waits: a kernel that stops reading its control channel while
            # it floods requests must not stall the daemon's loop on a full queue.
            channels.send("comm_msg", content, control=True, block=False)
        except (KernelError, ValueError, TypeError):
            # Closed channels (the process is stopping), a kernel not reading,
            # or a body the session cannot serialize: the reply is dropped and
            # the kernel's wait ends at its timeout.
            log.info("a kernel API reply was dropped (%s)", request_id)


def _parse(data: JSONDict) -> _Request:
    """A request's fields, checked; ValueError with one line otherwise."""
    method = data.get("method")
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(sorted(METHODS))}")
    path = data.get("path")
    if not isinstance(path, str) or len(path) > MAX_PATH_CHARS or not _PATH.fullmatch(path):
        raise ValueError("path must be a kernel route (/kernel/...)")
    if any(part in (".", "..") for part in path.partition("?")[0].split("/")):
        raise ValueError("path must not hold . or .. segments")
    body = data.get("body")
    if body is not None:
        if not isinstance(body, dict):
            raise ValueError("body must be an object or null")
        try:
            size = len(json.dumps(body, ensure_ascii=False, allow_nan=False))
        except (ValueError, TypeError, RecursionError):
            raise ValueError("body is not JSON") from None
        if size > MAX_BODY_CHARS:
            raise ValueError(f"body is larger than {MAX_BODY_CHARS} characters")
    timeout = data.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ValueError("timeout must be a number of seconds or null")
        timeout = float(timeout)
        if not math.isfinite(timeout) or not 0 <= timeout <= MAX_TIMEOUT:
            raise ValueError(f"timeout must be from 0 to {MAX_TIMEOUT:g} seconds")
    return _Request(method, path, body, timeout)


__all__ = [
    "MAX_BODY_CHARS",
    "MAX_IN_FLIGHT",
    "ApiCall",
    "ApiTransport",
    "CommChannels",
    "Relay",
]

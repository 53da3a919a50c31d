"""Runs inside the kernel: the kernel API over the kernel's own Jupyter channels.

A kernel behind a remote Jupyter gateway has no daemon socket to reach and no
token; it has its connection. In a kernel switched to it (:func:`use_comm`:
the extension's ``--RecursaKernel.api_transport=comm``, or a silent call after
start), :func:`recursa.api.client.run` sends each request here instead of over
HTTP:

- a request goes out as a ``comm_msg`` on iopub with the comm id
  :data:`~recursa.protocol.wire.KERNEL_COMM_ID` (a fixed id, no ``comm_open``:
  nothing in the kernel decides who it speaks for; the daemon reads that from
  the connection the message came on). Its ``data`` is ``{"id", "method",
  "path", "body", "timeout"}``; the daemon's side is :mod:`recursa.kernel.relay`;
- the reply is a ``comm_msg`` with the same comm id on the **control**
  channel, ``{"id", "status", "body"}``. A kernel does not read shell while a
  cell awaits, but it runs control handlers in their own thread: the handler
  :func:`use_comm` registers resolves the waiting call's future on the loop
  that awaits it (``call_soon_threadsafe``). Other control ``comm_msg`` go to
  whatever handled them before, or are ignored.

Every request has its own id, so any number may be in flight (the daemon
refuses more than 64 at once). A call whose wait is cancelled (an interrupt)
forgets its id and tells the daemon, which stops the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

log = logging.getLogger(__name__)

_Handler = Callable[..., Awaitable[None] | None]


class _State:
    """The one comm transport of this process, once :func:`use_comm` ran."""

    send: Callable[[dict[str, Any]], None] | None = None
    """Sends one ``comm_msg``'s data on iopub."""
    lock = threading.Lock()
    pending: ClassVar[
        dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[tuple[int, Any]]]]
    ] = {}
    """The calls awaiting a reply, by request id (guarded by ``lock``: the
    control thread takes them)."""
    ids = itertools.count(1)
    prefix = f"{os.getpid():x}-"


def active() -> bool:
    """Whether this kernel's API goes over its channels."""
    return _State.send is not None


def use_comm(shell: Any) -> None:
    """Switch this kernel's API to its own channels (see the module docstring).
    Idempotent; ``shell`` is the kernel's ``InteractiveShell``."""
    from recursa.protocol.wire import KERNEL_COMM_ID

    kernel = shell.kernel
    handlers: dict[str, _Handler] = kernel.control_handlers
    previous = handlers.get("comm_msg")
    if getattr(previous, "recursa_comm", False):
        return

    async def on_control(*args: Any) -> None:
        msg = args[-1]
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, dict) and content.get("comm_id") == KERNEL_COMM_ID:
            _take_reply(content.get("data"))
        elif previous is not None:
            result = previous(*args)
            if result is not None:
                await result

    on_control.recursa_comm = True  # type: ignore[attr-defined]
    ident = f"comm-{KERNEL_COMM_ID}".encode()

    def send(data: dict[str, Any]) -> None:
        kernel.session.send(
            kernel.iopub_socket,
            "comm_msg",
            {"comm_id": KERNEL_COMM_ID, "data": data},
            parent=kernel.get_parent("shell"),
            ident=ident,
        )

    handlers["comm_msg"] = on_control
    _State.send = send


async def call(
    method: str,
    path: str,
    body: dict[str, Any] | None,
    *,
    timeout: float | None,  # noqa: ASYNC109 -- the reply's deadline, sent to the daemon too
) -> tuple[int, Any] | None:
    """Send one request and return the reply's ``(status, body)``; None when no
    reply came within ``timeout`` seconds. Raises ``RuntimeError`` unless
    :func:`active`."""
    send = _State.send
    if send is None:
        raise RuntimeError("the kernel API does not go over this kernel's channels")
    loop = asyncio.get_running_loop()
    request_id = f"{_State.prefix}{next(_State.ids)}"
    future: asyncio.Future[tuple[int, Any]] = loop.create_future()
    with _State.lock:
        _State.pending[request_id] = (loop, future)
    answered = False
    try:
        send({"id": request_id, "method": method, "path": path, "body": body, "timeout": timeout})
        try:
            async with asyncio.timeout(timeout):
                reply = await future
        except TimeoutError:
            return None
        answered = True
        return reply
    finally:
        with _State.lock:
            _State.pending.pop(request_id, None)
        if not answered:
            # Cancelled, timed out or failed to send: the daemon may stop it.
            try:
                send({"id": request_id, "cancel": True})
            except Exception:
                log.debug("could not cancel kernel API request %s", request_id, exc_info=True)


def _take_reply(data: object) -> None:
    """In the control thread: hand a reply to the call that awaits it, if any;
    or, on a reset (a daemon that took this kernel over after its predecessor
    died), end every call in flight: no reply will come to them."""
    if not isinstance(data, dict):
        return
    if data.get("reset") is True:
        with _State.lock:
            pending, _State.pending = _State.pending, {}
        for loop, future in pending.values():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future, (503, RESET_BODY))
        return
    request_id, status = data.get("id"), data.get("status")
    if not isinstance(request_id, str) or isinstance(status, bool) or not isinstance(status, int):
        return
    with _State.lock:
        entry = _State.pending.pop(request_id, None)
    if entry is None:
        return  # given up on, or not ours
    loop, future = entry
    with contextlib.suppress(RuntimeError):  # its loop is closed
        loop.call_soon_threadsafe(_resolve, future, (status, data.get("body")))


RESET_BODY = {
    "error": {
        "kind": "internal",
        "message": "the recursa daemon restarted during this call; its outcome is unknown",
    }
}


def _resolve(future: asyncio.Future[tuple[int, Any]], reply: tuple[int, Any]) -> None:
    if not future.done():
        future.set_result(reply)


__all__ = ["active", "call", "use_comm"]

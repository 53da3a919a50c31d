"""What is done over a kernel's channels, whatever runs the kernel.

A :class:`ChannelDriver` is the part of a kernel backend that only talks: it
waits for a fresh kernel to be ready, asks whether it answers (on control,
which a kernel busy with a cell still serves, or on shell, which it does not),
and runs the harness's silent requests. The backends
(:class:`~recursa.kernel.lifecycle.KernelProcess`, a process on this host;
:class:`~recursa.kernel.remote.GatewayProcess`, a kernel behind a Jupyter
gateway) say what is alive and how to wait for a death; the channels
(:class:`~recursa.kernel.wire.Channels` or
:class:`~recursa.kernel.gateway_channels.GatewayChannels`) carry the messages.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from recursa.errors import KernelError
from recursa.kernel.launch import BOOTSTRAP, USE_COMM
from recursa.kernel.wire import JSONDict, utf8

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection

    from recursa.kernel.relay import Relay
    from recursa.kernel.wire import Message

SILENT_TIMEOUT = 60.0
"""Limit for the harness's own silent commands (bootstrap, chdir, set_output)."""
PROBE_INTERVAL = 0.2
PAYLOAD_KEY = "recursa_payload"
PAYLOAD_EXPR = f"get_ipython().kernel.get_parent('shell')['content'][{PAYLOAD_KEY!r}]"
"""Kernel-side expression for the ``payload`` of the running silent request
(the kernel ignores request fields it does not know)."""


class KernelChannels(Protocol):
    """The channels of one kernel as a driver uses them (see
    :class:`recursa.kernel.wire.Channels` for the contract)."""

    def request(self, *, iopub: bool = True) -> contextlib.AbstractContextManager[None]: ...

    def execute(self, code: str, *, silent: bool, extra: JSONDict | None = None) -> str: ...

    def send(self, msg_type: str, content: JSONDict, *, control: bool = False) -> str: ...

    def next_iopub(self) -> Message | None: ...

    def reply(self, msg_ids: Collection[str], msg_type: str | None = None) -> Message | None: ...

    def wake(self) -> None: ...

    async def wait(self, deadline: float | None) -> None: ...

    def close(self) -> None: ...


class ChannelDriver:
    """Requests over :attr:`channels`, for a backend that provides
    :meth:`is_alive`, :meth:`next_check`, :meth:`exit_description` and
    :meth:`log_tail`."""

    channels: KernelChannels | None
    startup_timeout: float
    relay: Relay | None
    """Serves the kernel API over the kernel's channels (``api_transport="comm"``), or None."""

    def is_alive(self) -> bool:
        raise NotImplementedError

    def next_check(self, now: float) -> float:
        raise NotImplementedError

    def exit_description(self) -> str:
        raise NotImplementedError

    def log_tail(self) -> str:
        """What the kernel printed before it could talk, for an error (``; ...``)."""
        return ""

    def answered(self) -> None:
        """A fresh kernel answered for the first time."""

    async def wait_ready(self, deadline: float) -> None:
        """Ready means: a ``kernel_info_reply`` came back on shell, and iopub
        delivers (ipykernel greets each subscriber with ``iopub_welcome``; a
        gateway relays what the kernel publishes). Both are needed: a
        subscription joins late, and output sent before it joined would be lost."""
        channels = self.channels
        assert channels is not None
        loop = asyncio.get_running_loop()
        got_iopub = False
        sent: list[str] = []
        next_probe = loop.time()
        with channels.request():
            while True:
                now = loop.time()
                if now >= next_probe:
                    # Repeated: a request sent before the kernel bound its
                    # socket waits in a queue, but not one sent to a process
                    # that then failed.
                    sent.append(channels.send("kernel_info_request", {}))
                    next_probe = now + PROBE_INTERVAL
                while channels.next_iopub() is not None:
                    got_iopub = True
                if got_iopub and channels.reply(sent, "kernel_info_reply") is not None:
                    return
                if not self.is_alive():
                    how = self.exit_description()
                    raise KernelError(f"the kernel exited while starting ({how}){self.log_tail()}")
                if now >= deadline:
                    limit = f"{self.startup_timeout:g} s"
                    raise KernelError(f"the kernel was not ready within {limit}{self.log_tail()}")
                await channels.wait(min(next_probe, deadline, self.next_check(now)))

    async def bootstrap(self, deadline: float) -> None:
        """Wait until a fresh process is ready, then make it recursa's (and,
        with a relay, switch its kernel API to its own channels)."""
        await self.wait_ready(deadline)
        self.answered()
        code = BOOTSTRAP if self.relay is None else f"{BOOTSTRAP}\n{USE_COMM}"
        await self.silent(code, deadline=deadline)

    def _disconnect(self) -> None:
        """Close the channels; the relay's requests end unanswered."""
        if self.relay is not None:
            self.relay.detach()
        if self.channels is not None:
            self.channels.close()
            self.channels = None

    async def answers_control(self, deadline: float) -> bool:
        """Whether the kernel answers on control by ``deadline`` (loop time)."""
        return await self._probe(deadline, control=True)

    async def answers_shell(self, deadline: float) -> bool:
        """Whether the kernel answers on shell (it is not running a cell) by
        ``deadline`` (loop time). False at once if the process is gone."""
        return await self._probe(deadline, control=False)

    async def _probe(self, deadline: float, *, control: bool) -> bool:
        channels = self.channels
        assert channels is not None
        loop = asyncio.get_running_loop()
        sent: list[str] = []
        next_probe = loop.time()
        with channels.request(iopub=False):
            while True:
                now = loop.time()
                if now >= next_probe:
                    # Again and again: a kernel interrupted while it handled
                    # one (ipykernel takes SIGINT in any handler) never answers it.
                    sent.append(channels.send("kernel_info_request", {}, control=control))
                    next_probe = now + PROBE_INTERVAL
                if channels.reply(sent) is not None:
                    return True
                if not self.is_alive() or now >= deadline:
                    return False
                await channels.wait(min(next_probe, deadline, self.next_check(now)))

    async def silent(
        self, code: str, *, payload: str | None = None, deadline: float | None = None
    ) -> JSONDict:
        """Run harness code: no output kept, no history, no execution count.
        Returns the reply's content (where a payload the code wrote is).

        ``payload`` travels in the request beside the code, where the code
        reads it as :data:`PAYLOAD_EXPR`: far cheaper for large text than a
        literal, which IPython would have to tokenize and compile. A lone
        surrogate in it arrives as ``?`` (UTF-8 cannot carry one). Any failure
        (an exception in the code, a dead or silent kernel) is ours and
        raises :class:`KernelError`.
        """
        channels = self.channels
        if channels is None:
            raise KernelError("the kernel is not running")
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + SILENT_TIMEOUT
        # A silent request prints nothing we keep: iopub is not read.
        with channels.request(iopub=False):
            extra = {PAYLOAD_KEY: utf8(payload)} if payload is not None else None
            sent = (channels.execute(code, silent=True, extra=extra),)
            while True:
                answer = channels.reply(sent, "execute_reply")
                if answer is not None:
                    reply = answer.content
                    if reply.get("status") != "ok":
                        error = f"{reply.get('ename', 'error')}: {reply.get('evalue', '')}"
                        raise KernelError(f"the kernel failed a harness command: {error}")
                    return reply
                now = loop.time()
                if not self.is_alive():
                    how = self.exit_description()
                    raise KernelError(f"the kernel died during a harness command ({how})")
                if now >= deadline:
                    raise KernelError("the kernel did not answer a harness command in time")
                await channels.wait(min(deadline, self.next_check(now)))


__all__ = [
    "PAYLOAD_EXPR",
    "PAYLOAD_KEY",
    "PROBE_INTERVAL",
    "SILENT_TIMEOUT",
    "ChannelDriver",
    "KernelChannels",
]

"""A kernel behind a Jupyter gateway, as a :class:`~recursa.kernel.Kernel` holds it.

:class:`GatewayProcess` is the gateway's counterpart of
:class:`~recursa.kernel.lifecycle.KernelProcess`: the same surface, so a
:class:`~recursa.kernel.Kernel` runs cells, interrupts, restarts, snapshots
and reattaches through it unchanged. What differs is where the kernel lives:

- **Identity.** A gateway kernel is its id, not a pid and a connection file.
  It outlives the daemon (the gateway owns it), and a later daemon reattaches
  by id (:meth:`GatewayProcess.adopt`).
- **Start.** ``POST /api/kernels`` (the configured kernelspec), then the
  channels WebSocket, a wait until it answers, and the same bootstrap as a
  local kernel (its Python must import recursa). A kernel the gateway loses
  before it answers, or that is given up as silent past the gateway's
  patience (:func:`~recursa.kernel.gateway.given_up`), is replaced by a
  new one, up to :data:`START_ATTEMPTS` kernels in all: Enterprise Gateway's
  local kernels pick their ports before they bind them, and of many started
  at once one now and then finds its port taken and never comes up (listed as
  starting, or restarted on the same port until the gateway drops it).
- **Restart.** ``POST /api/kernels/<id>/restart``: the id stays, so the
  store's record of the session's kernel stays true.
- **Death.** The gateway no longer listing the kernel, or the kernel
  publishing ``dead``, or ``restarting`` once it has answered (the gateway
  restarts a kernel that died on its own: the namespace is gone all the
  same), is a death (:func:`means_death`).
- **Interrupt and stop** are the gateway's ``interrupt`` and ``DELETE``.
- **Environment.** A kernel is started with one variable of ours
  (:meth:`~recursa.kernel.gateway.GatewayClient.start_kernel` says why), so
  the gateway passes it only that and what its operator allows; nothing of
  the daemon's environment is sent, and no token: the kernel API travels on
  the kernel's own channels (:mod:`recursa.kernel.relay`).
- **Confinement** is the gateway's host's, not recursa's sandbox: see the
  README (kernels on a Jupyter gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path

from recursa.errors import KernelError
from recursa.kernel.driver import ChannelDriver
from recursa.kernel.gateway import (
    GatewayClient,
    GatewayFailed,
    GatewaySettings,
    KernelGone,
    given_up,
)
from recursa.kernel.gateway_channels import GatewayChannels
from recursa.kernel.relay import Relay
from recursa.kernel.sandbox import NO_SANDBOX, SandboxPolicy

ADOPT_PATIENCE = 15.0
"""Seconds a reattach waits for a gateway that does not answer (not one that
answers that the kernel is gone) before the kernel is given up."""
ADOPT_RETRY = 0.5
RECONNECT_TIMEOUT = 5.0
"""Seconds to reopen the channels of a gateway kernel that is still alive."""
CHECK_INTERVAL = 1.0
"""How often a waiter looks at a gateway kernel again (its death also wakes it)."""
DELETE_ATTEMPTS = 3
DELETE_RETRY = 1.0
"""Seconds between two DELETEs of a kernel the gateway failed to stop (one
in the middle of a restart answers HTTP 500)."""
START_ATTEMPTS = 3
"""Kernels one start may ask a gateway for, when it loses one before it answers."""
JUDGE_AGAIN = 2.0
"""Seconds until a kernel still starting past the gateway's patience, but not
given up (others start beside it, none asked later has answered), is looked
at again."""

log = logging.getLogger(__name__)


GATEWAY_PREFIX = "gateway:"
"""What the store's connection file of a gateway kernel starts with (then its id)."""


def means_death(state: str, *, starting: bool) -> bool:
    """Whether a kernel publishing ``execution_state`` ``state`` died: ``dead``
    always, ``restarting`` (the gateway restarts a kernel that died on its own,
    and the namespace is gone all the same) only once the kernel answered.
    Before, the gateway is still bringing it up: a manual restart's process
    that could not bind the ports its predecessor held is restarted so."""
    return state == "dead" or (state == "restarting" and not starting)


def is_gateway_kernel(connection_file: Path | str) -> bool:
    """Whether a stored kernel record names a gateway kernel (not a local file)."""
    return str(connection_file).startswith(GATEWAY_PREFIX)


class GatewayProcess(ChannelDriver):
    """At most one kernel of a gateway, and the channels to it.

    Invariants: :attr:`channels` is set exactly while the kernel is being
    used; :attr:`kernel_id` names it from the gateway's start until it is
    deleted (a restart keeps it).
    """

    sandbox: SandboxPolicy = NO_SANDBOX
    api_socket: Path | None = None
    forked = False
    pid: int | None = None
    exchange_dir: Path | None = None
    kernel_dir: Path | None = None

    def __init__(
        self,
        client: GatewayClient,
        *,
        startup_timeout: float,
        kernel_id: str | None = None,
        workspace: Path | None = None,
        relay: Relay | None = None,
    ) -> None:
        self.client = client
        self.relay = relay
        self.startup_timeout = startup_timeout
        self.kernel_id = kernel_id
        self.workspace = workspace
        self.channels: GatewayChannels | None = None
        self.startup_time: float | None = None
        self._dead = ""
        """Why the kernel is known dead or gone (empty while it is not)."""
        self._lost = asyncio.Event()
        self._asked = 0.0
        """When (loop time) the gateway answered the request for the kernel being started."""
        self._starting = False
        """A kernel is being started, and has not answered yet (counted in the
        client's :attr:`~recursa.kernel.gateway.GatewayClient.starting`)."""
        self._judge: asyncio.TimerHandle | None = None
        """When the kernel being started is looked at again (:meth:`_judge_start`)."""
        self._given_up = False
        """The kernel being started was given up as silent (:meth:`_judge_start`)."""
        self._restart_next = False

    @property
    def settings(self) -> GatewaySettings:
        return self.client.settings

    @property
    def connection_file(self) -> Path:
        """No file: a gateway kernel is known by its id (see :attr:`kernel_id`)."""
        return Path(f"{GATEWAY_PREFIX}{self.kernel_id or ''}")

    @property
    def launched(self) -> bool:
        return self.kernel_id is not None

    def is_alive(self) -> bool:
        channels = self.channels
        return channels is not None and not channels.closed and not self._dead

    def add_env(self, env: Mapping[str, str]) -> None:
        """Nothing to keep: a gateway kernel gets its environment from the
        harness's silent ``export_env`` after every start."""

    # -- start ------------------------------------------------------------------------

    async def launch(self, cwd: Path) -> None:
        """Start a kernel (or, after :meth:`stop` kept it for a restart,
        restart it under the same id); return when it answers and is
        bootstrapped. A kernel lost before it first answered (deleted, dead
        for good, or silent past the gateway's patience) is replaced, within
        the one startup limit. Raises :class:`KernelError`; nothing is left
        running then."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self.startup_timeout
        restart, self._restart_next = self._restart_next, False
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._start(restart, deadline, last=attempt == START_ATTEMPTS)
                break
            except BaseException as exc:
                # Only a kernel that never answered is replaced: one that
                # answered, then failed recursa's bootstrap, would fail again.
                lost = (
                    isinstance(exc, Exception)
                    and self._starting
                    and bool(self._dead or isinstance(exc, KernelGone))
                )
                with contextlib.suppress(Exception):
                    await self.stop(graceful=False)
                if lost and attempt < START_ATTEMPTS and loop.time() < deadline:
                    why = self._dead or str(exc)
                    log.warning("a gateway kernel was lost while it started (%s); another", why)
                    restart = False
                    continue
                if isinstance(exc, KernelError) or not isinstance(exc, Exception):
                    raise
                raise KernelError(f"could not start a kernel on the gateway: {exc}") from exc
        self.startup_time = loop.time() - began
        if self.workspace is None:
            self.workspace = cwd

    async def _start(self, restart: bool, deadline: float, *, last: bool) -> None:
        self._dead, self._given_up = "", False  # an earlier kernel's end was dealt with
        if restart and self.kernel_id is not None:
            try:
                await self.client.restart(self.kernel_id)
            except KernelError:
                # Deleted or culled by the gateway (Kernel Gateway answers a
                # restart of a deleted kernel with HTTP 500): a new one.
                if await self._exists():
                    raise
                self.kernel_id = await self.client.start_kernel()
        else:
            self.kernel_id = await self.client.start_kernel()
        loop = asyncio.get_running_loop()
        self._asked = loop.time()
        self._set_starting(True)
        if not last:  # the last kernel has the whole limit
            self._judge_later(self.client.patience())
        await self._connect(deadline)
        await self.bootstrap(deadline)

    def _judge_later(self, patience: float | None) -> None:
        """Look at the kernel being started again once ``patience`` passed
        since it was asked for (or :data:`JUDGE_AGAIN` from now)."""
        if self._judge is not None:
            self._judge.cancel()
        loop = asyncio.get_running_loop()
        when = self._asked + patience if patience is not None else loop.time() + JUDGE_AGAIN
        self._judge = loop.call_at(max(when, loop.time() + JUDGE_AGAIN / 10), self._judge_start)

    def _judge_start(self) -> None:
        """Give the kernel being started up (another is asked for) once
        :func:`~recursa.kernel.gateway.given_up` says so; else look again."""
        self._judge = None
        patience = self.client.patience()
        if not self._starting or self._dead:
            return
        now = asyncio.get_running_loop().time()
        waited = now - self._asked
        if patience is not None and waited < patience:
            self._judge_later(patience)
            return
        if patience is not None and given_up(
            waited,
            patience,
            overtaken=self.client.latest_answered_ask > self._asked,
            others=self.client.others_within(self, now, patience),
        ):
            self._given_up = True
            self._gone(f"it did not answer within {waited:.0f} s")
            return
        self._judge = asyncio.get_running_loop().call_later(JUDGE_AGAIN, self._judge_start)

    def answered(self) -> None:
        if self._given_up:  # given up just as its answer came: it is kept
            self._given_up, self._dead = False, ""
        self._set_starting(False)
        self.client.answered(self._asked, asyncio.get_running_loop().time() - self._asked)

    def _set_starting(self, starting: bool) -> None:
        self._starting = starting
        if starting:
            self.client.began(self, self._asked)
            return
        self.client.ended(self)
        if self._judge is not None:
            self._judge.cancel()
            self._judge = None

    async def _exists(self) -> bool:
        assert self.kernel_id is not None
        try:
            await self.client.kernel(self.kernel_id)
        except KernelGone:
            return False
        return True

    async def _connect(self, deadline: float) -> None:
        """Open the channels, watched from the start: Enterprise Gateway holds
        the WebSocket until the kernel answers, so a kernel that never will
        (gone, or dead for good) is known by the watch, not by the limit."""
        kernel_id = self.kernel_id
        assert kernel_id is not None
        loop = asyncio.get_running_loop()
        self._dead = ""
        self._lost = asyncio.Event()
        self.client.watch(kernel_id, self._gone)
        timeout = max(deadline - loop.time(), 0.1)
        channels = await GatewayChannels.connect(
            self.settings, kernel_id, within=timeout, unless=self._lost
        )
        if self.relay is not None:
            self.relay.attach(channels)
        channels.on_status = self._on_status
        self.channels = channels
        if self._dead:
            channels.wake()

    def _gone(self, why: str) -> None:
        if not self._dead:
            self._dead = why
            self._lost.set()
            if self.channels is not None:
                self.channels.wake()

    def _on_status(self, state: str) -> None:
        if means_death(state, starting=self._starting):
            self._gone(f"the gateway reported the kernel {state}")

    async def adopt(self, kernel_id: str, answer_within: float) -> None:
        """Take over gateway kernel ``kernel_id``, which an earlier daemon
        started, once it answers on control (which a kernel busy with a cell
        still serves). :class:`KernelError` in one line if the gateway has no
        such kernel; one that is there but does not answer is deleted."""
        self.kernel_id = kernel_id
        loop = asyncio.get_running_loop()
        try:
            await self._find(kernel_id, loop.time() + ADOPT_PATIENCE)
            await self._connect(loop.time() + max(answer_within, 1.0))
            answered = await self.answers_control(loop.time() + answer_within)
        except KernelGone:
            self.kernel_id = None
            self.let_go()
            raise KernelError(f"gateway kernel {kernel_id} is gone") from None
        except BaseException:
            self.let_go()
            raise
        if answered:
            return
        await self.stop(graceful=False)
        raise KernelError(
            f"gateway kernel {kernel_id} did not answer within {answer_within:g} s; it was stopped"
        )

    async def reconnect(self, within: float = RECONNECT_TIMEOUT) -> bool:
        """After the channels closed (a proxy's idle timeout, a network blip, a
        gateway restarted) on a kernel the gateway still has alive: open them
        again, namespace kept. False when the kernel died or is gone (a restart
        is then due), or the gateway does not answer."""
        kernel_id = self.kernel_id
        if kernel_id is None or self._dead:
            return False
        loop = asyncio.get_running_loop()
        try:
            model = await self.client.kernel(kernel_id)
            if model.get("execution_state") == "dead":
                return False
            self._disconnect()
            await self._connect(loop.time() + within)
            if await self.answers_control(loop.time() + within):
                log.info("gateway kernel %s: channels reopened, namespace kept", kernel_id)
                return True
        except KernelError as exc:
            log.info("gateway kernel %s could not be reconnected: %s", kernel_id, exc)
        return False

    async def _find(self, kernel_id: str, deadline: float) -> None:
        """The gateway has the kernel: asked again until ``deadline`` while the
        gateway does not answer (a daemon restarted after a crash may come up
        while its gateway restarts too). KernelGone at once if it has not."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.client.kernel(kernel_id)
                return
            except KernelGone:
                raise
            except KernelError:
                if loop.time() >= deadline:
                    raise
            await asyncio.sleep(ADOPT_RETRY)

    def let_go(self) -> None:
        """Close the channels and keep the kernel, for a later :meth:`adopt`."""
        if self.kernel_id is not None:
            self.client.unwatch(self.kernel_id)
        self._disconnect()

    # -- control ------------------------------------------------------------------------

    async def interrupt(self) -> None:
        if self.kernel_id is not None:
            try:
                await self.client.interrupt(self.kernel_id)
            except KernelError as exc:
                # The cell's own loop restarts a kernel that cannot be interrupted.
                log.info("interrupting gateway kernel %s failed: %s", self.kernel_id, exc)

    async def stop(self, *, graceful: bool, keep_connection_file: bool = False) -> None:
        """Close the channels and delete the kernel; with
        ``keep_connection_file`` (a restart) keep it for :meth:`launch` to
        restart under its id. Safe with no kernel. ``graceful`` makes no
        difference: the gateway shuts a kernel down politely, then by force."""
        self._set_starting(False)
        self._disconnect()
        if self.kernel_id is None:
            return
        self.client.unwatch(self.kernel_id)
        if keep_connection_file:
            self._restart_next = True
            return
        kernel_id, self.kernel_id = self.kernel_id, None
        for attempt in range(1, DELETE_ATTEMPTS + 1):
            try:
                await self.client.delete(kernel_id)
                return
            except KernelError as exc:
                passing = isinstance(exc, GatewayFailed) and exc.status >= 500
                if not passing or attempt == DELETE_ATTEMPTS:
                    log.warning("could not stop gateway kernel %s: %s", kernel_id, exc)
                    return
            await asyncio.sleep(DELETE_RETRY)

    # -- exit ---------------------------------------------------------------------------

    async def wait_exit(self, seconds: float) -> None:
        """Nothing to wait for: a gateway kernel ends when it is deleted."""

    def next_check(self, now: float) -> float:
        return now + CHECK_INTERVAL

    def exit_description(self) -> str:
        if self._dead:
            return self._dead
        if self.channels is None or self.channels.closed:
            return "the gateway closed the kernel's connection"
        return "exit status unknown"


__all__ = ["GATEWAY_PREFIX", "GatewayProcess", "is_gateway_kernel", "means_death"]

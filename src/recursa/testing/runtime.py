"""``make_runtime``: a real Runtime rooted in a temporary directory.

Real store, real kernels, real providers; only the model is scripted (faux
provider or the loopback fake server). Retries do not sleep: the delays they
would have slept are recorded in ``runtime.retry_delays`` instead.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from recursa.config import AgentsConfig, HarnessConfig, Limits, SessionsConfig, load_config
from recursa.daemon.embedded import serve_embedded
from recursa.runtime import Runtime
from recursa.runtime.host import RuntimeHost


class RecordingSleep:
    """An injected ``sleep`` that records delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@asynccontextmanager
async def make_runtime(
    home: Path,
    *,
    env: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    warm_kernels: int = 0,
    retry_sleep: RecordingSleep | None = None,
    clock: Callable[[], float] | None = None,
    sessions: SessionsConfig | None = None,
    agents: AgentsConfig | None = None,
    harness: HarnessConfig | None = None,
    api: bool = True,
) -> AsyncIterator[Runtime]:
    """A Runtime whose RECURSA_HOME is ``home``; closed (kernels and all) on exit.

    The configuration reads the real environment with ``env`` laid over it.
    Retries sleep through ``retry_sleep`` (a fresh :class:`RecordingSleep` by
    default, reachable as ``runtime.retry_sleep``); ``clock`` replaces the
    monotonic clock (idle unloading, limits); ``sessions`` and ``agents`` the
    lifecycle and sub-agent settings; ``harness`` the harness review settings. With ``api`` (the default) the kernel-side
    API is served in-process, so kernels can use ``rlm`` and ``agent_message``.
    """
    config = load_config(overrides={"RECURSA_HOME": str(home), **(env or {})})
    if limits is not None:
        config = replace(config, limits=limits)
    if sessions is not None:
        config = replace(config, sessions=sessions)
    if agents is not None:
        config = replace(config, agents=agents)
    if harness is not None:
        config = replace(config, harness=harness)
    sleep = retry_sleep or RecordingSleep()
    runtime = await Runtime.open(
        config, warm_kernels=warm_kernels, retry_sleep=sleep, clock=clock or time.monotonic
    )
    try:
        if api:
            async with serve_embedded(RuntimeHost(runtime), directory=home / "api") as sockets:
                runtime.api_socket = sockets.kernel
                yield runtime
        else:
            yield runtime
    finally:
        await runtime.aclose()


__all__ = ["RecordingSleep", "make_runtime"]

"""recursa as the agent of an Inspect AI task (the optional extra ``inspect``).

::

    from inspect_ai import eval
    from recursa.evals.inspect_agent import recursa_agent

    eval(my_task, model="mockllm/model", solver=recursa_agent(model="openai/gpt-4o-mini"))

:func:`recursa_agent` is an Inspect solver. For each sample it runs one
ordinary recursa session through the daemon's client (the running daemon of
``RECURSA_HOME``, started when none runs; or, with ``in_process=True``, a
runtime hosted in the eval's own process, which is what a ``faux/`` script
needs): the sample's messages are the task, texts named by
``context_keys`` (from the sample's metadata) and ``files`` (read from the
sample's sandbox) are put in the kernel as variables (``context``,
``context_1``, ...: the RLM way), and it waits until the session's whole tree
is quiet. The session's final answer becomes the sample's output (an
assistant message, and ``state.output``), which the task's scorer reads.

Inspect's own model (``eval(model=...)``) is not called: recursa calls its
model (``model=``, default the configuration's) through its own gateway. The
tokens and cost of the whole session tree are recorded under ``"recursa"``
in the sample's store and metadata (:class:`RunSummary`) and as the usage of
``state.output``; they are not added to the eval's ``model_usage`` table,
which Inspect fills only from its own model calls (no public API adds to it).

Each sample runs in a fresh working directory (a temporary one, removed after
it; or a new one under ``workdir``, kept). When a sample ends for any reason,
its sessions are stopped (unloaded, their history kept in the store), so a
sample cut short by an Inspect limit leaves nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from recursa.config import load_config
from recursa.daemon.client import DaemonClient, connect
from recursa.errors import ModelUnavailable, RecursaError, UsageError
from recursa.evals.export import session_tree
from recursa.evals.trials import descendants
from recursa.protocol.wire import ContextFile, CreateSession, SessionInfo

try:
    import anyio
    from inspect_ai.model import (
        ChatMessage,
        ChatMessageAssistant,
        ChatMessageUser,
        ModelOutput,
        ModelUsage,
    )
    from inspect_ai.solver import Generate, Solver, TaskState, solver
    from inspect_ai.util import sandbox
except ImportError:  # pragma: no cover - the extra is installed wherever this is tested
    raise ModelUnavailable(
        "recursa's Inspect agent needs inspect-ai: pip install 'recursa[inspect]'"
    ) from None

STORE_KEY = "recursa"
"""Where a sample's :class:`RunSummary` is kept, in its store and its metadata."""
STOP_SECONDS = 30.0
"""How long stopping a sample's sessions may take once the sample has ended."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What one sample's session tree did: its answer, its status (``answered``:
    quiet with an answer; ``no_answer``: quiet without one; ``timeout``: not
    quiet within ``timeout``), and the tree's accounting."""

    session: str
    model: str
    status: str
    answer: str | None
    calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float
    unknown_cost_calls: int
    subagents: int
    wall_s: float


class _SharedClient:
    """One daemon client for the samples that run at the same time.

    The connection is opened by the first sample and closed when the last one
    running lets go. It is owned by a task of its own, so it is opened and
    closed in one task whichever samples come and go (an in-process runtime's
    context must be left in the task that entered it)."""

    def __init__(self, home: str | None, in_process: bool) -> None:
        self._home = home
        self._in_process = in_process
        self._users = 0
        self._lock: asyncio.Lock | None = None
        self._owner: asyncio.Task[None] | None = None
        self._release = asyncio.Event()
        self._client: DaemonClient | None = None

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[DaemonClient]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._owner is None:
                ready: asyncio.Future[DaemonClient] = asyncio.get_running_loop().create_future()
                self._release = asyncio.Event()
                self._owner = asyncio.create_task(self._own(ready), name="recursa-inspect-client")
                try:
                    self._client = await ready
                except BaseException:
                    owner, self._owner = self._owner, None
                    await asyncio.gather(owner, return_exceptions=True)
                    raise
            self._users += 1
        assert self._client is not None
        try:
            yield self._client
        finally:
            # Shielded: a sample cancelled by an Inspect limit still lets go.
            with anyio.CancelScope(shield=True):
                await self._let_go(self._lock)

    async def _let_go(self, lock: asyncio.Lock) -> None:
        async with lock:
            self._users -= 1
            if self._users == 0 and self._owner is not None:
                owner, self._owner, self._client = self._owner, None, None
                self._release.set()
                await owner

    async def _own(self, ready: asyncio.Future[DaemonClient]) -> None:
        overrides = {"RECURSA_HOME": self._home} if self._home else None
        try:
            config = load_config(overrides=overrides)
            async with connect(config, in_process=self._in_process) as client:
                ready.set_result(client)
                await self._release.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
                return
            raise


def task_text(messages: Sequence[ChatMessage]) -> str:
    """The task a sample's messages make: the text of a lone user message as it
    is; otherwise each message's text after its role, in order."""
    if len(messages) == 1 and isinstance(messages[0], ChatMessageUser):
        return messages[0].text
    return "\n\n".join(f"{message.role}: {message.text}" for message in messages)


def usage_of(summary: RunSummary) -> ModelUsage:
    """The tree's tokens as Inspect counts them (input without the cached part)."""
    return ModelUsage(
        input_tokens=summary.input_tokens - summary.cached_tokens,
        output_tokens=summary.output_tokens,
        total_tokens=summary.input_tokens + summary.output_tokens,
        input_tokens_cache_read=summary.cached_tokens or None,
        total_cost=summary.cost if summary.calls > summary.unknown_cost_calls else None,
    )


@contextlib.contextmanager
def _workspace(workdir: str | None, sample: str) -> Iterator[Path]:
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="recursa-inspect-") as path:
            yield Path(path)
        return
    root = Path(workdir).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in str(sample))[:80]
    yield Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=root))


async def _contexts(
    state: TaskState, context_keys: Sequence[str], files: Sequence[str]
) -> tuple[ContextFile, ...]:
    placed: list[ContextFile] = []
    for key in context_keys:
        value = state.metadata.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise UsageError(f"sample {state.sample_id}: metadata {key!r} is not text")
        placed.append(ContextFile(label=key, text=value))
    for name in files:
        try:
            text = await sandbox().read_file(name)
        except FileNotFoundError:
            continue  # this sample has no such file
        placed.append(ContextFile(label=name, text=text))
    return tuple(placed)


async def _stop_tree(client: DaemonClient, root: str) -> None:
    """Stop every session of the tree, whatever cancelled the sample."""
    with (
        anyio.CancelScope(shield=True),
        anyio.move_on_after(STOP_SECONDS),
        contextlib.suppress(RecursaError),
    ):
        for info in reversed(await session_tree(client, root)):
            with contextlib.suppress(RecursaError):
                await client.stop(info.id)


async def run_sample(
    client: DaemonClient, request: CreateSession, quiet_within: float | None
) -> RunSummary:
    """Run one session to quiet (or ``quiet_within`` seconds), stop its tree,
    and sum up what it did."""
    began = time.monotonic()
    info: SessionInfo = await client.create_session(request)
    try:
        quiet = await client.wait_quiet(info.id, timeout=quiet_within)
        final = await client.session(info.id)
        tree = await client.usage(info.id)
    finally:
        await _stop_tree(client, info.id)
    answer = final.last_answer
    status = "timeout" if not quiet else ("answered" if answer is not None else "no_answer")
    total = tree.total
    return RunSummary(
        session=info.id,
        model=final.model,
        status=status,
        answer=answer,
        calls=total.calls,
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cached_tokens=total.cached_tokens,
        cost=total.cost,
        unknown_cost_calls=total.unknown_cost_calls,
        subagents=descendants(tree),
        wall_s=round(time.monotonic() - began, 3),
    )


@solver
def recursa_agent(
    model: str | None = None,
    *,
    home: str | None = None,
    in_process: bool = False,
    context_keys: Sequence[str] = (),
    files: Sequence[str] = (),
    max_steps: int | None = None,
    max_tokens: int | None = None,
    max_time: float | None = None,
    timeout: float | None = None,
    workdir: str | None = None,
) -> Solver:
    """recursa as the solver of an Inspect task (see the module docstring).

    ``model``: recursa's model (``openai/...``, ``local/default``, ``faux/NAME``);
    None: the configuration's default. ``home``: the ``RECURSA_HOME`` to use
    (None: the environment's). ``in_process``: host the runtime in this
    process instead of using the daemon. ``context_keys``: metadata keys whose
    text goes in the kernel; ``files``: paths in the sample's sandbox whose
    text goes in the kernel (a sample without one of them goes without it).
    ``max_steps``, ``max_tokens``, ``max_time``: the session's limits;
    ``timeout``: seconds to wait for the tree to go quiet
    (None: no limit; Inspect's own time limits apply too). ``workdir``: where
    each sample's working directory is made and kept (None: a temporary one).
    """
    shared = _SharedClient(home, in_process)

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        contexts = await _contexts(state, context_keys, files)
        with _workspace(workdir, f"sample-{state.sample_id}") as cwd:
            request = CreateSession(
                task=task_text(state.messages),
                model=model,
                cwd=str(cwd),
                max_steps=max_steps,
                max_tokens=max_tokens,
                max_time=max_time,
                context_files=contexts,
            )
            async with shared.use() as client:
                summary = await run_sample(client, request, timeout)
        answer = summary.answer or ""
        output = ModelOutput.from_content(model=f"recursa/{summary.model}", content=answer)
        output.usage = usage_of(summary)
        state.output = output
        state.messages.append(ChatMessageAssistant(content=answer, model=output.model))
        state.store.set(STORE_KEY, asdict(summary))
        state.metadata[STORE_KEY] = asdict(summary)
        return state

    return solve


__all__ = [
    "STORE_KEY",
    "RunSummary",
    "recursa_agent",
    "run_sample",
    "task_text",
    "usage_of",
]

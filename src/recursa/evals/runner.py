"""The evaluation runner: every item under every model and policy, as sessions.

A trial is an ordinary root session in a daemon, in a fresh workspace
(``DIR/work/...``): its tokens, cost and sub-agents are its tree's, read from
the daemon's own accounting (the ``usage`` operation), never counted here.
``repl`` trials get the item's material as the kernel variable ``context``
(the task is the question); ``context`` trials get the suite's whole prompt
as their message.

Configurations (model × policy) run one after another, each in a daemon of
its own home (:mod:`recursa.evals.homes`), stopped when its trials are done;
within one, up to ``concurrency`` trials run at once. Each finished trial is
appended to ``results.jsonl`` at once, durably, so an interrupted run keeps
everything finished and ``--resume`` runs only what is missing.

Per-trial limits hold over the whole tree: the session is given the token
and time limits for its own turn, and the runner watches the tree's usage
and clock, stopping the session (and with it its sub-agents) at a limit.

A trial that ends by the model's doing (an answer, a limit, a provider
error) is a result and is scored (no answer scores 0). One the harness could
not run (the daemon unreachable) is not recorded: ``--resume`` runs it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import shutil
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from recursa.config import CONFIG_FILE_NAME, Config, environment, load_config
from recursa.daemon import process
from recursa.daemon.client import DaemonClient, connect
from recursa.errors import DaemonError, RecursaError, UsageError
from recursa.evals.homes import WORK_DIR, prepare_home
from recursa.evals.plan import Plan
from recursa.evals.trials import (
    PLAN_FILE,
    RESULTS_FILE,
    Item,
    Policy,
    Suite,
    TrialResult,
    TrialStatus,
    append_result,
    descendants,
    metrics_of,
    read_results,
    trial_key,
)
from recursa.protocol.events import TurnEnded
from recursa.protocol.person_ops import REFINE, RefineSession
from recursa.protocol.wire import ContextFile, CreateSession

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
WATCH_SECONDS = 1.0
"""How often a running trial's tree is checked against its limits."""
LIMIT_REASONS = frozenset({"max_steps", "max_tokens", "max_time", "budget"})


@dataclass(frozen=True, slots=True)
class Trial:
    model: str
    policy: Policy
    item: Item

    @property
    def key(self) -> str:
        return trial_key(self.model, self.policy, self.item)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a front end is told: ``total`` trials in the plan, ``skipped`` of
    them already in ``results.jsonl``."""

    total: int
    skipped: int


class Runner:
    def __init__(
        self,
        plan: Plan,
        out: Path,
        config: Config,
        suite: Suite,
        *,
        in_process: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_start: Callable[[Progress], None] | None = None,
        on_config: Callable[[str, Path], None] | None = None,
        on_result: Callable[[TrialResult], None] | None = None,
        on_failure: Callable[[str, str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.out = out
        self.config = config
        self.suite = suite
        self.in_process = in_process
        self.clock = clock
        self._on_start = on_start or (lambda progress: None)
        self._on_config = on_config or (lambda label, home: None)
        self._on_result = on_result or (lambda result: None)
        self._on_failure = on_failure or (lambda key, why: None)

    @property
    def results_path(self) -> Path:
        return self.out / RESULTS_FILE

    async def run(self) -> list[TrialResult]:
        """Run every trial not yet in ``results.jsonl``; the ones finished now."""
        plan = self.plan
        self.out.mkdir(parents=True, exist_ok=True)
        with _run_lock(self.out):
            (self.out / PLAN_FILE).write_text(plan.to_json() + "\n", encoding="utf-8")
            items = await asyncio.to_thread(self.suite.items, plan.lengths, plan.n, plan.seed)
            twice = sorted(
                i for i, count in Counter(item.id for item in items).items() if count > 1
            )
            if twice:
                raise UsageError(
                    f"suite {self.suite.name}: item ids repeat: {', '.join(twice[:5])}"
                )
            return await self._run_items(items)

    async def _run_items(self, items: Sequence[Item]) -> list[TrialResult]:
        plan = self.plan
        done = set()
        if self.results_path.exists():
            done = {result.trial for result in read_results(self.results_path)}
        trials = [
            Trial(model, policy, item)
            for model in plan.models
            for policy in plan.policies
            for item in items
        ]
        todo = [trial for trial in trials if trial.key not in done]
        self._on_start(Progress(total=len(trials), skipped=len(trials) - len(todo)))
        finished: list[TrialResult] = []
        lengths = tuple(sorted({item.length for item in items} | set(plan.lengths)))
        for model in plan.models:
            for policy in plan.policies:
                mine = [t for t in todo if t.model == model and t.policy == policy]
                if not mine:
                    continue
                home = prepare_home(self.out, model, policy, self.config, lengths)
                self._on_config(f"{model} · {policy.label}", home)
                async with self._daemon(home) as client:
                    finished += await self._run_config(client, mine)
        return finished

    async def _run_config(self, client: DaemonClient, trials: Sequence[Trial]) -> list[TrialResult]:
        gate = asyncio.Semaphore(self.plan.concurrency)
        finished: list[TrialResult] = []

        async def one(trial: Trial) -> None:
            async with gate:
                try:
                    result = await self._trial(client, trial)
                except RecursaError as exc:
                    self._on_failure(trial.key, str(exc))
                    return
                append_result(self.results_path, result)
                finished.append(result)
                self._on_result(result)

        async with asyncio.TaskGroup() as group:
            for trial in trials:
                group.create_task(one(trial))
        return finished

    @contextlib.asynccontextmanager
    async def _daemon(self, home: Path) -> AsyncIterator[DaemonClient]:
        """A client of the daemon serving ``home``, started here and stopped
        when the configuration is done (or the run is interrupted)."""
        overrides = {"RECURSA_HOME": str(home), "RECURSA_CONFIG": str(home / CONFIG_FILE_NAME)}
        if self.in_process:
            async with connect(load_config(overrides=overrides), in_process=True) as client:
                yield client
            return
        env = {**environment(), **overrides}
        await process.start(home, env=env, reuse=True)
        try:
            async with DaemonClient(home) as client:
                yield client
        finally:
            # Every trial's session is stopped already: nothing to snapshot. A
            # daemon slow to go is its own problem, not the next configuration's.
            with contextlib.suppress(DaemonError):
                await asyncio.shield(process.stop(home, force=True))

    async def _trial(self, client: DaemonClient, trial: Trial) -> TrialResult:
        item, policy, limits = trial.item, trial.policy, self.plan.limits
        work = self.out / WORK_DIR / _dir_name(trial.key)
        shutil.rmtree(work, ignore_errors=True)  # a trial cut short by a crash starts again
        work.mkdir(parents=True)
        repl = policy.mode == "repl" and bool(item.context)
        request = CreateSession(
            task=item.question if repl else item.prompt,
            model=trial.model,
            cwd=str(work),
            max_steps=limits.steps,
            max_tokens=limits.tokens,
            max_time=limits.time,
            context_files=(ContextFile(label="context", text=item.context),) if repl else (),
        )
        started = self.clock()
        info = await client.create_session(request)
        try:
            stopped_for = await self._watch(client, info.id, started)
            detail = ""
            if policy.refine and stopped_for is None:
                try:
                    reply = await client.call(REFINE, RefineSession(info.id))
                    detail = f"refinement {reply.refinement_id}: {len(reply.staged)} edit(s) staged"
                except RecursaError as exc:
                    detail = f"refinement failed: {exc}"
            wall = self.clock() - started
            answer, reason, why = await _outcome(client, info.id)
            usage = await client.usage(info.id)
        finally:
            with contextlib.suppress(RecursaError):
                await asyncio.shield(client.stop(info.id))  # its kernels are not needed any more
        status: TrialStatus
        if stopped_for is not None:
            status, detail = "limit", f"the trial's {stopped_for} limit"
        elif reason == "answered":
            status = "ok"
        elif reason in LIMIT_REASONS:
            status, detail = "limit", reason
        else:
            status, detail = "error", f"{reason or 'no turn end'}: {why}".strip(": ")
        score, metrics = 0.0, {}
        if answer is not None:
            try:
                score = float(self.suite.score(item, answer))
                metrics = metrics_of(self.suite, item, answer)
            except Exception as exc:  # a suite's scoring is its own code: it fails this trial only
                status, detail = "error", f"the suite could not score the answer: {exc!r}"
                score, metrics = 0.0, {}
        return TrialResult(
            trial=trial.key,
            suite=self.suite.name,
            item=item.id,
            task=item.task,
            length=item.length,
            model=trial.model,
            policy=policy.label,
            seed=self.plan.seed,
            score=score,
            status=status,
            answer=answer,
            references=item.references,
            metric=item.metric,
            input_tokens=usage.total.input_tokens,
            output_tokens=usage.total.output_tokens,
            cached_tokens=usage.total.cached_tokens,
            cost=usage.total.cost,
            calls=usage.total.calls,
            wall_s=round(wall, 3),
            subagents=descendants(usage),
            session=info.id,
            detail=detail,
            finished_at=time.time(),
            metrics=metrics,
        )

    async def _watch(self, client: DaemonClient, session: str, started: float) -> str | None:
        """Wait for the trial's tree to go quiet; stop it at a limit of the
        whole tree and return which (``time``, ``tokens``, ``cost``)."""
        limits = self.plan.limits
        while True:
            left = started + limits.time - self.clock()
            if left <= 0:
                return await _stop(client, session, "time")
            if await client.wait_quiet(session, timeout=min(WATCH_SECONDS, left)):
                return None
            if limits.tokens is None and limits.cost is None:
                continue
            total = (await client.usage(session)).total
            if (
                limits.tokens is not None
                and total.input_tokens + total.output_tokens > limits.tokens
            ):
                return await _stop(client, session, "tokens")
            if limits.cost is not None and total.cost > limits.cost:
                return await _stop(client, session, "cost")


async def _stop(client: DaemonClient, session: str, limit: str) -> str:
    await client.stop(session)
    await client.wait_quiet(session, timeout=30.0)
    return limit


async def _outcome(client: DaemonClient, session: str) -> tuple[str | None, str | None, str]:
    """The session's answer, and how its last turn ended (reason, detail)."""
    info = await client.session(session)
    reason, detail = None, ""
    async for record in client.events(session, limit=64):
        if isinstance(record.event, TurnEnded):
            reason, detail = record.event.reason, record.event.detail
    answer = info.last_answer if reason == "answered" else None
    return answer, reason, detail


@contextlib.contextmanager
def _run_lock(out: Path) -> Iterator[None]:
    """Hold the run's directory: two runs appending to one ``results.jsonl``
    (a second ``--resume``) would run the same trials twice and stop each
    other's daemons. The lock goes with the process, however it ends."""
    with (out / LOCK_FILE).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"{out}: another recursa eval is running on it") from None
        yield


def _dir_name(key: str) -> str:
    """A directory for a trial's workspace: readable, and unique by a digest of its key."""
    readable = "".join(c if c.isalnum() or c in "._-" else "_" for c in key)[:120]
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"

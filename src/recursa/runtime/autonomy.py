"""Autonomous mode in the runtime: the turn-end control that runs the gates,
the gate runner, and the workspace fingerprint.

:class:`Autonomy` is one of ``Runtime.controls``. After every turn of a
session in an autonomous run it

1. takes the workspace's fingerprint, when the gates failed last time: if the
   workspace is unchanged since, the gates are not run again;
2. otherwise runs the gates in order (the first failure ends the check), each
   recorded as a ``gate_checked`` event;
3. asks :func:`recursa.control.autonomous.decide` what follows, and applies
   it: another turn (a ``gate`` message queued to the session, in the same
   transaction as the run's new state) or the end of the run (its state and
   an ``autonomous_ended`` event saying why, also in one transaction).

A gate is ``/bin/sh -c COMMAND`` in the session's directory, in its own
process group, with the kernel's environment (``config.kernel.env``: an
allow-list with every credential removed), never the daemon's: provider keys
do not reach it. Its output (stdout and stderr together) is read as it comes
and only its head and tail are kept; at its timeout, or as soon as the shell
exits, its whole process group is killed.

The run's state lives in the session row (:data:`~recursa.control.autonomous.META_KEY`);
its tokens, cost and time are a subtree budget (row meta ``budget``),
enforced before every model call of the session and its sub-agents. A daemon that stopped while a turn's gates ran checks that turn
again when it comes back (:meth:`Autonomy.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.control.autonomous import (
    DEFAULT_GATE_TIMEOUT,
    META_KEY,
    GateResult,
    Progress,
    RunContinue,
    RunState,
    Spec,
    TurnOutcome,
    decide,
    first_failure,
    should_rerun,
)
from recursa.errors import UsageError
from recursa.kernel import bound_text, clean_text
from recursa.protocol.events import AutonomousEnded, GateChecked, Notice, TurnEnded
from recursa.protocol.wire import Autonomous
from recursa.store import JSONValue

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime
    from recursa.session import Session
    from recursa.session.inputs import Attachment

log = logging.getLogger("recursa.autonomy")

FINGERPRINT_MAX_ENTRIES = 50_000
"""A workspace with more entries than this has no fingerprint: its gates always rerun."""

FINGERPRINT_SKIP: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".recursa",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
    }
)
"""Directories whose changes are not the model's work: version control, the
harness's own, and caches that running a gate rewrites."""

EXIT_GRACE = 5.0
"""Seconds to finish reading a gate's output after its shell exited and its
process group was killed (a process that left the group may hold the pipe)."""


# ------------------------------------------------------------------- fingerprint


def fingerprint(root: Path, *, skip: Iterable[Path] = ()) -> str | None:
    """A cheap hash of the files under ``root``: each one's relative path, size,
    mtime (ns) and inode. Directories named in :data:`FINGERPRINT_SKIP` and the
    paths in ``skip`` are left out; symbolic links are not followed. None when
    ``root`` cannot be read or holds more than :data:`FINGERPRINT_MAX_ENTRIES`
    entries: the caller must then assume it changed."""
    skipped = {str(p) for p in skip}
    digest = hashlib.blake2b(digest_size=16)
    entries = 0
    stack = [str(root)]
    try:
        while stack:
            directory = stack.pop()
            with os.scandir(directory) as listing:
                found = sorted(listing, key=lambda e: e.name)
            for entry in found:
                entries += 1
                if entries > FINGERPRINT_MAX_ENTRIES:
                    return None
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in FINGERPRINT_SKIP and entry.path not in skipped:
                        stack.append(entry.path)
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed while we looked: a change, seen next time
                    continue
                line = f"{os.path.relpath(entry.path, root)}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ino}\n"
                digest.update(line.encode("utf-8", "surrogateescape"))
    except OSError:
        return None
    return digest.hexdigest()


# ----------------------------------------------------------------------- gates


class _Capture:
    """A gate's output as it arrives: the first and the last ``keep`` bytes."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def text(self, limit: int) -> tuple[str, int, bool]:
        """``(shown, size, truncated)``: the output bounded to about ``limit``
        characters, head and tail, the cut marked as the kernel marks it."""
        if self.total <= len(self.head) + len(self.tail):
            full = clean_text(bytes(self.head + self.tail).decode("utf-8", "replace"))
            shown, truncated = bound_text(full, limit)
            return shown, len(full), truncated
        head = clean_text(bytes(self.head).decode("utf-8", "replace"))[: limit * 2 // 3]
        tail = clean_text(bytes(self.tail).decode("utf-8", "replace"))[-(limit - len(head)) :]
        cut = head.rfind("\n")
        if cut > len(head) * 3 // 4:
            head = head[: cut + 1]
        cut = tail.find("\n")
        if 0 <= cut < len(tail) // 4:
            tail = tail[cut + 1 :]
        omitted = self.total - len(head.encode()) - len(tail.encode())
        marker = f"\n[... about {omitted:,} bytes omitted of {self.total:,} ...]\n"
        return head + marker + tail, self.total, True


class _GateProtocol(asyncio.SubprocessProtocol):
    """Feeds a gate's output to its capture, and says when the shell exited
    (which may be long before its pipe closes: a process it started in the
    background can hold the pipe open)."""

    def __init__(self, capture: _Capture, loop: asyncio.AbstractEventLoop) -> None:
        self.capture = capture
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        self.capture.add(bytes(data))

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def run_gate(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    time_limit: float,
    output_chars: int,
    clock: Callable[[], float] = time.monotonic,
) -> GateResult:
    """Run one gate: ``/bin/sh -c command`` in ``cwd`` with exactly ``env``, for
    at most ``time_limit`` seconds. Passed means exit status 0. Never raises for
    the gate's own failures (they are its result); cancelled, it kills the gate
    first. When the shell exits, its process group is killed: a gate leaves
    nothing running."""
    started = clock()
    loop = asyncio.get_running_loop()
    capture = _Capture(max(output_chars, 1000) * 4)
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: _GateProtocol(capture, loop),
            "/bin/sh",
            "-c",
            command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return GateResult(
            gate=command,
            status="error",
            output=f"could not start the gate in {cwd}: {reason}",
            duration=clock() - started,
        )
    pid = transport.get_pid()
    timed_out = False
    try:
        try:
            async with asyncio.timeout(time_limit):
                await asyncio.shield(protocol.exited)  # a timeout must not cancel the future
        except TimeoutError:
            timed_out = True
        _kill_group(pid)  # what the gate left running, or the gate itself
        await asyncio.shield(protocol.exited)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(EXIT_GRACE):
                await asyncio.shield(protocol.closed)  # the rest of its output
    finally:
        if transport.get_returncode() is None:  # cancelled: the gate must not outlive the check
            _kill_group(pid)
            transport.kill()
            await asyncio.shield(protocol.exited)
        transport.close()
    shown, chars, truncated = capture.text(output_chars)
    duration = clock() - started
    code = None if timed_out else transport.get_returncode()
    return GateResult(
        gate=command,
        status="timeout" if timed_out else "passed" if code == 0 else "failed",
        exit_code=code,
        output=shown,
        chars=chars,
        truncated=truncated,
        duration=duration,
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def spec_of(request: Autonomous) -> Spec:
    """The run a ``recursa run --autonomous`` asked for (checked later, by
    :meth:`Autonomy.check`)."""
    if not isinstance(request.gates, tuple | list):
        raise UsageError("gates must be a list of shell commands")
    return Spec(
        gates=tuple(request.gates),
        max_turns=request.max_turns,
        max_tokens=request.max_tokens,
        max_cost=request.max_cost,
        max_time=request.max_time,
        gate_timeout=DEFAULT_GATE_TIMEOUT if request.gate_timeout is None else request.gate_timeout,
    )


# --------------------------------------------------------------------- control


class Autonomy:
    """The autonomous-mode control of a runtime (``runtime.autonomy``, also in
    ``runtime.controls``). See the module docstring."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks = runtime.tasks.group("autonomy")

    # -------------------------------------------------------------- starting

    def check(self, spec: Spec, model: str, *, task: str | None) -> Spec:
        """``spec`` if a run of ``task`` with ``model`` can keep it; else a one-line
        UsageError. Call it before the session is created, so a bad run leaves
        no trace."""
        if task is None or not task.strip():
            raise UsageError("an autonomous run needs a task")
        spec.check()
        if spec.max_cost is not None and not self.runtime.accounts.priced(model):
            raise UsageError(
                f"--max-cost needs a priced model, and {model}'s price is unknown "
                "(set one in [prices], or limit --max-tokens instead)"
            )
        return spec

    def start(
        self,
        session: Session,
        spec: Spec,
        task: str | None,
        attachments: tuple[Attachment, ...] = (),
    ) -> None:
        """Make ``session`` (new, idle) an autonomous run and queue its task (with
        its ``attachments``) and the gates' introduction; one transaction.
        ``spec`` has passed :meth:`check`."""
        now = self.store.now()
        state = RunState(spec=spec, started=now)
        with self.store.transaction():
            row = self.store.session(session.id)
            meta: dict[str, JSONValue] = dict(row.meta)
            meta[META_KEY] = state.to_json()
            budget = spec.budget()
            if budget is not None:
                meta["budget"] = {**budget, "started": now}
            self.store.update_session(session.id, meta=meta)
            session.record(Notice(text=spec.describe()))
            if task is not None and task.strip():
                session.send(task, mode="follow_up", attachments=attachments)
            session.send(spec.introduction(), mode="follow_up", source="gate")

    def state(self, session_id: str) -> RunState | None:
        """The session's autonomous run (None: it has none)."""
        return RunState.from_json(self.store.session(session_id).meta.get(META_KEY))

    # ------------------------------------------------------------ after turns

    async def after_turn(self, session: Session, ended: TurnEnded) -> None:
        """Check a turn of an autonomous run: gates, then continue or end it."""
        lock = self._locks.setdefault(session.id, asyncio.Lock())
        async with lock:
            await self._check(session, ended)

    async def _check(self, session: Session, ended: TurnEnded) -> None:
        state = self.state(session.id)
        if state is None or state.status != "running" or ended.turn <= state.checked_turn:
            return
        if ended.reason == "interrupted":
            return  # the user stopped the turn: the run waits for their next message
        spec = state.spec
        rerun = True
        if state.fingerprint is not None:
            now = await self._fingerprint(session)
            rerun = should_rerun(state.fingerprint, now)
        if rerun:
            results = await self._run_gates(session, spec, ended.turn)
        else:
            results = list(state.results)
            failing = first_failure(spec, results)
            if failing is not None:
                session.record(
                    GateChecked(
                        gate=failing.gate,
                        status="skipped",
                        turn=ended.turn,
                        exit_code=failing.exit_code,
                        output="(not run again: the workspace has not changed since it failed)",
                    )
                )
        turns = state.turns + 1
        progress = self._progress(session.id, turns, state.started)
        outcome = TurnOutcome(reason=ended.reason, detail=ended.detail, turn=ended.turn)
        decision = decide(spec, progress, results, rerun=rerun, turn=outcome)
        workspace = state.fingerprint
        if isinstance(decision, RunContinue) and rerun:
            workspace = await self._fingerprint(session)  # as the failed gates left it
        new = replace(
            state,
            turns=turns,
            checked_turn=ended.turn,
            results=tuple(results),
            fingerprint=workspace,
        )
        with self.store.transaction():
            if isinstance(decision, RunContinue):
                self._save(session.id, new)
                session.send(decision.prompt, mode="follow_up", source="gate")
            else:
                self._save(session.id, new.ended(decision))
                session.record(
                    AutonomousEnded(outcome=decision.outcome, detail=decision.detail, turns=turns)
                )
        if not isinstance(decision, RunContinue):
            log.info("session %s: %s", session.id, decision.detail)

    async def _run_gates(self, session: Session, spec: Spec, turn: int) -> list[GateResult]:
        config = self.runtime.config
        results: list[GateResult] = []
        for gate in spec.gates:
            result = await run_gate(
                gate,
                cwd=session.cwd,
                env=config.kernel.env,
                time_limit=spec.gate_timeout,
                output_chars=config.limits.output_chars,
            )
            results.append(result)
            session.record(
                GateChecked(
                    gate=gate,
                    status=result.status,
                    turn=turn,
                    exit_code=result.exit_code,
                    output=result.output,
                    chars=result.chars,
                    truncated=result.truncated,
                    duration=round(result.duration, 3),
                )
            )
            if not result.passed:
                break
        return results

    async def _fingerprint(self, session: Session) -> str | None:
        home = self.runtime.config.home.expanduser()
        skip = (home, home.resolve(), session.deps.workspace)
        return await asyncio.to_thread(fingerprint, session.cwd, skip=skip)

    def _progress(self, session_id: str, turns: int, started: float) -> Progress:
        totals = self.store.usage_totals(session_id, tree=True)
        return Progress(
            turns=turns,
            tokens=totals.input_tokens + totals.output_tokens,
            cost=totals.cost,
            elapsed=max(0.0, self.store.now() - started),
        )

    def _save(self, session_id: str, state: RunState) -> None:
        """Write the run's state; the rest of the row's meta is kept as it is."""
        row = self.store.session(session_id)
        meta: dict[str, JSONValue] = dict(row.meta)
        meta[META_KEY] = state.to_json()
        self.store.update_session(session_id, meta=meta)

    # -------------------------------------------------------------- restarts

    def resume(
        self,
        sessions: Sequence[Session],
        after_turn: Callable[[Session, TurnEnded], Awaitable[None]] | None = None,
    ) -> list[str]:
        """After a restart: check the last turn of every run whose turn ended and
        was never checked (the daemon stopped while its gates ran), with
        ``after_turn`` (every turn-end control, in order; default: this one
        alone). In the background; :meth:`aclose` cancels what is still going.
        Returns the ids of the sessions being checked."""
        checked: list[str] = []
        for session in sessions:
            try:
                state = self.state(session.id)
            except Exception:
                log.exception("session %s: reading its autonomous run failed", session.id)
                continue
            end = session.last_end
            if (
                state is None
                or state.status != "running"
                or session.running
                or end is None
                or end.turn <= state.checked_turn
            ):
                continue
            self._tasks.start(
                self._resume(session, end, after_turn or self.after_turn),
                name=f"autonomy {session.id}",
            )
            checked.append(session.id)
        return checked

    async def _resume(
        self,
        session: Session,
        end: TurnEnded,
        after_turn: Callable[[Session, TurnEnded], Awaitable[None]],
    ) -> None:
        try:
            await after_turn(session, end)
        except Exception:
            log.exception("session %s: checking its autonomous run failed", session.id)

    async def join(self) -> None:
        """Wait for the checks :meth:`resume` started (tests; a shutdown cancels them)."""
        await self._tasks.join()

    async def aclose(self) -> None:
        """Cancel checks still running in the background (their gates are killed)."""
        await self._tasks.aclose()


__all__ = [
    "EXIT_GRACE",
    "FINGERPRINT_MAX_ENTRIES",
    "FINGERPRINT_SKIP",
    "Autonomy",
    "fingerprint",
    "run_gate",
    "spec_of",
]

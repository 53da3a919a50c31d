"""A session's kernel: got when first needed, kept alive across daemon crashes,
snapshotted when the session unloads, restored when it loads again.

The slot owns everything between the session and its kernel process:

- **Getting one.** A kernel comes from the pool (started so that it outlives
  the daemon), or is reattached after a daemon crash from the store's record
  of its pid and connection file. A kernel the session had before and that is
  gone is replaced by a new one into which the last snapshot is restored.
- **Running cells.** Output is streamed as transient events; the full text is
  stored; the model gets the head and tail. A kernel that died or had to be
  restarted during a cell gets the last snapshot restored, and the model is
  told what was lost.
- **Checkpoints.** After a turn that ran cells, and when the session unloads,
  the namespace is snapshotted (dill, atomically written; unpicklable values
  are listed, never fatal; a size cap).

Every state change is recorded as a ``kernel_status`` event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from recursa.config import Limits
from recursa.errors import KernelError
from recursa.kernel import ApiCall, CellOutput, Kernel, OutputPart, bound_text
from recursa.protocol.events import CellFinished, Event, EventRecord, KernelStatus, Notice
from recursa.protocol.events import CellOutput as CellOutputEvent
from recursa.store import Store
from recursa.supervisor import Supervisor

log = logging.getLogger("recursa.session")

SNAPSHOT_FILE = "namespace.dill"


class KernelSource(Protocol):
    """Where kernels come from (the runtime's pool behind its cap), how to
    reattach one, and how to say one stopped (its slot is free again)."""

    async def acquire(self, cwd: Path, backend: str = "local") -> Kernel: ...

    async def attach(self, connection_file: Path, pid: int, cwd: Path) -> Kernel: ...

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SlotDeps:
    store: Store
    kernels: KernelSource
    tasks: Supervisor
    """Where the kernel's start and unload run (awaited here, cancelled if left at close)."""
    record: Callable[[Event], EventRecord]
    limits: Limits
    snapshot_max_bytes: int
    kernel_env: Callable[[], Mapping[str, str]] | None = None
    backend: str = "local"
    """Where the session's kernels run: ``local`` or ``gateway``."""
    kernel_relay: Callable[[], ApiCall | None] | None = None
    """The kernel API as the session, for a kernel that reaches it over its own
    channels (``api_transport="comm"``): asked after every start and reattach
    instead of ``kernel_env``."""
    prelude: Callable[[], tuple[str, str] | None] | None = None
    """``(digest, code)`` to run silently in the kernel before a cell whenever
    the digest changed or the kernel is new (the harness's skills), or None."""


def _which(kernel: Kernel) -> str:
    """The kernel as a status line names it: its pid, or its gateway id."""
    if kernel.kernel_id is not None:
        return f"gateway kernel {kernel.kernel_id}"
    return f"kernel pid {kernel.pid}"


class KernelSlot:
    def __init__(self, session_id: str, cwd: Path, workspace: Path, deps: SlotDeps) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.snapshot_path = workspace / SNAPSHOT_FILE
        self.deps = deps
        self._task: asyncio.Future[Kernel] | None = None
        """The kernel: being got, got, or failed to be got."""
        self._dirty = False
        self._bound: tuple[int, int, str] | None = None
        self._unloading: asyncio.Future[None] | None = None

    @property
    def loaded(self) -> bool:
        """A kernel is running (or starting) for this session."""
        return self._task is not None

    # ----------------------------------------------------------------- getting

    def prestart(self) -> None:
        """Start getting a kernel now, so it is ready when the first cell comes
        (the first model call is usually still in flight)."""
        if self._task is None:
            self._task = self.deps.tasks.start(
                self._obtain(), name=f"kernel {self.session_id}", awaited=True
            )

    async def kernel(self) -> Kernel:
        self.prestart()
        assert self._task is not None
        try:
            return await asyncio.shield(self._task)
        except KernelError:
            self._task = None
            raise

    async def _obtain(self) -> Kernel:
        kernel = await self.deps.kernels.acquire(self.cwd, self.deps.backend)
        try:
            self._remember(kernel)
            await self._export(kernel)
            if self.snapshot_path.exists():
                await self._restore(kernel)
            else:
                self.deps.record(KernelStatus(state="ready", detail=_which(kernel)))
        except BaseException:
            # Failed or cancelled half way: the kernel belongs to nobody, so
            # it is stopped and its place under the cap given back.
            await self._let_go(kernel)
            raise
        return kernel

    async def _let_go(self, kernel: Kernel) -> None:
        """Stop ``kernel`` and give back its place; the place and the store's
        row are freed even if this is cancelled (the stop itself ends the
        process before a cancellation passes)."""
        try:
            await kernel.shutdown()
        finally:
            self.deps.kernels.release()
            self.deps.store.kernels.forget(self.session_id)

    async def reattach(self) -> bool:
        """After a daemon crash: reattach to the kernel the store remembers, if it
        is still alive. Its namespace is untouched. Returns False when it is gone
        (the next cell then gets a new kernel with the last snapshot)."""
        row = self.deps.store.kernels.get(self.session_id)
        if row is None:
            return False
        try:
            kernel = await self.deps.kernels.attach(Path(row.connection_file), row.pid, self.cwd)
        except KernelError as exc:
            log.info("session %s: kernel %s is gone: %s", self.session_id, row.connection_file, exc)
            self.deps.store.kernels.forget(self.session_id)
            return False

        if kernel.api_transport == "comm":
            # A socket kernel kept the token it was given; a comm kernel's
            # token was held by the daemon that crashed, so it gets a new one.
            self._serve(kernel)
        self._task = asyncio.get_running_loop().create_future()
        self._task.set_result(kernel)
        self._dirty = True  # cells may have run after its last snapshot
        self.deps.record(
            KernelStatus(
                state="reattached", detail=f"{_which(kernel)} survived; its variables are kept"
            )
        )
        return True

    async def _run_prelude(self, kernel: Kernel) -> None:
        """Bind what the harness gives every kernel (skills) when it changed or
        the kernel is new. A failure is a notice, never the model's cell."""
        if self.deps.prelude is None:
            return
        prelude = self.deps.prelude()
        if prelude is None:
            return
        digest, code = prelude
        key = (id(kernel), kernel.restarts, digest)
        if key == self._bound:
            return
        try:
            await kernel.run_silent(code)
        except KernelError as exc:
            self.deps.record(Notice(level="warning", text=f"skills not bound: {exc}"))
        self._bound = key

    def _remember(self, kernel: Kernel) -> None:
        # A gateway kernel has no pid here: its record is its id (a restart keeps it).
        if kernel.pid is not None or kernel.kernel_id is not None:
            pid = kernel.pid or 0
            self.deps.store.kernels.record(self.session_id, pid, str(kernel.connection_file))

    async def _export(self, kernel: Kernel) -> None:
        """Give the kernel what its API needs (socket and token, or the relay of
        its channels): after every start."""
        if kernel.api_transport == "comm":
            self._serve(kernel)
        elif self.deps.kernel_env is not None:
            await kernel.export_env(self.deps.kernel_env())

    def _serve(self, kernel: Kernel) -> None:
        """Serve a ``"comm"`` kernel's API requests as this session."""
        relay = self.deps.kernel_relay
        kernel.serve_api(relay() if relay is not None else None)

    async def set_variables(self, values: Mapping[str, str]) -> None:
        """Put ``values`` in the kernel's namespace (a kernel is got first), then
        snapshot it, so they survive a lost kernel and an unload. Raises
        :class:`KernelError`."""
        kernel = await self.kernel()
        for name, text in values.items():
            self._dirty = True
            await kernel.set_variable(name, text)
        await self.checkpoint()

    # ------------------------------------------------------------------ cells

    async def execute(self, cell: int, call_id: str, code: str, time_limit: float) -> CellFinished:
        """Run one cell; never raises for what the code does. On cancellation the
        cell is recorded as interrupted, with what it printed, and the
        cancellation goes on."""
        kernel = await self.kernel()
        await self._run_prelude(kernel)
        parts: list[OutputPart] = []

        def stream(part: OutputPart) -> None:
            parts.append(part)
            self.deps.record(CellOutputEvent(cell=cell, stream=part.kind, text=part.text))

        self._dirty = True
        loop = asyncio.get_running_loop()
        started = loop.time()  # the kernel's own clock: monotonic, as in run_cell
        try:
            output = await kernel.execute(code, timeout=time_limit, on_output=stream)
        except asyncio.CancelledError:
            note = "interrupted by the user; the cell may have partly run"
            partial = CellOutput(
                status="interrupted",
                parts=tuple(parts),
                note=note,
                duration=loop.time() - started,  # how long it ran until the interrupt
            )
            self.deps.record(self._finished(cell, call_id, partial, truncate_ref=False))
            raise
        if output.restarted:
            self._remember(kernel)
            await self._export(kernel)
            self.deps.record(KernelStatus(state="restarted", detail=output.note))
            restored = await self._restore(kernel)
            # The model does not see kernel events: tell it in the cell's own output.
            output = replace(output, note=f"{output.note} {restored}".strip())
        finished = self._finished(cell, call_id, output)
        if finished.truncated:
            try:  # the model reads the whole output as _out[cell]
                await kernel.set_output(cell, output.text())
            except KernelError:
                self.deps.record(
                    Notice(
                        level="warning",
                        text=f"could not keep cell {cell}'s full output in the kernel",
                    )
                )
        return finished

    def _finished(
        self, cell: int, call_id: str, output: CellOutput, *, truncate_ref: bool = True
    ) -> CellFinished:
        text = output.text()
        ref = f"_out[{cell}]" if truncate_ref else None
        shown, truncated = bound_text(text, self.deps.limits.output_chars, ref=ref)
        self.deps.store.put_cell_output(self.session_id, cell, call_id, text)
        return CellFinished(
            cell=cell,
            call_id=call_id,
            status=output.status,
            output=shown,
            chars=len(text),
            truncated=truncated,
            duration=output.duration,
        )

    # ------------------------------------------------------- snapshot, restore

    async def checkpoint(self) -> None:
        """Snapshot the namespace if cells ran since the last snapshot."""
        if not self._dirty or self._task is None or not self._task.done():
            return
        if self._task.exception() is not None:
            return
        await self._snapshot(self._task.result())

    async def _snapshot(self, kernel: Kernel) -> None:
        try:
            report = await kernel.snapshot(
                self.snapshot_path, max_bytes=self.deps.snapshot_max_bytes
            )
        except KernelError as exc:
            self.deps.record(Notice(level="warning", text=f"could not snapshot the kernel: {exc}"))
            return
        self._dirty = False
        detail = f"{len(report.names)} variables, {report.size:,} bytes"
        if report.skipped:
            skipped = ", ".join(f"{name} ({why})" for name, why in sorted(report.skipped.items()))
            detail += f"; not kept: {skipped}"
        self.deps.record(KernelStatus(state="snapshotted", detail=detail))

    async def _restore(self, kernel: Kernel) -> str:
        """Restore the last snapshot into ``kernel``; returns what happened, in one line."""
        if not self.snapshot_path.exists():
            detail = "A new kernel: there was no snapshot to restore, so all variables are gone."
            self.deps.record(KernelStatus(state="ready", detail=detail))
            return detail
        try:
            report = await kernel.restore(self.snapshot_path)
        except KernelError as exc:
            detail = f"A new kernel: the last snapshot could not be restored ({exc})."
            self.deps.record(KernelStatus(state="ready", detail=detail))
            return detail
        detail = f"{len(report.names)} variables restored from the last snapshot"
        if report.failed:
            failed = ", ".join(f"{name} ({why})" for name, why in sorted(report.failed.items()))
            detail += f"; not restored: {failed}"
        if report.hook_errors:
            detail += f"; restore hooks failed: {'; '.join(report.hook_errors)}"
        self.deps.record(KernelStatus(state="restored", detail=detail))
        return f"{detail} (taken at the end of the last turn that ran cells)."

    # -------------------------------------------------------------- stopping

    async def unload(self) -> None:
        """Snapshot the namespace (when cells ran since the last snapshot) and
        stop the kernel (the session goes inactive). Once begun it finishes even
        if the caller is cancelled (a session being closed that asked another to
        make room): a kernel half unloaded would belong to nobody."""
        task, self._task = self._task, None
        self._revoke()
        if task is None:
            return
        unloading = self.deps.tasks.start(
            self._unload(task), name=f"unload {self.session_id}", awaited=True
        )
        self._unloading = unloading
        await asyncio.shield(unloading)

    async def _unload(self, task: asyncio.Future[Kernel]) -> None:
        try:
            kernel = await task
        except (KernelError, asyncio.CancelledError):
            return
        self._revoke()  # a token minted while the kernel was still starting
        if self._dirty:
            await self._snapshot(kernel)
        await self._let_go(kernel)
        self.deps.record(
            KernelStatus(state="stopped", detail="unloaded; the namespace is in the snapshot")
        )

    def _revoke(self) -> None:
        """The kernel is being let go: from now its token opens nothing (a
        process it left behind cannot start turns or sub-agents). Skipped when
        a new kernel was asked for meanwhile: the token is that kernel's."""
        if self._task is None:
            self.deps.store.tokens.revoke(self.session_id)

    @property
    def ready(self) -> bool:
        """A kernel is running and ready (not starting, not failed)."""
        task = self._task
        return (
            task is not None and task.done() and not task.cancelled() and task.exception() is None
        )

    async def close(self) -> None:
        """Shut the kernel down without a snapshot (the last checkpoint stays);
        an unload under way is let finish."""
        if self._unloading is not None:
            await asyncio.gather(self._unloading, return_exceptions=True)
        task, self._task = self._task, None
        self._revoke()
        if task is None:
            return
        if not task.done():
            task.cancel()
        try:
            kernel = await task
        except (KernelError, asyncio.CancelledError):
            return
        self._revoke()  # a token minted while the kernel was still starting
        await self._let_go(kernel)


__all__ = ["SNAPSHOT_FILE", "KernelSlot", "KernelSource", "SlotDeps"]

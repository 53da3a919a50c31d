"""One owner for background tasks: :class:`Supervisor`.

A task started with ``asyncio.create_task`` and kept in nobody's hands is
lost three ways: its exception is never seen, nothing cancels it when its
owner stops, and nobody can say it is still running. Every background task
of the runtime and the daemon is therefore started through a supervisor:

- :meth:`Supervisor.start` starts a named task and keeps it until it ends;
  the caller gets the task and may await or cancel it as before.
- A task that fails is logged with its traceback, unless its starter said
  it awaits the task (``awaited=True``) and so sees the failure itself.
- :meth:`Supervisor.running` names the tasks still running.
- :meth:`Supervisor.aclose` cancels every task and waits for each to end;
  afterwards :meth:`Supervisor.start` refuses (a closed owner starts nothing).

A component that stops before its owner does (the harness's reviews, the
kernel pool's spares) takes a :meth:`Supervisor.group`: its own tasks, closed
by itself, and still listed and closed by the parent.

Tasks awaited where they start (a request's work raced against a disconnect,
a cell run under a shield) are not background tasks and need no supervisor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("recursa.supervisor")


class Supervisor:
    """Starts, names, watches and finally cancels background tasks.

    Not thread-safe: use it from its event loop only."""

    def __init__(self, name: str, *, logger: logging.Logger | None = None) -> None:
        self.name = name
        self._log = logger or log
        self._tasks: dict[asyncio.Task[Any], bool] = {}
        """Each running task, and whether its starter awaits it."""
        self._groups: list[Supervisor] = []
        self._parent: Supervisor | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """:meth:`aclose` has begun: :meth:`start` refuses."""
        return self._closed

    def group(self, name: str) -> Supervisor:
        """A supervisor for one component's tasks: its owner closes it when the
        component stops; until then this one lists it, and closes it too."""
        if self._closed:
            raise RuntimeError(f"supervisor {self.name!r} is closed")
        child = Supervisor(f"{self.name}/{name}", logger=self._log)
        child._parent = self
        self._groups.append(child)
        return child

    def start(
        self, work: Coroutine[Any, Any, T], *, name: str, awaited: bool = False
    ) -> asyncio.Task[T]:
        """Run ``work`` as a task named ``name`` and keep it until it ends.

        A failure (an exception other than a cancellation) is logged, unless
        ``awaited``: the caller then promises to await the task and handle
        what it raises. Raises ``RuntimeError`` (``work`` closed, never run)
        once :meth:`aclose` has begun."""
        if self._closed:
            work.close()
            raise RuntimeError(f"supervisor {self.name!r} is closed: {name} not started")
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks[task] = awaited
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        awaited = self._tasks.pop(task, True)
        if awaited or task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._log.error("background task %r failed", task.get_name(), exc_info=error)

    def running(self) -> list[str]:
        """The names of the tasks still running, its groups' included, in start order."""
        names = [t.get_name() for t in self._tasks if not t.done()]
        for child in self._groups:
            names.extend(child.running())
        return names

    async def join(self) -> None:
        """Wait, without cancelling, until no task runs (tasks started meanwhile
        included). Failures are not raised: they are logged as they happen."""
        while tasks := self._all():
            await asyncio.wait(tasks)

    async def aclose(self) -> None:
        """Refuse new tasks, cancel every running one (groups first) and wait
        for each to end. Idempotent; never raises for a task's sake."""
        self._closed = True
        for child in list(self._groups):
            await child.aclose()
        while tasks := list(self._tasks):
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        parent, self._parent = self._parent, None
        if parent is not None and self in parent._groups:  # a second close may race
            parent._groups.remove(self)

    def _all(self) -> list[asyncio.Task[Any]]:
        tasks = list(self._tasks)
        for child in self._groups:
            tasks.extend(child._all())
        return tasks

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


__all__ = ["Supervisor"]

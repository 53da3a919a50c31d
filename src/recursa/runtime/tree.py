"""The session tree: sub-agents, the messages between agents, and waiting on them.

A sub-agent is a full session with a parent: its own context, kernel (started
on its first cell), history and workspace (``children/<id>`` under its
parent's). It works in its parent's directory and inherits its model unless
told otherwise. Its name is unique among its siblings; in the store it is
qualified as ``PARENT_ID:NAME`` so every name stays unique.

Every turn a sub-agent ends is reported to its parent as an ``answer``
message (mode ``auto``: it steers a running parent between cells and starts a
turn for an idle one). A parent blocked in ``handle.wait()`` gets the answer
there, and the queued copy is taken, so the model reads it once.

Nothing here blocks a session: waiting (for a child, for a message, for a
quiet tree) happens in the daemon, on a :class:`Pulse` every session
notifies when it starts or stops working or a message arrives.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.errors import NotFound, UsageError
from recursa.protocol.events import InputSource, SessionCreated, StatusChanged
from recursa.protocol.fields import check_session_name
from recursa.protocol.wire import (
    AgentMessage,
    Budget,
    Handle,
    InboxMessage,
    Receipt,
    ReceiptStatus,
    Spawn,
    Usage,
    UsageNode,
)
from recursa.store import MAX_NAME_CHARS as MAX_STORED_NAME_CHARS
from recursa.store import MessageRow, SessionRow, UsageTotals

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime
    from recursa.session import Session

RATE_WINDOW = 60.0


class Pulse:
    """Wakes every waiter when something changed; waiters then look again.
    (Cheaper than a condition per thing waited for, and never misses a change:
    a waiter takes the current event before it looks.)"""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    def current(self) -> asyncio.Event:
        return self._event

    @staticmethod
    async def wait(event: asyncio.Event, within: float | None) -> None:
        """Until ``event`` is set or ``within`` seconds pass (None: no limit)."""
        if within is None:
            await event.wait()
            return
        try:
            async with asyncio.timeout(max(0.0, within)):
                await event.wait()
        except TimeoutError:
            pass


def display_name(row: SessionRow) -> str | None:
    """A session's own name (a sub-agent's without its parent's qualifier)."""
    name = row.meta.get("name")
    return name if isinstance(name, str) else row.name


def depth_of(row: SessionRow) -> int:
    depth = row.meta.get("depth", 0)
    return depth if isinstance(depth, int) else 0


class Tree:
    """Sub-agent and message operations over a runtime (the daemon's kernel API)."""

    def __init__(self, runtime: Runtime, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.pulse = runtime.pulse
        self._clock = clock
        self._sent: dict[str, collections.deque[float]] = {}
        self._live: dict[str, int] = {}
        """Children not deleted, per parent (see :meth:`_check_room`)."""

    # ----------------------------------------------------------------- spawn

    def spawn(self, caller: str, request: Spawn) -> Handle:
        """Admit a child of ``caller`` and queue its task; never waits for it."""
        parent = self.store.session(caller)
        depth = depth_of(parent) + 1
        limit = self.runtime.config.agents.max_depth
        if depth > limit:
            raise UsageError(
                f"sub-agents nest at most {limit} deep and this session is at depth {depth - 1}: "
                "do the work here (the limit is [agents] max_depth)"
            )
        self._check_room(caller)
        if not isinstance(request.task, str) or not request.task.strip():
            raise UsageError("rlm() needs a task: a non-empty string")
        inherited = parent.meta.get("kernel_backend")
        backend = self.runtime.kernel_backend(
            request.backend, inherited if isinstance(inherited, str) else None
        )
        meta: dict[str, object] = {"depth": depth, "kernel_backend": backend}
        if request.spec is not None:
            request = self._apply_spec(caller, request, meta)
        model = request.model or parent.model
        self.runtime.providers.info(model)  # an unknown model fails here, before any write
        qualified = None
        if request.name is not None:
            try:
                check_session_name(request.name)
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
            qualified = f"{caller}:{request.name}"
            if len(qualified) > MAX_STORED_NAME_CHARS:
                room = MAX_STORED_NAME_CHARS - len(caller) - 1
                raise UsageError(
                    f"a sub-agent's name has at most {room} characters here "
                    f"(it is stored as PARENT_ID:NAME), not {len(request.name)}"
                )
            meta["name"] = request.name
        if request.budget is not None:
            meta["budget"] = self._check_budget(request.budget, model)
        with self.store.transaction():
            if qualified is not None and self._exists(qualified):
                raise UsageError(f"this session already has a sub-agent named {request.name!r}")
            row = self.store.create_session(
                model=model,
                cwd=parent.cwd,
                workspace="",
                name=qualified,
                parent_id=caller,
                meta=meta,  # type: ignore[arg-type]
            )
            workspace = Path(parent.workspace) / "children" / row.id
            row = self.store.update_session(row.id, workspace=str(workspace))
            self.store.append(
                row.id,
                SessionCreated(model=model, cwd=parent.cwd, name=request.name, parent_id=caller),
            )
            self.store.inbox.enqueue(
                row.id, request.task, source="parent", sender=caller, mode="follow_up"
            )
        self._live[caller] = self._live.get(caller, 0) + 1
        workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
        child = self.runtime.get(row.id)
        child.wake()
        self.pulse.notify()
        return self.handle(row)

    def _check_room(self, caller: str) -> None:
        """Refuse a child beyond ``[agents] max_children``: every child not deleted
        counts (an idle or unloaded one can be woken again), so one cell cannot
        admit hundreds of sessions; deleting a finished child frees its place.

        The count is read from the store once per parent and then kept here:
        only :meth:`spawn` adds children and only :meth:`delete` removes them
        (which forgets the count), so a spawn does not list every sibling."""
        limit = self.runtime.config.agents.max_children
        alive = self._live.get(caller)
        if alive is None:
            rows = self.store.sessions(parent_id=caller)
            alive = self._live[caller] = sum(1 for row in rows if row.status != "deleted")
        if alive >= limit:
            raise UsageError(
                f"this session already has {alive} sub-agents, the most it may have "
                f"([agents] max_children = {limit}): wait for them and delete finished ones "
                "with await rlm.delete_subagent(handle) before starting more"
            )

    def _apply_spec(self, caller: str, request: Spawn, meta: dict[str, object]) -> Spawn:
        """``rlm(task, spec=NAME)``: the active sub-agent spec the caller sees
        gives the child its role (instructions in its prompt), and a model and
        a budget where the call names none."""
        learning = self.runtime.learning
        spec = learning.harness.spec(caller, str(request.spec), learning.lineage(caller))
        meta["spec"] = {"entry_id": spec.entry_id, "version": spec.version, "title": spec.title}
        meta["role"] = spec.content
        model = request.model
        if model is None and isinstance(spec.meta.get("model"), str):
            model = str(spec.meta["model"])
        budget = request.budget
        wanted = spec.meta.get("budget")
        if budget is None and isinstance(wanted, dict):
            fields = {k: v for k, v in wanted.items() if k in Budget.__dataclass_fields__}
            budget = Budget(**fields)
        return replace(request, model=model, budget=budget)

    def _exists(self, name: str) -> bool:
        try:
            self.store.session(name)
        except NotFound:
            return False
        return True

    def _check_budget(self, budget: Budget, model: str) -> dict[str, object]:
        values = asdict(budget)
        for key, value in values.items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise UsageError(f"budget {key} must be a positive number, not {value!r}")
        if budget.cost is not None and not self.runtime.accounts.priced(model):
            raise UsageError(
                f"a cost budget needs a priced model, and {model}'s price is unknown "
                "(set one in [prices], or budget tokens instead)"
            )
        values["started"] = self.store.now()
        return values

    # ---------------------------------------------------------------- handles

    def handle(self, row: SessionRow) -> Handle:
        session = self.runtime.get(row.id) if row.status != "deleted" else None
        end = session.last_end if session else None
        return Handle(
            id=row.id,
            name=display_name(row),
            parent_id=row.parent_id,
            workspace=row.workspace,
            model=row.model,
            status=session.status if session else row.status,
            depth=depth_of(row),
            done=self._done(row, session),
            answer=session.last_answer if session else None,
            reason=end.reason if end else None,
            usage=_usage(self.store.usage_totals(row.id)),
        )

    def _done(self, row: SessionRow, session: Session | None) -> bool:
        if row.status == "deleted":
            return True
        if session is None or session.running:
            return False
        return self.store.inbox.pending_count(row.id) == 0

    def child(self, caller: str, ref: str) -> SessionRow:
        """A child of ``caller`` by id, id prefix or name."""
        for candidate in (f"{caller}:{ref}", ref):
            try:
                row = self.store.session(candidate)
            except NotFound:
                continue
            if row.parent_id == caller:
                return row
        raise NotFound(f"this session has no sub-agent {ref!r}")

    def children(self, caller: str) -> list[Handle]:
        return [self.handle(row) for row in self.store.sessions(parent_id=caller)]

    async def wait(self, caller: str, ref: str, timeout: float | None) -> Handle:  # noqa: ASYNC109 (a deadline for another session)
        """Until the child's work ends or ``timeout``; see :class:`KernelHost.wait`."""
        row = self.child(caller, ref)
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            signal = self.pulse.current()
            handle = self.handle(self.store.session(row.id))
            if handle.done:
                _, record = self.store.inbox.take(caller, sender=row.id, kind="answer")
                if record is not None:
                    self.runtime.get(caller).published(record)
                return handle
            left = None if deadline is None else deadline - self._clock()
            if left is not None and left <= 0:
                return handle
            await Pulse.wait(signal, left)

    async def delete(self, caller: str, ref: str) -> Handle:
        """Cancel the child and its whole subtree, and tombstone them."""
        row = self.child(caller, ref)
        for victim in reversed(list(self._subtree(row))):
            session = self.runtime.find(victim.id)
            if session is not None:
                await session.close()
            self.store.inbox.drop(victim.id)
            self.store.tokens.revoke(victim.id)
            self.store.set_status(victim.id, "deleted")
            record = self.store.append(victim.id, StatusChanged(status="deleted"))
            if session is not None:
                session.status = "deleted"
                session.published(record)
            self.runtime.forget(victim.id)
            self._live.pop(victim.id, None)
            if victim.parent_id is not None:
                self._live.pop(victim.parent_id, None)
        self.pulse.notify()
        return self.handle(self.store.session(row.id))

    def _subtree(self, row: SessionRow) -> Iterator[SessionRow]:
        yield row
        for child in self.store.sessions(parent_id=row.id):
            yield from self._subtree(child)

    # --------------------------------------------------------------- messages

    def message(self, caller: str, request: AgentMessage) -> list[Receipt]:
        """Store ``request.text`` for each recipient, then deliver it by mode."""
        limits = self.runtime.config.agents
        if len(request.text) > limits.max_message_chars:
            raise UsageError(
                f"a message is at most {limits.max_message_chars:,} characters; "
                f"this one has {len(request.text):,} (write it to a file and send the path)"
            )
        self._rate(caller, limits.messages_per_minute)
        sender = self.store.session(caller)
        recipients = self._recipients(sender, request.to)
        for row, _ in recipients:
            if row.status == "deleted":
                raise UsageError(f"{display_name(row) or row.id} was deleted: it takes no messages")
        receipts: list[Receipt] = []
        for row, _ in recipients:
            if self.store.inbox.pending_count(row.id) >= limits.max_pending:
                raise UsageError(
                    f"{display_name(row) or row.id} has {limits.max_pending} messages waiting; "
                    "wait for it to catch up"
                )
        for row, source in recipients:
            target = self.runtime.get(row.id)
            busy = target.running
            message = target.send(request.text, mode=request.mode, source=source, sender=caller)
            status: ReceiptStatus = (
                "queued" if busy and request.mode == "follow_up" else "delivered"
            )
            receipts.append(Receipt(message_id=message.id, session_id=row.id, status=status))
        return receipts

    def _rate(self, caller: str, per_minute: int) -> None:
        now = self._clock()
        sent = self._sent.setdefault(caller, collections.deque())
        while sent and now - sent[0] > RATE_WINDOW:
            sent.popleft()
        if len(sent) >= per_minute:
            raise UsageError(f"at most {per_minute} messages a minute; wait before sending more")
        sent.append(now)

    def _recipients(self, sender: SessionRow, to: str) -> list[tuple[SessionRow, InputSource]]:
        kind, _, name = to.partition(":")
        if to == "parent":
            if sender.parent_id is None:
                raise UsageError("this session has no parent (it is a root session)")
            return [(self.store.session(sender.parent_id), "child")]
        if kind == "child" and name:
            return [(self.child(sender.id, name), "parent")]
        if kind == "sibling" and name:
            if sender.parent_id is None:
                raise UsageError("a root session has no siblings")
            sibling = self.child(sender.parent_id, name)
            if sibling.id == sender.id:
                raise UsageError("that is this session itself")
            return [(sibling, "sibling")]
        if to == "all":
            return [
                (row, self._relation(sender, row))
                for row in self._tree_of(sender)
                if row.id != sender.id and row.status != "deleted"
            ]
        raise UsageError(
            f"unknown recipient {to!r}: use 'parent', 'child:NAME', 'sibling:NAME' or 'all'"
        )

    def _tree_of(self, row: SessionRow) -> Iterator[SessionRow]:
        root = row
        while root.parent_id is not None:
            root = self.store.session(root.parent_id)
        return self._subtree(root)

    @staticmethod
    def _relation(sender: SessionRow, recipient: SessionRow) -> InputSource:
        if recipient.id == sender.parent_id:
            return "child"
        if recipient.parent_id == sender.id:
            return "parent"
        return "sibling"

    async def inbox(self, caller: str, wait: float) -> list[InboxMessage]:
        """Take what is queued for ``caller``, waiting up to ``wait`` s for something."""
        deadline = self._clock() + max(0.0, wait)
        while True:
            signal = self.pulse.current()
            taken, record = self.store.inbox.take(caller)
            if record is not None:
                self.runtime.get(caller).published(record)
                return [self._inbox_message(m) for m in taken]
            left = deadline - self._clock()
            if left <= 0:
                return []
            await Pulse.wait(signal, left)

    def _inbox_message(self, m: MessageRow) -> InboxMessage:
        sender_name = None
        if m.sender is not None:
            try:
                sender_name = display_name(self.store.session(m.sender))
            except NotFound:
                sender_name = None
        return InboxMessage(
            id=m.id,
            sender=m.sender,
            sender_name=sender_name,
            source=m.source,
            text=m.text,
            mode=m.mode,
            at=m.created_at,
        )

    # ------------------------------------------------------------- accounting

    def usage(self, session: str) -> UsageNode:
        return self._usage_node(self.store.session(session))

    def _usage_node(self, row: SessionRow) -> UsageNode:
        own = self.store.usage_totals(row.id)
        total = self.store.usage_totals(row.id, tree=True)
        children = tuple(self._usage_node(c) for c in self.store.sessions(parent_id=row.id))
        return UsageNode(
            id=row.id,
            name=display_name(row),
            own=_usage(own),
            total=_usage(total),
            children=children,
        )

    def quiet(self, session: str) -> bool:
        """The session and its whole subtree idle, and nothing queued for the session."""
        root = self.store.session(session)
        if self.store.inbox.pending_count(root.id):
            return False
        for row in self._subtree(root):
            found = self.runtime.find(row.id)
            if found is not None and found.running:
                return False
        return True

    async def wait_quiet(self, session: str, timeout: float | None) -> bool:  # noqa: ASYNC109 (a deadline for other sessions)
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            signal = self.pulse.current()
            if self.quiet(session):
                return True
            left = None if deadline is None else deadline - self._clock()
            if left is not None and left <= 0:
                return False
            await Pulse.wait(signal, left)


def _usage(t: UsageTotals) -> Usage:
    return Usage(
        calls=t.calls,
        input_tokens=t.input_tokens,
        output_tokens=t.output_tokens,
        cached_tokens=t.cached_tokens,
        cost=t.cost,
        unknown_cost_calls=t.unknown_cost_calls,
    )


__all__ = ["Pulse", "Tree", "depth_of", "display_name"]

"""A live three-level session tree on a real daemon, with a scripted model:
what the Agents View's tests click through, and what its screenshots show.

:func:`demo_tree` starts the loopback fake model server (on its own thread)
and a real daemon process for a ``RECURSA_HOME``, then admits the root and
waits until the tree stands:

- the root (``demo-root``) spawned ``child`` and runs a cell that waits for a
  release file in its workspace: its turn keeps running until
  :meth:`Demo.release_root`, and whether that cell was interrupted shows in
  its ``cell_finished`` status;
- ``child`` spawned ``grandchild``, wrote a local memory ``answer-fact`` and
  answered; when the grandchild's answer came, it wrote the memory's v2;
- ``grandchild`` ran ``print(6 * 7)``, proposed a *global* skill ``double``
  (waiting for a person's review, with its trigger events), then answered ``42``. A message
  sent to it later is answered in its next turn with ``pong: <message>``.

It is a context manager usable from sync and async code alike: it talks to
the daemon from a thread of its own. Everything it started is stopped when
the block ends (the daemon forced down, its kernels killed).

``python -m recursa.testing.demo_tree HOME WORKSPACE`` starts one and keeps
it until Ctrl-C, printing the environment to point ``recursa view`` at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from recursa.daemon import process
from recursa.daemon.client import DaemonClient
from recursa.protocol.events import CellFinished
from recursa.protocol.person_ops import HARNESS_LIST, HarnessQuery
from recursa.protocol.wire import CreateSession, HarnessEntry, SessionInfo
from recursa.testing.fake_script import Reply, ScriptItem, ToolCallSpec
from recursa.testing.fake_server import FakeModelServer
from recursa.testing.processes import kill_home_processes

T = TypeVar("T")

MODEL = "openai/demo"
PRICES = '[prices."openai/demo"]\ninput = 0.15\noutput = 0.60\n'
"""USD per million tokens, in the home's config.toml: a model behind a base URL of
its own has no built-in price, and the books should show costs."""
ROOT_TASK = "DEMO-ROOT: coordinate the demo; delegate to a child and wait for the release."
CHILD_TASK = "DEMO-CHILD: delegate the detail work to a grandchild."
GRANDCHILD_TASK = "DEMO-GRANDCHILD: compute 6*7 and record what you learned."
RELEASE = "release"
"""The file in the root's workspace whose existence ends the root's cell."""
SETTLE_TIMEOUT = 120.0

ROOT_CELL = f"""import asyncio, os
child = await rlm({CHILD_TASK!r}, name="child")
print("spawned", child.id)
while not os.path.exists({RELEASE!r}):
    await asyncio.sleep(0.05)
print("released")
"""
CHILD_CELL = f"""grandchild = await rlm({GRANDCHILD_TASK!r}, name="grandchild")
print("spawned", grandchild.id)
await harness.create("memory", "answer-fact", "6*7 is 42", reason="the task says so")
"""
CHILD_UPDATE = """await harness.update(
    "answer-fact", content="6*7 is 42 (checked by the grandchild)", reason="its answer came back"
)
"""
GRANDCHILD_CELL = """print(6 * 7)
await harness.create(
    "skill", "double", "Double a number.", scope="global",
    code="def double(x):\\n    return 2 * x\\n",
    reason="doubling came up while computing 6*7", effect="reuse it instead of rewriting it",
)
"""


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class DemoModel:
    """The responder: which session asks is told by its first user message,
    what to say by its last message."""

    def __call__(self, path: str, body: dict[str, Any]) -> ScriptItem:
        messages: list[dict[str, Any]] = body.get("messages", [])
        users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        first = users[0] if users else ""
        last = messages[-1] if messages else {}
        after_cell = last.get("role") == "tool"
        said = _text(last.get("content")) if last.get("role") == "user" else ""
        opening = len(users) == 1 and not after_cell
        if "DEMO-GRANDCHILD" in first:
            if opening:
                return _cell(GRANDCHILD_CELL)
            if after_cell:
                return Reply(text="42")
            return Reply(text=f"pong: {said.strip()}")
        if "DEMO-CHILD" in first:
            cells = sum(1 for m in messages if m.get("role") == "tool")
            if opening:
                return _cell(CHILD_CELL)
            if cells == 1 and not after_cell:  # the grandchild's answer came back
                return _cell(CHILD_UPDATE)
            return Reply(text="child: delegated" if cells == 1 else "child: noted")
        if "DEMO-ROOT" in first:
            if opening:
                return _cell(ROOT_CELL)
            return Reply(text="root: done" if after_cell else "root: noted")
        return Reply(text="noted")


def _cell(code: str) -> Reply:
    return Reply(tool_calls=[ToolCallSpec("python", {"code": code})])


@dataclass
class Demo:
    """The running tree: its sessions and entries by id, and its daemon's environment."""

    home: Path
    workspace: Path
    env: dict[str, str] = field(repr=False)
    server: FakeModelServer = field(repr=False)
    root_id: str
    child_id: str
    grandchild_id: str
    skill_id: str
    memory_id: str

    def release_root(self) -> str:
        """Let the root's cell finish; returns that cell's status (``ok``: it
        was never interrupted)."""
        (self.workspace / RELEASE).write_text("go\n")
        return _in_thread(lambda: self._root_cell_status())

    async def _root_cell_status(self) -> str:
        async with DaemonClient(self.home) as client:
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while time.monotonic() < deadline:
                records = [record async for record in client.events(self.root_id)]
                for record in records:
                    if isinstance(record.event, CellFinished):
                        return record.event.status
                await asyncio.sleep(0.05)
        raise TimeoutError("the root's cell did not finish after its release")


@contextlib.contextmanager
def demo_tree(
    home: Path, workspace: Path | None = None, *, extra_env: Mapping[str, str] | None = None
) -> Iterator[Demo]:
    """Start the fake model, a daemon for ``home`` and the tree; stop them all after."""
    workspace = workspace if workspace is not None else home.parent / "demo-workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    if not config.exists():
        config.write_text(PRICES)
    with FakeModelServer.in_thread(responder=DemoModel()) as server:
        env = {
            **os.environ,
            **(extra_env or {}),
            "RECURSA_HOME": str(home),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "demo",
        }
        try:
            demo = _in_thread(lambda: _grow(home, workspace, env, server))
            yield demo
        finally:
            _in_thread(lambda: _tear_down(home))


async def _grow(home: Path, workspace: Path, env: dict[str, str], server: FakeModelServer) -> Demo:
    await process.start(home, env=env)
    async with DaemonClient(home) as client:
        root = await client.create_session(
            CreateSession(task=ROOT_TASK, model=MODEL, cwd=str(workspace), name="demo-root")
        )

        async def settled() -> Demo | None:
            sessions = {s.name: s for s in await client.sessions()}
            child, grandchild = sessions.get("child"), sessions.get("grandchild")
            if child is None or grandchild is None or not _answered(grandchild):
                return None
            entries: list[HarnessEntry] = await client.call(HARNESS_LIST, HarnessQuery())
            by_title = {e.title: e for e in entries}
            skill, memory = by_title.get("double"), by_title.get("answer-fact")
            if skill is None or memory is None or memory.version < 2:
                return None
            if sessions["demo-root"].cell_started_at is None:
                return None
            return Demo(home, workspace, env, server, root.id, child.id, grandchild.id,
                        skill.id, memory.id)  # fmt: skip

        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            demo = await settled()
            if demo is not None:
                return demo
            await asyncio.sleep(0.05)
    raise TimeoutError(f"the demo tree did not settle in {SETTLE_TIMEOUT:g}s (see {home})")


def _answered(info: SessionInfo) -> bool:
    return info.status == "idle" and info.last_answer == "42"


async def _tear_down(home: Path) -> None:
    with contextlib.suppress(Exception):
        await process.stop(home, force=True, timeout=20)
    kill_home_processes(home)


def _in_thread(work: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end on a loop of its own thread (so a caller on
    a running loop, or none, can wait for it)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(_awaited(work)))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="demo-tree")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m recursa.testing.demo_tree HOME WORKSPACE", file=sys.stderr)
        return 2
    home, workspace = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    ended = threading.Event()
    # Ctrl-C, or a TERM (a shell's background job ignores SIGINT), ends the demo.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: ended.set())
    with demo_tree(home, workspace) as demo:
        print(f"RECURSA_HOME={home}")
        print(f"root {demo.root_id}  child {demo.child_id}  grandchild {demo.grandchild_id}")
        print(f"skill {demo.skill_id}  memory {demo.memory_id}  (Ctrl-C ends the demo)")
        while not ended.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["CHILD_TASK", "GRANDCHILD_TASK", "MODEL", "ROOT_TASK", "Demo", "DemoModel", "demo_tree"]

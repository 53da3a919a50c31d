"""Kernels that outlive the process that started them, reattached; namespace
snapshots and restores. Real kernels throughout.

A kernel whose starter died is no child of the test process, so the conftest's
leak check cannot see it: the ``orphans`` fixture stops (and reports) any the
test left running, by pid.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from recursa.config import Config
from recursa.errors import KernelError
from recursa.kernel import Kernel, KernelPool, OutputPart
from recursa.kernel.orphans import launcher_of, running_kernels, stop_orphans

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc and uses pidfds"
)

STARTER = r"""
import asyncio, json, sys
from pathlib import Path

from recursa.config import load_config
from recursa.kernel import KernelPool


async def main(runtime, cwd, setup, busy, ending):
    pool = KernelPool(load_config().kernel.env, size=0, runtime_dir=Path(runtime))
    kernel = await pool.acquire(Path(cwd))
    out = await kernel.execute(setup, timeout=30)
    assert out.status == "ok", out.text()
    if busy:
        running = asyncio.Event()
        task = asyncio.create_task(
            kernel.execute(busy, timeout=3600, on_output=lambda part: running.set())
        )
        await running.wait()
    print(json.dumps({"pid": kernel.pid, "connection_file": str(kernel.connection_file)}))
    sys.stdout.flush()
    if ending == "killed":
        await asyncio.Event().wait()  # until the test kills this process


asyncio.run(main(*sys.argv[1:]))
"""
"""Starts a kernel from a pool, runs ``setup`` (and leaves ``busy`` running,
once it printed), prints the kernel's pid and connection file, then waits to
be killed, or (``exit``) returns without stopping the kernel."""

RUNS_UNTIL_INTERRUPTED = (
    "import time\nprint('running', flush=True)\nwhile True:\n    time.sleep(0.05)\n"
)
IGNORES_INTERRUPTS = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "print('running', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)


@dataclass(frozen=True)
class Orphan:
    pid: int
    connection_file: Path


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited. A zombie has: the init
    of a container may never reap an orphan kernel."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def runs_kernel(pid: int, connection_file: Path) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.fsencode(connection_file) in args and alive(pid)


async def exited(pid: int, timeout: float = 10.0) -> None:
    """Wait, on the event loop, until ``pid`` has exited (zombie or reaped)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    gone = asyncio.Event()
    loop.add_reader(fd, gone.set)
    try:
        await asyncio.wait_for(gone.wait(), timeout)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class Orphans:
    """Starts kernels whose starting process then dies."""

    def __init__(self, tmp_path: Path) -> None:
        self.runtime = tmp_path / "rt"
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        self.started: list[Orphan] = []

    async def start(self, setup: str, busy: str = "", ending: str = "killed") -> Orphan:
        starter = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            STARTER,
            str(self.runtime),
            str(self.cwd),
            setup,
            busy,
            ending,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert starter.stdout is not None and starter.stderr is not None
        line = await asyncio.wait_for(starter.stdout.readline(), 60)
        if not line:
            await starter.wait()
            raise AssertionError((await starter.stderr.read()).decode())
        info = json.loads(line)
        orphan = Orphan(int(info["pid"]), Path(info["connection_file"]))
        self.started.append(orphan)
        if ending == "killed":
            starter.send_signal(signal.SIGKILL)
        await asyncio.wait_for(starter.wait(), 30)
        await starter.stderr.read()
        return orphan

    async def stop_leftovers(self) -> list[int]:
        left = [o for o in self.started if runs_kernel(o.pid, o.connection_file)]
        for orphan in left:
            os.killpg(orphan.pid, signal.SIGKILL)
            await exited(orphan.pid)
        return [o.pid for o in left]


@pytest.fixture
async def orphans(tmp_path: Path) -> AsyncIterator[Orphans]:
    made = Orphans(tmp_path)
    yield made
    if left := await made.stop_leftovers():
        pytest.fail(f"the test left orphan kernels running: {left}")


@pytest.fixture
async def pool(config: Config, tmp_path: Path) -> AsyncIterator[KernelPool]:
    async with KernelPool(
        config.kernel.env, size=0, runtime_dir=tmp_path / "rt", interrupt_grace=1.0
    ) as made:
        yield made


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "session"
    path.mkdir()
    return path


def result(text: str) -> tuple[OutputPart, ...]:
    return (OutputPart("result", text),)


# -- kernels that outlive their starter ---------------------------------------------------


@pytest.mark.parametrize("ending", ["killed", "exit"])
async def test_a_kernel_outlives_its_starter_and_is_reattached(
    orphans: Orphans, pool: KernelPool, ending: str
) -> None:
    # "killed": SIGKILL, as a daemon crash. "exit": the starter returns
    # without stopping it, and its kernel manager is garbage collected
    # (jupyter_client's would delete the connection file then).
    orphan = await orphans.start("x = 41", ending=ending)
    assert alive(orphan.pid)
    assert orphan.connection_file.exists()
    kernel = await pool.attach(orphan.connection_file, orphan.pid, orphans.cwd)
    try:
        assert kernel.attach_outcome == "idle"
        assert kernel.pid == orphan.pid
        out = await kernel.execute("x + 1", timeout=10)
        assert out.parts == result("42")
        assert out.execution_count == 2
        assert not out.restarted
        # Nothing in the kernel watches its parent (ipykernel's poller would
        # exit within a second of the parent's death)...
        out = await kernel.execute(
            "import threading\n"
            "from ipykernel.kernelapp import IPKernelApp\n"
            "print(IPKernelApp.instance().poller,"
            " [t.name for t in threading.enumerate() if 'Poller' in type(t).__name__])",
            timeout=10,
        )
        assert out.parts == (OutputPart("stdout", "None []\n"),)
        # ... and so it is still there after more than that.
        out = await kernel.execute("import time\ntime.sleep(1.2)\nx", timeout=10)
        assert out.parts == result("41")
        assert kernel.is_alive()
    finally:
        await kernel.shutdown()
    # Stopped by pid, although not our child; gone for good, files too.
    assert not alive(orphan.pid)
    assert not orphan.connection_file.exists()
    assert not list(orphan.connection_file.parent.iterdir())


async def test_orphans_are_stopped_and_held_or_live_launchers_kernels_are_not(
    orphans: Orphans, pool: KernelPool, tmp_path: Path
) -> None:
    held = await orphans.start("x = 1")
    lost = await orphans.start("y = 2")
    dead_files = tmp_path / "rt" / "kernel-999999999-0123456789ab.json"
    dead_files.write_text("{}")  # a kernel long gone, launched by a process long gone
    mine = await pool.acquire(orphans.cwd)  # launched by this process: never an orphan
    try:
        found = running_kernels(orphans.runtime)
        assert {held.pid, lost.pid, mine.pid} <= set(found)
        assert launcher_of(held.connection_file) not in (None, os.getpid())
        killed = await stop_orphans(orphans.runtime, keep=[held.connection_file])
        assert killed == [lost.pid]
        assert not alive(lost.pid)
        assert not lost.connection_file.exists()
        assert not dead_files.exists()
        assert alive(held.pid) and held.connection_file.exists()
        assert mine.is_alive()
        assert await stop_orphans(orphans.runtime, keep=[held.connection_file]) == []
    finally:
        await mine.shutdown()
        kept = await pool.attach(held.connection_file, held.pid, orphans.cwd)
        await kept.shutdown()


FLOODS_UNTIL_INTERRUPTED = "print('running', flush=True)\nwhile True:\n    print('x' * 200)\n"


@pytest.mark.parametrize("busy", [RUNS_UNTIL_INTERRUPTED, FLOODS_UNTIL_INTERRUPTED])
async def test_attach_interrupts_a_cell_left_running(
    orphans: Orphans, pool: KernelPool, busy: str
) -> None:
    orphan = await orphans.start("y = 7", busy=busy)
    kernel = await pool.attach(orphan.connection_file, orphan.pid, orphans.cwd)
    try:
        assert kernel.attach_outcome == "interrupted"
        assert kernel.pid == orphan.pid
        out = await kernel.execute("y * 6", timeout=10)
        assert out.parts == result("42")
        assert not out.restarted
        assert out.note == ""
    finally:
        await kernel.shutdown()


async def test_attach_restarts_a_kernel_whose_cell_ignores_the_interrupt(
    config: Config, orphans: Orphans, pool: KernelPool
) -> None:
    orphan = await orphans.start("y = 7", busy=IGNORES_INTERRUPTS)
    kernel = await pool.attach(orphan.connection_file, orphan.pid, orphans.cwd)
    try:
        assert kernel.attach_outcome == "restarted"
        assert kernel.pid != orphan.pid
        assert not alive(orphan.pid)
        assert kernel.connection_file == orphan.connection_file
        out = await kernel.execute("'y' in globals(), __import__('os').getcwd()", timeout=10)
        assert out.parts == result(repr((False, str(orphans.cwd))))
        assert out.restarted
        assert "did not stop within 1 s of an interrupt" in out.note
        assert "\n" not in out.note
        again = await kernel.execute("1", timeout=10)
        assert not again.restarted and again.note == ""
        # The new process got the session's environment, nothing else.
        raw = Path(f"/proc/{kernel.pid}/environ").read_bytes().split(b"\0")
        started_with = dict(item.decode().split("=", 1) for item in raw if item)
        assert started_with == dict(config.kernel.env)
    finally:
        await kernel.shutdown()


async def test_the_death_of_an_attached_kernel_is_noticed_within_two_seconds(
    orphans: Orphans, pool: KernelPool
) -> None:
    orphan = await orphans.start("z = 1")
    kernel = await pool.attach(orphan.connection_file, orphan.pid, orphans.cwd)
    try:
        running = asyncio.Event()
        cell = asyncio.create_task(
            kernel.execute(
                "import time\nprint('running', flush=True)\ntime.sleep(60)",
                timeout=120,
                on_output=lambda part: running.set(),
            )
        )
        await asyncio.wait_for(running.wait(), 10)
        killed = time.monotonic()
        os.kill(orphan.pid, signal.SIGKILL)
        out = await asyncio.wait_for(cell, 30)
        assert time.monotonic() - killed < 2.0
        assert out.status == "kernel_died"
        assert out.restarted
        assert kernel.is_alive() and kernel.pid != orphan.pid
        assert (await kernel.execute("'z' in globals()", timeout=10)).parts == result("False")
    finally:
        await kernel.shutdown()


async def test_a_kernel_that_does_not_answer_is_stopped_not_attached(
    config: Config, orphans: Orphans
) -> None:
    orphan = await orphans.start("w = 1")
    os.kill(orphan.pid, signal.SIGSTOP)  # there, but answers nothing
    with pytest.raises(KernelError, match=r"did not answer within 0\.5 s; it was stopped") as info:
        await Kernel.attach(
            orphan.connection_file, orphan.pid, orphans.cwd, config.kernel.env, answer_within=0.5
        )
    assert "\n" not in str(info.value)
    await exited(orphan.pid)
    assert not orphan.connection_file.exists()


async def until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    """Poll ``condition`` on the event loop until true; fail after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"not within {seconds:g} s: {what}")
        await asyncio.sleep(0.02)


async def test_a_shutdown_cancelled_midway_still_ends_the_kernel(
    config: Config, workdir: Path, tmp_path: Path
) -> None:
    """Nobody else would stop it: a kernel pool closing cancels the shutdowns
    of the spares it discards, and the cancelled shutdown is marked done."""
    kernel = Kernel(workdir, config.kernel.env, runtime_dir=tmp_path / "rt")
    await kernel.start()
    pid = kernel.pid
    assert pid is not None
    # Asked to shut down, the kernel says so in a file, then takes a minute to
    # exit: the shutdown is surely waiting on it when it is cancelled.
    exiting = tmp_path / "exiting"
    setup = (
        "import atexit, time\n"
        f"atexit.register(lambda: (open({str(exiting)!r}, 'w').close(), time.sleep(60)))\n"
    )
    assert (await kernel.execute(setup, timeout=30)).status == "ok"
    stopping = asyncio.create_task(kernel.shutdown())
    await until(exiting.exists, "the kernel began to exit")
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert not alive(pid)
    assert not kernel.connection_file.exists()
    await kernel.shutdown()  # done already: nothing more to do
    with pytest.raises(KernelError, match="shut down"):
        await kernel.execute("1", timeout=10)


async def test_attach_refuses_what_is_not_that_kernel(
    config: Config, pool: KernelPool, workdir: Path, tmp_path: Path
) -> None:
    async with Kernel(workdir, config.kernel.env, runtime_dir=tmp_path / "own") as live:
        connection_file = live.connection_file
        # A pid whose process is gone.
        gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await gone.wait()
        with pytest.raises(KernelError, match="is not running") as dead:
            await pool.attach(connection_file, gone.pid, workdir)
        # A pid in use by another process (as after the kernel died and its
        # pid was reused).
        other = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdin.read()", stdin=asyncio.subprocess.PIPE
        )
        try:
            with pytest.raises(KernelError, match="is not the kernel of") as reused:
                await pool.attach(connection_file, other.pid, workdir)
            assert alive(other.pid)  # left alone
        finally:
            assert other.stdin is not None
            other.stdin.close()
            await other.wait()
        # No connection file.
        with pytest.raises(KernelError, match="is gone") as missing:
            await pool.attach(tmp_path / "kernel-missing.json", live.pid or 0, workdir)
        for refused in (dead, reused, missing):
            assert "\n" not in str(refused.value)
        # The kernel whose file was named is untouched.
        assert (await live.execute("2 + 2", timeout=10)).parts == result("4")


# -- snapshots -----------------------------------------------------------------------------

NAMESPACE = (
    "import json as j\n"
    "import os\n"
    "count = 3\n"
    "config = {'name': 'run', 'sizes': [1, 2, 3]}\n"
    "alias = config\n"
    "class Point:\n"
    "    def __init__(self, x, y):\n"
    "        self.x, self.y = x, y\n"
    "    def norm(self):\n"
    "        return (self.x ** 2 + self.y ** 2) ** 0.5\n"
    "points = [Point(3, 4), Point(6, 8)]\n"
    "def scaled(k):\n"
    "    return [p.norm() * k for p in points]\n"
    "square = lambda v: v * v\n"
    "def counter():\n"
    "    n = 0\n"
    "    def step():\n"
    "        nonlocal n\n"
    "        n += 1\n"
    "        return n\n"
    "    return step\n"
    "tick = counter()\n"
    "tick()\n"
    "log = open(os.devnull, 'w')\n"
    "broken = [[5, 6], log]\n"
    "kept_half = broken[0]\n"
)

CHECKS = (
    "print(count, config is alias, j.dumps(config), j is __import__('sys').modules['json'])\n"
    "print(isinstance(points[0], Point), scaled(2), square(9), tick())\n"
    "print(kept_half, 'log' in globals(), 'broken' in globals(), sorted(_out.items()))\n"
)


@pytest.fixture
async def kernels(config: Config, workdir: Path, tmp_path: Path) -> AsyncIterator[list[Kernel]]:
    """Three kernels in one session directory."""
    made = [Kernel(workdir, config.kernel.env, runtime_dir=tmp_path / "rt") for _ in range(3)]
    try:
        await asyncio.gather(*(k.start() for k in made))
        yield made
    finally:
        await asyncio.gather(*(k.shutdown() for k in made))


async def test_a_snapshot_restores_values_functions_classes_and_modules(
    kernels: list[Kernel], tmp_path: Path
) -> None:
    source, target, _ = kernels
    assert (await source.execute(NAMESPACE, timeout=10)).status == "ok"
    await source.set_output(1, "the full text of cell 1")
    path = tmp_path / "snapshots" / "namespace.dill"
    report = await source.snapshot(path, max_bytes=10_000_000)
    assert set(report.names) == {
        "_out", "j", "os", "count", "config", "alias", "Point", "points", "scaled",
        "square", "counter", "tick", "kept_half",
    }  # fmt: skip
    assert dict(report.skipped) == {
        "log": "TextIOWrapper: cannot pickle an open file",
        "broken": "list: cannot pickle an open file",
    }
    assert report.size == path.stat().st_size
    # Silent: no execution count, no output, no history.
    out = await source.execute("1", timeout=10)
    assert out.execution_count == 2

    restored = await target.restore(path)
    assert set(restored.names) == set(report.names)
    assert dict(restored.failed) == {} and restored.hook_errors == () and restored.note == ""
    out = await target.execute(CHECKS, timeout=10)
    assert out.status == "ok", out.text()
    assert out.text() == (
        '3 True {"name": "run", "sizes": [1, 2, 3]} True\n'
        "True [10.0, 20.0] 81 2\n"
        "[5, 6] False False [(1, 'the full text of cell 1')]\n"
    )
    assert out.execution_count == 1


async def test_restore_replaces_the_namespace(kernels: list[Kernel], tmp_path: Path) -> None:
    source, target, _ = kernels
    await source.execute("kept = 1", timeout=10)
    await source.snapshot(tmp_path / "ns", max_bytes=1_000_000)
    await target.execute("stale = 2", timeout=10)
    await target.restore(tmp_path / "ns")
    out = await target.execute(
        "'kept' in globals(), 'stale' in globals(), callable(on_restore)", timeout=10
    )
    assert out.parts == result("(True, False, True)")


async def test_the_size_cap_leaves_out_the_biggest_values(
    kernels: list[Kernel], tmp_path: Path
) -> None:
    source, target, _ = kernels
    code = (
        "huge = b'h' * 3_000_000\n"  # over the cap on its own
        "big = b'b' * 600_000\n"
        "medium = b'm' * 500_000\n"
        "small = 'fits'\n"
    )
    await source.execute(code, timeout=10)
    path = tmp_path / "ns"
    report = await source.snapshot(path, max_bytes=1_000_000)
    assert report.names == ("_out", "medium", "small")
    assert report.size <= 1_000_000 and path.stat().st_size == report.size
    assert report.skipped["huge"] == "more than the snapshot cap of 1,000,000 bytes"
    assert "biggest values" in report.skipped["big"]
    assert "600,0" in report.skipped["big"]
    restored = await target.restore(path)
    assert restored.names == report.names
    out = await target.execute("len(medium), small, 'big' in globals()", timeout=10)
    assert out.parts == result("(500000, 'fits', False)")


async def test_a_torn_snapshot_falls_back_to_the_previous_one(
    kernels: list[Kernel], tmp_path: Path
) -> None:
    source, target, spare = kernels
    path = tmp_path / "ns"
    await source.execute("a = 'first'", timeout=10)
    await source.snapshot(path, max_bytes=1_000_000)
    assert not path.with_name("ns.prev").exists()
    await source.execute("a = 'second'", timeout=10)
    await source.snapshot(path, max_bytes=1_000_000)
    previous = path.with_name("ns.prev")
    assert previous.exists()
    # Torn, as by a crash while it was written.
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    report = await target.restore(path)
    assert report.names == ("_out", "a")
    assert report.note.startswith("the last snapshot was unusable (torn")
    assert (await target.execute("a", timeout=10)).parts == result("'first'")
    # Damaged in the middle: every record is checked before any is used.
    good = previous.read_bytes()
    previous.write_bytes(good[:60] + bytes([good[60] ^ 0xFF]) + good[61:])
    with pytest.raises(KernelError, match="unusable") as neither:
        await spare.restore(path)
    assert "\n" not in str(neither.value)
    assert (await spare.execute("'a' in globals()", timeout=10)).parts == result("False")


async def test_restore_hooks_run_after_a_restore_and_a_failing_one_is_reported(
    kernels: list[Kernel], tmp_path: Path
) -> None:
    source, target, third = kernels
    journal = tmp_path / "journal.txt"
    code = (
        f"journal = open({str(journal)!r}, 'a')\n"
        "order = []\n"
        "@on_restore\n"
        "def reopen():\n"
        "    global journal\n"
        "    journal = open(journal_path, 'a')\n"
        "    order.append('reopen')\n"
        f"journal_path = {str(journal)!r}\n"
        "def fails():\n"
        "    order.append('fails')\n"
        "    raise RuntimeError('no network')\n"
        "on_restore(fails)\n"
        "on_restore(lambda: order.append('lambda'))\n"
        "@on_restore\n"
        "def reopen():  # registered again: replaces the first, in its place\n"
        "    global journal\n"
        "    journal = open(journal_path, 'a')\n"
        "    order.append('reopen 2')\n"
        "def keeps_a_file():\n"
        "    f = open(journal_path)\n"
        "    return lambda: f.read()\n"
        "on_restore(keeps_a_file())  # cannot travel: listed, not kept\n"
    )
    assert (await source.execute(code, timeout=10)).status == "ok"
    path = tmp_path / "ns"
    report = await source.snapshot(path, max_bytes=1_000_000)
    assert report.skipped == {
        "journal": "TextIOWrapper: cannot pickle an open file",
        "on_restore(keeps_a_file.<locals>.<lambda>)": "cannot pickle an open file",
    }
    restored = await target.restore(path)
    assert restored.hook_errors == ("fails: RuntimeError: no network",)
    out = await target.execute(
        "journal.write('after restore\\n'); journal.flush(); print(order)", timeout=10
    )
    assert out.text() == "['reopen 2', 'fails', 'lambda']\n"
    assert journal.read_text() == "after restore\n"
    # The hooks travel in the snapshot: a kernel restored from the restored
    # one's snapshot runs them again.
    await target.snapshot(path, max_bytes=1_000_000)
    again = await third.restore(path)
    assert again.hook_errors == ("fails: RuntimeError: no network",)
    out = await third.execute("order", timeout=10)
    assert out.parts == result("['reopen 2', 'fails', 'lambda', 'reopen 2', 'fails', 'lambda']")


async def test_what_cannot_be_unpickled_fails_alone(
    config: Config, kernels: list[Kernel], workdir: Path, tmp_path: Path
) -> None:
    source = kernels[0]
    (workdir / "helper_mod.py").write_text("VALUE = 1\n", encoding="utf-8")
    await source.execute("import helper_mod\nuses = [helper_mod]\nother = 5", timeout=10)
    path = tmp_path / "ns"
    await source.snapshot(path, max_bytes=1_000_000)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with Kernel(elsewhere, config.kernel.env, runtime_dir=tmp_path / "rt") as target:
        report = await target.restore(path)
        assert report.failed == {
            "helper_mod": "ModuleNotFoundError: No module named 'helper_mod'",
            "uses": "it refers to a value that could not be restored",
        }
        assert report.names == ("_out", "other")
        assert (await target.execute("other", timeout=10)).parts == result("5")


async def test_a_dead_kernel_cannot_be_snapshotted(kernels: list[Kernel], tmp_path: Path) -> None:
    source = kernels[0]
    await source.execute("a = 1", timeout=10)
    await source.snapshot(tmp_path / "ns", max_bytes=1_000_000)
    pid = source.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await exited(pid)
    with pytest.raises(KernelError, match="not running"):
        await source.snapshot(tmp_path / "ns", max_bytes=1_000_000)
    # The last good snapshot is untouched, and a restore restarts the kernel.
    report = await source.restore(tmp_path / "ns")
    assert report.names == ("_out", "a")
    assert (await source.execute("a", timeout=10)).parts == result("1")


async def test_snapshots_are_private_and_what_a_dead_writer_left_is_swept(
    kernels: list[Kernel], tmp_path: Path
) -> None:
    source = kernels[0]
    path = tmp_path / "ns"
    # As a kernel killed while it wrote a snapshot leaves it.
    gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await gone.wait()
    leftover = tmp_path / f"ns.{gone.pid}.tmp"
    leftover.write_bytes(b"half a snapshot")
    await source.execute("a = 1", timeout=10)
    await source.snapshot(path, max_bytes=1_000_000)
    assert not leftover.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ns")) == ["ns"]
    assert path.stat().st_mode & 0o777 == 0o600

"""Sub-agent fan-out: ``rlm()`` admission latency, and wide trees of children.

Usage::

    .venv/bin/python benchmarks/fanout.py [--calls 200] [--sizes 50,100,200] [--fork-server on,off]

Everything runs in this process against the faux provider, with real kernels
and the kernel API served in-process (:func:`recursa.testing.make_runtime`).

- kernel start: ``--starts`` kernels started one after another, forked from
  a zygote and exec'd, in the sandbox a runtime uses; the first forked start
  includes starting the zygote. PSS per kernel is over all of this process's
  descendants (the zygote included) once they are idle.
- admission: one parent cell calls ``await rlm(...)`` ``--calls`` times in a
  loop, timing each call in the kernel (after one warm-up call); the children
  answer at once and run no cells. This is the whole ``rlm()`` with the real
  runtime (the target is p50 <= 5 ms); ``benchmarks/kernel_api.py`` gives the
  transport's share. A sub-agent starts its kernel on its first cell, so
  these children start none; the runtime's own share (``Tree.spawn``) and the
  event loop's lag (how late a 10 ms sleep wakes) during the loop are printed
  beside it.
- fan-out: for each size N, a fresh runtime whose parent spawns N children in
  one cell; each child runs two cells, then answers; the parent waits for all
  N answers (they arrive as messages), then answers. Wall time runs from the
  parent's task being sent until the whole tree is quiet. Peak memory is the
  largest sum of RSS over this process and all its descendants, sampled every
  ``--sample`` seconds in a thread, and the largest sum of their PSS (pages
  shared by n processes count 1/n to each: what the tree really holds),
  sampled every ``--pss-sample`` seconds; kernels at peak is the largest number of
  live kernel processes seen, beside the kernel cap's own peak (``[sessions]
  max_kernels`` caps it). Kernel starts and unloads are read from the
  sessions' logs; CPU time is split between this process and its (reaped)
  children, the kernels. Kernel start cost is the time of each kernel launch
  (process start until it answers and is bootstrapped), as the daemon waits for it.

Figures depend on machine load: run it on an idle machine. Each scenario
ends by checking that no kernel process outlives its runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from peak_memory import Sampling

from recursa.config import CONFIG_FILE_NAME, MAX_CHILDREN, AgentsConfig
from recursa.kernel import Kernel
from recursa.kernel.forkserver import ForkServers
from recursa.kernel.lifecycle import KernelProcess
from recursa.kernel.sandbox import DEFAULT_SANDBOX, SandboxPolicy
from recursa.models.faux import FauxReply, code, per_session, register_script, reply
from recursa.models.types import Request
from recursa.protocol.events import CellFinished, KernelStatus
from recursa.protocol.wire import Handle, Spawn
from recursa.runtime import Runtime
from recursa.testing import make_runtime

ADMIT_CELL = """
import json, time
await rlm('warm up', model='faux/quick')
samples = []
for i in range({calls}):
    began = time.perf_counter()
    await rlm(f'task {{i}}', model='faux/quick')
    samples.append(time.perf_counter() - began)
print(json.dumps(samples))
"""
FANOUT_CELL = (
    "hs = [await rlm(f'part {{i}}', model='faux/worker') for i in range({n})]\nprint(len(hs))"
)
CHILD_CELLS = ("x = sum(range(1000))", "print(x)")
CHILD_ANSWER = "part done"
KERNEL = "ipykernel_launcher"
AGENTS = AgentsConfig(max_children=MAX_CHILDREN)
"""One root admits every child the benchmark asks for (up to --calls + 1 at once)."""
LAG_TICK = 0.01
MIB = 1 << 20


# ------------------------------------------------------------------ sampling


class Sampler(Sampling):
    """Samples, in a thread, the RSS of this process and its descendants and
    how many of them are live kernels; keeps the peaks."""

    def __init__(self, every: float, pss_every: float) -> None:
        super().__init__(every, first=True, name="rss sampler")
        self.pss_every = pss_every
        self.tree_rss = self.own_rss = self.kernels = self.tree_pss = 0
        self._next_pss = 0.0
        self._me = psutil.Process()
        self._is_kernel: dict[int, bool] = {}

    def sample(self) -> None:
        own = self._me.memory_info().rss
        total, kernels = own, 0
        for proc in self._me.children(recursive=True):
            try:
                total += proc.memory_info().rss
                if self._kernel(proc) and proc.status() != psutil.STATUS_ZOMBIE:
                    kernels += 1
            except psutil.Error:
                continue  # it ended between the listing and the read
        self.tree_rss = max(self.tree_rss, total)
        self.own_rss = max(self.own_rss, own)
        self.kernels = max(self.kernels, kernels)
        now = time.monotonic()
        if now >= self._next_pss:
            self.tree_pss = max(self.tree_pss, self._pss())
            self._next_pss = time.monotonic() + self.pss_every

    def _pss(self) -> int:
        total = 0
        for proc in (self._me, *self._me.children(recursive=True)):
            try:
                total += proc.memory_full_info().pss
            except psutil.Error:
                continue
        return total

    def _kernel(self, proc: psutil.Process) -> bool:
        # A command line does not change: read it once per process.
        known = self._is_kernel.get(proc.pid)
        if known is None:
            known = self._is_kernel[proc.pid] = KERNEL in " ".join(proc.cmdline())
        return known


def live_kernels() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if KERNEL in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def check_no_kernels_left() -> None:
    """Kernels told to stop may take a moment to exit: wait on them, then say so."""
    _gone, alive = psutil.wait_procs(live_kernels(), timeout=10)
    if alive:
        pids = ", ".join(str(p.pid) for p in alive)
        print(f"  KERNELS LEFT RUNNING after the runtime closed (killed now): {pids}")
    for proc in alive:
        proc.kill()


@contextmanager
def loop_lag(samples: list[float]) -> Iterator[None]:
    """Records how late a ``LAG_TICK`` sleep on the running loop wakes up."""

    async def tick() -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(LAG_TICK)
            samples.append(time.perf_counter() - began - LAG_TICK)

    task = asyncio.get_running_loop().create_task(tick())
    try:
        yield
    finally:
        task.cancel()


def cpu_seconds() -> tuple[float, float]:
    """CPU time of this process, and of its children that have been reaped."""
    t = psutil.Process().cpu_times()
    return t.user + t.system, t.children_user + t.children_system


# ------------------------------------------------------------------- helpers


def spread(samples: list[float]) -> str:
    ordered = sorted(s * 1e3 for s in samples)
    if not ordered:
        return "no samples"

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    return (
        f"p50 {statistics.median(ordered):7.2f} ms   p90 {at(0.9):7.2f} ms   "
        f"p99 {at(0.99):7.2f} ms   max {ordered[-1]:7.2f} ms"
    )


def events(runtime: Runtime, session_id: str) -> list[object]:
    return [r.event for r in runtime.get(session_id).history()]


def time_spawns(runtime: Runtime, samples: list[float]) -> None:
    """Times the runtime's part of every admission (the host calls ``tree.spawn``)."""
    spawn: Callable[[str, Spawn], Handle] = runtime.tree.spawn

    def timed(caller: str, request: Spawn) -> Handle:
        began = time.perf_counter()
        try:
            return spawn(caller, request)
        finally:
            samples.append(time.perf_counter() - began)

    runtime.tree.spawn = timed  # type: ignore[method-assign]


@contextmanager
def scratch_home() -> Iterator[Path]:
    # A short path, so kernel sockets fit in a unix socket address.
    with tempfile.TemporaryDirectory(prefix="rf") as scratch:
        yield Path(scratch)


async def settle(runtime: Runtime, root: str, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(runtime.tree.wait_quiet(root, None), timeout)
    except TimeoutError:
        return False


async def kernels_settled(timeout: float) -> bool:
    """Until no session is still getting (or, for the kernel cap, unloading) a kernel.

    A quiet tree can still have kernels starting: a session starts one as its
    turn begins, and a child that answered without a cell is idle before its
    kernel is up. Closing the runtime in the middle of that cancels the unloads
    the kernel cap runs on behalf of a waiting session, so this waits for them first.
    The sessions' kernel tasks are named ``kernel <session id>``.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [t for t in asyncio.all_tasks() if t.get_name().startswith("kernel ")]
        if not any(not t.done() for t in busy):
            return True
        await asyncio.sleep(0.1)
    return False


# ----------------------------------------------------------------- admission


async def admission(calls: int, timeout: float) -> None:
    register_script("quick", [], fallback=reply("ok"))
    register_script("admitter", [code(ADMIT_CELL.format(calls=calls))], fallback=reply("done"))
    spawns: list[float] = []
    lags: list[float] = []
    with scratch_home() as home:
        async with make_runtime(home / "h", agents=AGENTS) as runtime:
            time_spawns(runtime, spawns)
            root = await runtime.create_session(model="faux/admitter", cwd=home)
            began = time.monotonic()
            with loop_lag(lags):
                root.send("spawn")
                quiet = await settle(runtime, root.id, timeout)
            settled = time.monotonic() - began
            kernels_done = await kernels_settled(timeout)
            churn = time.monotonic() - began
            cell = next((e for e in events(runtime, root.id) if isinstance(e, CellFinished)), None)
            if cell is None or cell.status != "ok":
                print(f"the admission cell did not finish: {cell}")
                return
            samples = json.loads(cell.output)
            print(f"rlm() admission, {len(samples)} calls in one cell, children starting alongside")
            print(f"  in the kernel : {spread(samples)}")
            print(f"  Tree.spawn    : {spread(spawns[1:])}")
            print(f"  event loop lag: {spread(lags)}   (until the tree was quiet)")
            state = "quiet" if quiet else f"NOT QUIET after {timeout:.0f} s"
            print(
                f"  tree {state} {settled:.1f} s after the task; the children's kernels "
                f"{'settled' if kernels_done else 'NOT SETTLED'} after {churn:.1f} s "
                f"(kernel cap peak {runtime.kernel_cap.peak})"
            )
    check_no_kernels_left()


# ------------------------------------------------------------------- fan-out


def parent_model(n: int) -> Callable[[Request], FauxReply]:
    def respond(request: Request) -> FauxReply:
        if len(request.messages) == 1:
            return code(FANOUT_CELL.format(n=n))
        texts = (getattr(m, "text", "") for m in request.messages)
        answers = sum(1 for text in texts if f"finished: {CHILD_ANSWER}" in text)
        if answers < n:
            return reply(f"waiting ({answers} of {n})")
        return reply(f"all {n} answered")

    return respond


@contextmanager
def timed_launches(samples: list[float]) -> Iterator[None]:
    """Records how long each kernel launch takes (start until ready and bootstrapped)."""
    launch = KernelProcess.launch

    async def timed(self: KernelProcess, cwd: Path) -> None:
        began = time.perf_counter()
        await launch(self, cwd)
        samples.append(time.perf_counter() - began)

    KernelProcess.launch = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        KernelProcess.launch = launch  # type: ignore[method-assign]


def write_config(home: Path, fork_server: bool) -> None:
    """The runtime's ``config.toml``: kernels forked from a zygote, or not."""
    home.mkdir(parents=True, exist_ok=True)
    flag = "true" if fork_server else "false"
    (home / CONFIG_FILE_NAME).write_text(f"[kernel]\nfork_server = {flag}\n")


async def fanout(
    n: int, every: float, pss_every: float, timeout: float, fork_server: bool = True
) -> None:
    steps = [code(cell) for cell in CHILD_CELLS]
    register_script("worker", [], fallback=per_session(*steps, reply(CHILD_ANSWER)))
    register_script("fanner", [], fallback=parent_model(n))
    cpu_before = cpu_seconds()
    starts_timed: list[float] = []
    with scratch_home() as home, Sampler(every, pss_every) as sampler, timed_launches(starts_timed):
        write_config(home / "h", fork_server)
        async with make_runtime(home / "h", agents=AGENTS) as runtime:
            assert runtime.config.kernel.fork_server == fork_server
            root = await runtime.create_session(model="faux/fanner", cwd=home)
            began = time.monotonic()
            root.send("fan out")
            quiet = await settle(runtime, root.id, timeout)
            wall = time.monotonic() - began
            await kernels_settled(timeout)
            done = cells = starts = unloads = 0
            for child in runtime.store.sessions(parent_id=root.id):
                log = events(runtime, child.id)
                done += runtime.get(child.id).last_answer == CHILD_ANSWER
                cells += sum(isinstance(e, CellFinished) and e.status == "ok" for e in log)
                kernel = [e.state for e in log if isinstance(e, KernelStatus)]
                starts += sum(s in ("ready", "restored") for s in kernel)
                unloads += kernel.count("stopped")
            cap_peak = runtime.kernel_cap.peak
            pressure = runtime.kernel_cap.pressure_unloads
            answer = root.last_answer
            closing = time.monotonic()
        teardown = time.monotonic() - closing
    cpu_after = cpu_seconds()
    own_cpu, kernel_cpu = cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]
    state = "" if quiet else f"   NOT QUIET after {timeout:.0f} s"
    how = "forked kernels" if fork_server else "exec'd kernels"
    print(
        f"{n:4d} children ({how}): wall {wall:6.1f} s   completed {done}/{n}   "
        f"cells ok {cells}/{len(CHILD_CELLS) * n}{state}"
    )
    print(
        f"      peak {sampler.tree_rss / MIB:6.0f} MiB RSS tree, {sampler.tree_pss / MIB:6.0f} MiB "
        f"PSS tree, {sampler.own_rss / MIB:.0f} MiB this "
        f"process   kernels at peak {sampler.kernels} (cap {cap_peak})   "
        f"children's kernel starts {starts}, unloads {unloads} ({pressure} for memory)"
    )
    print(
        f"      cpu {own_cpu:5.1f} s this process, {kernel_cpu:5.1f} s kernels   "
        f"teardown {teardown:.1f} s"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"      kernel start: {spread(starts_timed)}   ({len(starts_timed)} launches)")
    print(f"      load average at the end: {load}")
    if answer != f"all {n} answered":
        print(f"      the parent's last answer: {answer!r}")
    check_no_kernels_left()


async def starts(count: int) -> None:
    """``count`` kernels started one after another (nothing else running), in
    the sandbox a runtime uses, forked and exec'd: the start cost alone, and
    the PSS of the kernels once all are idle."""
    for fork_server in (True, False):
        with scratch_home() as home:
            runtime_dir = home / "h" / "kernels"
            workspace = home / "w"
            workspace.mkdir()
            forks = (
                ForkServers(runtime_dir, {"PATH": os.environ.get("PATH", "")})
                if fork_server
                else None
            )
            sandbox = SandboxPolicy(kind=DEFAULT_SANDBOX, hidden=(home / "h",))
            kernels: list[Kernel] = []
            took: list[float] = []
            try:
                for _ in range(count + 1):
                    kernel = Kernel(
                        workspace,
                        {"PATH": os.environ.get("PATH", "")},
                        runtime_dir=runtime_dir,
                        sandbox=sandbox,
                        forks=forks,
                    )
                    began = time.perf_counter()
                    await kernel.start()
                    took.append(time.perf_counter() - began)
                    kernels.append(kernel)
                pss = 0
                for proc in psutil.Process().children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        pss += proc.memory_full_info().pss
            finally:
                for kernel in kernels:
                    await kernel.shutdown()
                if forks is not None:
                    await forks.aclose()
            how = "forked" if fork_server else "exec'd"
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(
                f"kernel start, {how:7s} ({DEFAULT_SANDBOX}): first {took[0] * 1e3:6.0f} ms, "
                f"then {spread(took[1:])}   PSS {pss / MIB / len(kernels):5.1f} MiB a kernel "
                f"({len(kernels)} idle)   load {load}"
            )
    check_no_kernels_left()


async def main(args: argparse.Namespace) -> None:
    usable = len(os.sched_getaffinity(0))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"cpus: {os.cpu_count()} ({usable} usable)   load average at start: {load}")
    if args.starts:
        await starts(args.starts)
    if args.calls:
        await admission(args.calls, args.timeout)
    for n in args.sizes:
        for fork_server in args.fork_server:
            await fanout(n, args.sample, args.pss_sample, args.timeout, fork_server)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="rlm() calls timed (0: skip)")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[50, 100, 200],
        help="children per fan-out, comma-separated",
    )
    parser.add_argument("--sample", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--pss-sample", type=float, default=0.5, help="seconds between PSS samples")
    parser.add_argument(
        "--fork-server",
        type=lambda s: [{"on": True, "off": False}[x] for x in s.split(",") if x],
        default=[True],
        help="on, off or both (on,off): kernels forked from a zygote ([kernel] fork_server)",
    )
    parser.add_argument(
        "--starts", type=int, default=10, help="kernels started one by one, each way (0: skip)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per scenario")
    asyncio.run(main(parser.parse_args()))

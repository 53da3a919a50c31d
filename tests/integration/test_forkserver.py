"""Kernels forked from a zygote (recursa.kernel.forkserver), on real kernels:
they run cells, are interrupted, restarted, killed and reattached like exec'd
ones; what a dead kernel detached is killed; the zygote goes once its kernels
have; a broken fork server falls back to exec'd kernels with one log line.
(What a sandboxed forked kernel sees is in test_sandbox.py, whose kernel
fixture runs each test both ways.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_kernel import ONE_SHELL_THREAD

from recursa.errors import KernelError
from recursa.kernel import Kernel, forkserver
from recursa.kernel.forkserver import ForkServer, ForkServers
from recursa.kernel.launch import KERNEL_NAME_BYTES, MAX_IPC_PATH_BYTES, zygote_dir
from recursa.kernel.lifecycle import KernelProcess
from recursa.kernel.limits import KernelLimits
from recursa.kernel.orphans import connection_name, stop_orphans
from recursa.kernel.sandbox import NO_SANDBOX, SandboxPolicy, check_sandbox
from recursa.models.faux import code, register_script, reply
from recursa.testing import make_runtime

try:
    check_sandbox("bwrap", network=True)
    HAVE_BWRAP = True
except KernelError:
    HAVE_BWRAP = False

SANDBOXES = [
    pytest.param("none", id="unconfined"),
    pytest.param(
        "bwrap",
        id="bwrap",
        marks=pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here"),
    ),
]


def kernel_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def policy(kind: str, home: Path) -> SandboxPolicy:
    return SandboxPolicy(kind="bwrap", hidden=(home,)) if kind == "bwrap" else NO_SANDBOX


@pytest.fixture
async def forks(home: Path) -> AsyncIterator[ForkServers]:
    servers = ForkServers(home / "kernels", kernel_env())
    try:
        yield servers
    finally:
        await servers.aclose()


def new_kernel(
    workspace: Path, home: Path, forks: ForkServers, sandbox: SandboxPolicy, **env: str
) -> Kernel:
    return Kernel(
        workspace,
        {**kernel_env(), **env},
        runtime_dir=home / "kernels",
        sandbox=sandbox,
        forks=forks,
    )


async def until(
    found: Callable[[], list[psutil.Process]], seconds: float = 10
) -> list[psutil.Process]:
    """What ``found`` returns once it is not empty; [] after ``seconds``. It
    polls: a process's exec is seen by nothing else."""
    deadline = time.monotonic() + seconds
    while not (result := found()) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return result


def zygotes() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if forkserver.ZYGOTE_MODULE in proc.cmdline():
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_forked_kernel_runs_is_interrupted_restarted_and_killed(
    home: Path, tmp_path: Path, forks: ForkServers, kind: str
) -> None:
    sandbox = policy(kind, home)
    async with (
        new_kernel(tmp_path, home, forks, sandbox, WHO="first") as first,
        new_kernel(tmp_path, home, forks, sandbox, WHO="second") as second,
    ):
        assert first.forked and second.forked
        # One zygote for both (one configuration), the parent of each kernel
        # (under a sandbox, below bwrap and the tools that start it).
        started = zygotes()
        zygote = psutil.Process(first.pid).parent()
        assert zygote is not None
        assert zygote in started
        assert psutil.Process(second.pid).ppid() == zygote.pid
        # Each has its own environment, working directory and namespace.
        cell = "import os; x = 2; print(os.environ['WHO'], os.getcwd())"
        out = await second.execute(cell, timeout=30)
        assert out.text() == f"second {tmp_path}\n"
        out = await first.execute("print('x' in globals())", timeout=30)
        assert out.text() == "False\n"
        # Like an exec'd kernel (recursa.api.launcher), it runs without debugpy.
        out = await first.execute("import sys; print(sys.modules.get('debugpy', 0))", timeout=30)
        assert out.text() == "None\n"
        # And, like it, reads its shell channel on the main thread, replying at once
        # (recursa.api.kernelapp).
        out = await first.execute(ONE_SHELL_THREAD, timeout=30)
        assert out.text() == "0 False HarnessKernel DirectStream\n", out
        # Its command line names its connection file, as an exec'd kernel's does.
        assert str(first.connection_file) in psutil.Process(first.pid).cmdline()

        # Interrupted (at its time limit): the namespace stays.
        out = await second.execute("import time; time.sleep(60)", timeout=1.0)
        assert out.status == "timeout"
        assert not out.restarted
        out = await second.execute("print(x)", timeout=30)
        assert out.text() == "2\n"

        # Restarted: forked again, the namespace fresh.
        before = second.pid
        await second.restart()
        assert second.forked
        assert second.pid != before
        out = await second.execute("print('x' in globals())", timeout=30)
        assert out.text() == "False\n"

        # Killed from outside: noticed, and the next cell runs in a new kernel.
        killed = first.pid
        assert killed is not None
        victim = psutil.Process(killed)
        victim.kill()
        psutil.wait_procs([victim], timeout=10)
        out = await first.execute("print('back')", timeout=60)
        assert out.restarted
        assert "had died" in out.note
        assert out.text().startswith("back\n")
        assert first.pid != killed
    assert not psutil.pid_exists(killed) or psutil.Process(killed).status() == "zombie"
    await forks.aclose()
    # The zygote goes once its kernels have.
    _gone, alive = psutil.wait_procs(started, timeout=10)
    assert alive == []


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_what_a_dead_forked_kernel_detached_is_killed(
    home: Path, tmp_path: Path, forks: ForkServers, kind: str
) -> None:
    marker = "301.424242"
    cell = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', {marker!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "print('started')"
    )
    async with new_kernel(tmp_path, home, forks, policy(kind, home)) as kernel:
        out = await kernel.execute(cell, timeout=30)
        assert out.text() == "started\n"
        kernel_proc = psutil.Process(kernel.pid)
        # The double fork did not escape: the kernel is a subreaper. (The
        # sleep may not have exec'd yet when the cell has printed.)
        sleepers = await until(lambda: [p for p in kernel_proc.children() if marker in p.cmdline()])
        [sleeper] = sleepers
        kernel_proc.kill()
        _gone, alive = psutil.wait_procs([sleeper], timeout=10)
        assert alive == []


async def test_a_forked_kernel_is_reattached_by_a_later_launcher(
    home: Path, tmp_path: Path, forks: ForkServers
) -> None:
    kernel = new_kernel(tmp_path, home, forks, NO_SANDBOX)
    await kernel.start()
    await kernel.execute("kept = 41", timeout=30)
    pid, connection_file = kernel.pid, kernel.connection_file
    assert pid is not None
    kernel._proc.let_go()  # the launcher is gone, as after a crash
    again = await Kernel.attach(connection_file, pid, tmp_path, kernel_env(), forks=forks)
    try:
        assert again.attach_outcome == "idle"
        out = await again.execute("print(kept + 1)", timeout=30)
        assert out.text() == "42\n"
    finally:
        await again.shutdown()
    assert not connection_file.exists()


async def test_a_broken_fork_server_falls_back_to_exec_with_one_log_line(
    home: Path,
    tmp_path: Path,
    forks: ForkServers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(forkserver, "ZYGOTE_MODULE", "recursa.kernel.no_such_zygote")
    caplog.set_level(logging.WARNING, logger=forkserver.__name__)
    async with (
        new_kernel(tmp_path, home, forks, NO_SANDBOX) as first,
        new_kernel(tmp_path, home, forks, NO_SANDBOX) as second,
    ):
        assert not first.forked and not second.forked
        out = await second.execute("print(6 * 7)", timeout=30)
        assert out.text() == "42\n"
    said = [r.getMessage() for r in caplog.records if r.name == forkserver.__name__]
    assert len(said) == 1
    assert "without the fork server" in said[0]
    assert "no_such_zygote" in said[0]


async def test_a_forked_sandboxed_kernel_sees_no_connection_file(
    home: Path, tmp_path: Path, forks: ForkServers
) -> None:
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap cannot run here")
    runtime_dir = home / "kernels"
    sandbox = policy("bwrap", home)
    async with (
        new_kernel(tmp_path, home, forks, sandbox) as first,
        new_kernel(tmp_path, home, forks, sandbox) as second,
    ):
        assert first.forked and second.forked
        listing = f"import os; print(sorted(os.listdir({str(runtime_dir)!r})))"
        out = await second.execute(listing, timeout=30)
        seen = json.loads(out.text().replace("'", '"'))
        # The zygote's directory (its kernels' sockets), nothing else: no
        # connection file (the kernel got its content in the fork request).
        assert len(seen) <= 1
        assert all(name.startswith("zygote-") for name in seen)
        for path in (first.connection_file, second.connection_file):
            out = await second.execute(f"open({str(path)!r}).read()", timeout=30)
            assert "FileNotFoundError" in out.text()
        # Where an exec'd kernel reads its file, a forked one finds only its
        # zygote's (empty) marker.
        out = await second.execute("import os; print(os.listdir('/tmp/.recursa'))", timeout=30)
        [marker] = json.loads(out.text().replace("'", '"'))
        assert marker.startswith("zygote-")
        assert not marker.endswith(".json")


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_runtime_directory_too_long_for_nested_sockets_still_forks(
    home: Path, tmp_path: Path, kind: str
) -> None:
    # A path long enough that a zygote's own sockets would fit beside the
    # connection files but its kernels' (one directory further down) would
    # not. The test's home is longer than that: the runtime directory is in a
    # short one of its own.
    short = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    zygote_ipc = f"/zygote-{os.getpid()}-0123456789ab/ipc"
    room = MAX_IPC_PATH_BYTES - len(os.fsencode(short)) - len("/kernels") - len(zygote_ipc)
    runtime_dir = short / ("d" * (room - 4)) / "kernels"
    assert len(os.fsencode(f"{runtime_dir}{zygote_ipc}")) <= MAX_IPC_PATH_BYTES
    servers = ForkServers(runtime_dir, kernel_env())
    try:
        kernel = Kernel(
            tmp_path,
            kernel_env(),
            runtime_dir=runtime_dir,
            sandbox=policy(kind, home),
            forks=servers,
        )
        async with kernel:
            assert kernel.forked
            out = await kernel.execute("print(6 * 7)", timeout=30)
            assert out.text().strip() == "42"
            sockets = Path(json.loads(kernel.connection_file.read_text())["ip"])
            # In the private temporary directory, not beside the connection files.
            assert not sockets.is_relative_to(short)
    finally:
        await servers.aclose()
        shutil.rmtree(short)


def test_the_room_kept_for_a_kernel_name_fits_every_name() -> None:
    # A pid has at most 7 digits (pid_max is at most 2**22); the rest is fixed.
    name = connection_name()
    assert re.fullmatch(r"kernel-\d{1,7}-[0-9a-f]{12}", name)
    assert KERNEL_NAME_BYTES == len("kernel-") + 7 + len("-") + 12 >= len(name)


def test_kernels_with_resource_limits_are_never_forked(home: Path) -> None:
    servers = ForkServers(home / "kernels", kernel_env())
    limited = SandboxPolicy(limits=KernelLimits(memory_bytes=1 << 30))
    found = servers.server_for(python="python3", sandbox=limited, workspace=home, api_socket=None)
    assert found is None
    assert servers.server_for(python="python3", sandbox=NO_SANDBOX, workspace=home, api_socket=None)


async def test_a_gone_launchers_fork_server_files_are_removed_with_the_orphans(
    home: Path,
) -> None:
    runtime_dir = home / "kernels"
    runtime_dir.mkdir(parents=True)
    dead = psutil.Popen(["true"])  # a launcher that is gone
    dead.wait()
    left = {}
    for launcher in (dead.pid, os.getpid()):
        name = f"zygote-{launcher}-0123456789ab"
        files = [runtime_dir / f"{name}.zygote", runtime_dir / f"{name}.log"]
        for path in files:
            path.write_text("")
        directory = zygote_dir(runtime_dir, name)  # where a ForkServer puts it
        directory.mkdir()
        beside = runtime_dir / name  # where an earlier version put it
        beside.mkdir(exist_ok=True)
        left[launcher] = [*files, directory, beside]
    await stop_orphans(runtime_dir, keep=())
    assert [p for p in left[dead.pid] if p.exists()] == []
    assert all(p.exists() for p in left[os.getpid()])  # its launcher runs: kept
    for path in left[os.getpid()][-2:]:
        with contextlib.suppress(FileNotFoundError):  # one place when both are one
            path.rmdir()


async def test_after_the_servers_close_a_restart_is_not_forked(
    home: Path, tmp_path: Path, forks: ForkServers
) -> None:
    async with new_kernel(tmp_path, home, forks, NO_SANDBOX) as kernel:
        assert kernel.forked
        started = zygotes()
        await forks.aclose()  # the pool closed; the kernel was handed out and lives on
        out = await kernel.execute("print('still here')", timeout=30)
        assert out.text() == "still here\n"
        await kernel.restart()
        assert not kernel.forked
        # Its zygote goes with its last kernel, and no new one is started.
        _gone, alive = psutil.wait_procs(started, timeout=10)
        assert alive == []
        assert zygotes() == []


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_a_forked_kernel_is_not_dumpable_and_shows_no_environment_of_its_own(
    home: Path, tmp_path: Path, forks: ForkServers, kind: str
) -> None:
    """Its siblings share its PID namespace: it is non-dumpable (so, for any
    user but root, its memory, environment and descriptors are closed to them),
    and /proc shows the zygote's environment, never what the harness set."""
    sandbox = policy(kind, home)
    async with (
        new_kernel(tmp_path, home, forks, sandbox, SECRET="first-secret") as first,
        new_kernel(tmp_path, home, forks, sandbox) as second,
    ):
        dumpable = "import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"
        out = await first.execute(dumpable, timeout=30)
        assert out.text() == "0\n"
        out = await first.execute("import os; print(os.environ['SECRET'], os.getpid())", timeout=30)
        secret, inner = out.text().split()
        assert secret == "first-secret"
        probe = (
            "try:\n"
            f"    print(b'first-secret' in open('/proc/{inner}/environ', 'rb').read())\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)"
        )
        out = await second.execute(probe, timeout=30)
        assert out.text() in ("False\n", "PermissionError\n")


async def test_a_forked_start_cancelled_at_any_step_leaves_no_kernel(
    home: Path, tmp_path: Path, forks: ForkServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelled as it asks the zygote, once the kernel has bound its sockets,
    # while the harness waits for it to answer, and while it is bootstrapped
    # (the zygote is up already: the first kernel started it).
    async with new_kernel(tmp_path, home, forks, NO_SANDBOX) as first:
        assert first.forked
    reached: dict[str, asyncio.Event] = {}

    def mark(name: str) -> None:
        if name in reached:
            reached[name].set()

    fork, wait_ready, silent = ForkServer.fork, KernelProcess.wait_ready, KernelProcess.silent

    async def marked_fork(self: ForkServer, **kwargs: Any) -> int:
        mark("asking")
        pid = await fork(self, **kwargs)
        mark("bound")
        await asyncio.sleep(0)  # a step at which the cancellation can land
        return pid

    async def marked_wait_ready(self: KernelProcess, deadline: float) -> None:
        mark("answering")
        await wait_ready(self, deadline)

    async def marked_silent(self: KernelProcess, code: str, **kwargs: Any) -> Any:
        mark("bootstrap")
        return await silent(self, code, **kwargs)

    monkeypatch.setattr(ForkServer, "fork", marked_fork)
    monkeypatch.setattr(KernelProcess, "wait_ready", marked_wait_ready)
    monkeypatch.setattr(KernelProcess, "silent", marked_silent)
    for phase in ("asking", "bound", "answering", "bootstrap"):
        reached = {phase: asyncio.Event()}
        kernel = new_kernel(tmp_path, home, forks, NO_SANDBOX)
        task = asyncio.ensure_future(kernel.start())
        await asyncio.wait_for(reached[phase].wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled(), phase
        await kernel.shutdown()
    left = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "recursa.api.launcher" in proc.cmdline():
                left.append(proc)
    _gone, alive = psutil.wait_procs(left, timeout=10)
    assert alive == []
    # The zygote still serves.
    reached = {}
    async with new_kernel(tmp_path, home, forks, NO_SANDBOX) as kernel:
        assert kernel.forked


async def test_a_runtime_with_the_fork_server_off_execs_its_kernels(
    home: Path, tmp_path: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[kernel]\nfork_server = false\nsandbox = "none"\n')
    register_script("who", [code("import os; print(os.getpid())"), reply("ok")])
    async with make_runtime(home) as runtime:
        assert runtime.config.kernel.fork_server is False
        session = await runtime.create_session(model="faux/who", cwd=tmp_path)
        await session.ask("who are you")
        [row] = runtime.store.kernels.all()
        kernel = psutil.Process(row.pid)
        # Launched by this process (jupyter_client), not forked by a zygote.
        assert kernel.ppid() == os.getpid()
        assert zygotes() == []


async def test_a_zygote_killed_under_its_kernels_leaves_later_kernels_execd(
    home: Path,
    tmp_path: Path,
    forks: ForkServers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=forkserver.__name__)
    async with new_kernel(tmp_path, home, forks, NO_SANDBOX) as first:
        assert first.forked
        zygote = psutil.Process(first.pid).parent()
        assert zygote is not None
        zygote.kill()
        zygote.wait(10)
        # The server sees its socket close (without a fork in flight).
        [server] = forks._servers.values()
        for _ in range(1000):
            if server.broken is not None:
                break
            await asyncio.sleep(0)
        assert server.broken == "the fork server exited"
        async with new_kernel(tmp_path, home, forks, NO_SANDBOX) as second:
            assert not second.forked
            out = await second.execute("print('exec')", timeout=30)
            assert out.text() == "exec\n"
        # Unconfined, the first lives on without its zygote (in a sandbox it
        # would have died with it, the namespace's init, and been restarted).
        out = await first.execute("print('still')", timeout=30)
        assert out.text() == "still\n"
        await first.restart()
        assert not first.forked
    said = [r.getMessage() for r in caplog.records if r.name == forkserver.__name__]
    assert len(said) == 1
    assert "without the fork server" in said[0]


def memory_holds(pid: int, needles: list[bytes]) -> list[bytes] | None:
    """Which of ``needles`` process ``pid``'s readable memory holds; None when
    its memory cannot be read (not root, and it is non-dumpable)."""
    found: set[bytes] = set()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if not perms.startswith("r"):
                    continue
                start, end = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(start)
                    data = mem.read(end - start)
                except (OSError, ValueError, OverflowError):
                    continue
                found.update(n for n in needles if n in data)
    except PermissionError:
        return None
    return sorted(found)


@pytest.mark.parametrize("kind", SANDBOXES)
async def test_the_zygote_never_holds_a_kernels_key_or_environment(
    home: Path, tmp_path: Path, forks: ForkServers, kind: str
) -> None:
    """Every later kernel is a copy of the zygote's memory: what a kernel's
    request holds that is secret (its key, its session's token) reaches the
    kernel in a memfd the zygote only hands on, never read into its heap."""
    sandbox = policy(kind, home)
    token = "kt-" + "7" * 40
    async with new_kernel(tmp_path, home, forks, sandbox, RECURSA_KERNEL_TOKEN=token) as first:
        assert first.forked
        out = await first.execute("from recursa.api.client import configured", timeout=30)
        key = json.loads(first.connection_file.read_text())["key"].encode()
        async with new_kernel(tmp_path, home, forks, sandbox) as second:
            assert second.forked
            zygote = psutil.Process(first.pid).parent()
            assert zygote is not None and zygote.pid == psutil.Process(second.pid).ppid()
            held = memory_holds(zygote.pid, [key, token.encode()])
            # Read as root: neither is there. Otherwise: it is closed (non-dumpable).
            assert held in ([], None)
            if held is None:
                assert os.geteuid() != 0
            # Nor in the sibling forked after it (a copy of the zygote).
            held = memory_holds(second.pid, [key, token.encode()])
            assert held in ([], None)
        assert out.status == "ok"


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here")
async def test_a_startup_file_planted_in_the_shared_tmp_runs_in_no_sibling(
    home: Path, tmp_path: Path, forks: ForkServers
) -> None:
    """Forked kernels share their sandbox's /tmp, where IPython's directory is:
    a kernel that plants a startup file or a config file there must not get
    code run in a sibling (another session) as it starts."""
    sandbox = policy("bwrap", home)
    plant = (
        "import os\n"
        "d = os.path.join(os.environ['IPYTHONDIR'], 'profile_default')\n"
        "os.makedirs(os.path.join(d, 'startup'), exist_ok=True)\n"
        "evil = \"open('ran-' + str(os.getpid()), 'w').write('x')\\n\"\n"
        "open(os.path.join(d, 'startup', '00-evil.py'), 'w').write('import os\\n' + evil)\n"
        "open(os.path.join(d, 'ipython_kernel_config.py'), 'w').write('import os\\n' + evil)\n"
        "print(sorted(os.listdir(os.path.join(d, 'startup'))))"
    )
    async with new_kernel(tmp_path, home, forks, sandbox) as first:
        out = await first.execute(plant, timeout=30)
        assert "'00-evil.py'" in out.text()
        async with new_kernel(tmp_path, home, forks, sandbox) as second:
            assert second.forked
            out = await second.execute("print(41 + 1)", timeout=30)
            assert out.text() == "42\n"
    assert not list(tmp_path.glob("ran-*"))

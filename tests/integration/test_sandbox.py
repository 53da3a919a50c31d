"""The kernel sandbox (bubblewrap) on real kernels, a real runtime and a real
daemon: what a cell can and cannot reach, that what it starts dies with its
kernel, and that everything a session does still works inside."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import sys
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import uuid4

import psutil
import pytest

from daemon_kit import recursa
from recursa.config import Limits
from recursa.errors import KernelError
from recursa.kernel import Kernel, KernelPool, exchange
from recursa.kernel.forkserver import ForkServers
from recursa.kernel.sandbox import (
    OPT_OUT,
    PACKAGE,
    SandboxPolicy,
    check_sandbox,
    connection_inside,
)
from recursa.models.faux import code, register_script, reply
from recursa.protocol.events import CellFinished
from recursa.testing import FakeModelServer, Reply, ToolCallSpec, make_runtime

try:
    check_sandbox("bwrap", network=False)
    HAVE_BWRAP = True
except KernelError:
    HAVE_BWRAP = False

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here")

SPAWN_WAIT = 10.0


def policy(home: Path, *, network: bool = True, bwrap: str = "bwrap") -> SandboxPolicy:
    return SandboxPolicy(kind="bwrap", network=network, hidden=(home,), bwrap=bwrap)


def kernel_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.fixture(params=["exec", "fork"])
async def sandboxed(
    home: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Kernel]:
    """A sandboxed kernel, launched as a process of its own or forked from a
    zygote (:mod:`recursa.kernel.forkserver`): both must hide the same."""
    workspace = tmp_path / "work"
    workspace.mkdir()
    runtime_dir = home / "kernels"
    forks = ForkServers(runtime_dir, kernel_env()) if request.param == "fork" else None
    kernel = Kernel(
        workspace, kernel_env(), runtime_dir=runtime_dir, sandbox=policy(home), forks=forks
    )
    try:
        async with kernel:
            assert kernel.forked == (forks is not None)
            yield kernel
    finally:
        if forks is not None:
            await forks.aclose()


def own_dir(kernel: Kernel) -> Path:
    """The kernel's own directory (its sockets), wherever it was put."""
    info = json.loads(kernel.connection_file.read_text())
    return Path(info["ip"]).parent


def marked(marker: str) -> list[psutil.Process]:
    """Live processes whose command line carries ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


def lives(proc: psutil.Process) -> bool:
    """Whether ``proc`` is running and not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(condition: object, seconds: float, what: str) -> float:
    """Poll ``condition`` until true; the seconds it took. Fails after ``seconds``."""
    assert callable(condition)
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > seconds:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - began


def new_marker() -> str:
    """A ``sleep`` duration no other process has on its command line."""
    return f"300.{uuid4().int % 10**15:015d}"


def sleeper(marker: str, how: str) -> str:
    """A cell that leaves ``sleep <marker>`` running, detached from the kernel by
    ``how``: ``session`` (start_new_session=True) or ``double-fork``."""
    if how == "session":
        return (
            "import subprocess\n"
            f"subprocess.Popen(['sleep', {marker!r}], start_new_session=True,\n"
            "    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print('started')"
        )
    return (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', {marker!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "print('started')"
    )


# ---------------------------------------------------------------- what a cell sees


async def test_a_cell_reads_nothing_of_the_home_and_writes_only_its_workspace_and_tmp(
    home: Path, tmp_path: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "daemon.token").write_text("the-token")
    elsewhere = Path("/var/tmp") / f"recursa-planted-{uuid4().hex}"
    planted = Path.home() / f"recursa-planted-{uuid4().hex}"
    probe = (
        "import glob, json, os\n"
        f"home = {str(home)!r}\n"
        "seen = {}\n"
        "for path in [home + '/daemon.token', home + '/recursa.db',\n"
        "             *glob.glob(home + '/kernels/*.json')]:\n"
        "    try:\n"
        "        with open(path, 'rb') as f:\n"
        "            seen[path] = len(f.read())\n"
        "    except OSError as e:\n"
        "        seen[path] = type(e).__name__\n"
        "wrote = {}\n"
        f"for path in ['mine.txt', '/tmp/scratch.txt', {str(elsewhere)!r}, {str(planted)!r},\n"
        f"             {str(home / 'planted.txt')!r}]:\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('x')\n"
        "        wrote[path] = 'ok'\n"
        "    except OSError as e:\n"
        "        wrote[path] = type(e).__name__\n"
        "print(json.dumps({'read': seen, 'wrote': wrote}))"
    )
    workspace = tmp_path / "project"
    workspace.mkdir()
    register_script("probe", [code(probe), reply("done")])
    register_script("bystander", [code("x = 1"), reply("done")])
    async with make_runtime(home) as runtime:
        other = await runtime.create_session(model="faux/bystander", cwd=workspace)
        await other.ask("start a kernel, so another session's files exist")
        session = await runtime.create_session(model="faux/probe", cwd=workspace)
        await session.ask("look around")
        own = runtime.store.kernels.get(session.id)
        theirs = runtime.store.kernels.get(other.id)
        assert own is not None and theirs is not None
        [finished] = [r.event for r in session.history() if isinstance(r.event, CellFinished)]
    found = json.loads(finished.output)
    # Nothing of the home: no kernel's connection file (not even its own,
    # which it reads elsewhere), no token, no store.
    readable = {path for path, size in found["read"].items() if isinstance(size, int)}
    assert readable == set()
    assert own.connection_file not in found["read"]  # not even listed
    assert theirs.connection_file not in found["read"]
    assert found["read"][str(home / "daemon.token")] == "FileNotFoundError"
    assert found["read"][str(home / "recursa.db")] == "FileNotFoundError"
    wrote = found["wrote"]
    assert wrote["mine.txt"] == "ok"
    assert (workspace / "mine.txt").read_text() == "x"
    assert wrote["/tmp/scratch.txt"] == "ok"
    assert wrote[str(elsewhere)] == "OSError"
    assert wrote[str(planted)] == "OSError"
    assert not elsewhere.exists()
    assert not planted.exists()
    assert not (home / "planted.txt").exists()  # written into the tmpfs over the home


async def test_a_cell_sees_only_its_own_kernel_files(home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    runtime_dir = home / "kernels"
    sandbox = policy(home)
    async with (
        Kernel(workspace, kernel_env(), runtime_dir=runtime_dir, sandbox=sandbox) as first,
        Kernel(workspace, kernel_env(), runtime_dir=runtime_dir, sandbox=sandbox) as second,
    ):
        listing = f"import os; print(sorted(os.listdir({str(runtime_dir)!r})))"
        out = await second.execute(listing, timeout=30)
        seen = set(json.loads(out.text().replace("'", '"')))
        # At most its own directory (its sockets), when that is beside the
        # connection files (a long path puts it under /tmp instead).
        assert seen <= {second.connection_file.stem}
        for path in (first.connection_file, second.connection_file):
            out = await second.execute(f"open({str(path)!r}).read()", timeout=30)
            assert out.status == "error"
            assert "FileNotFoundError" in out.text()
        # It reads its own at a private path, read-only.
        inside = connection_inside(second.connection_file)
        out = await second.execute(f"print(len(open({str(inside)!r}).read()) > 0)", timeout=30)
        assert out.text() == "True\n"
        out = await second.execute(f"open({str(inside)!r}, 'a').write('x')", timeout=30)
        assert out.status == "error"
        assert "Read-only file system" in out.text()


async def test_killing_the_recorded_pid_alone_ends_the_whole_sandbox(sandboxed: Kernel) -> None:
    """The pid a session records is the outer bwrap's; the kernel inside dies with it."""
    marker = new_marker()
    await sandboxed.execute(sleeper(marker, "double-fork"), timeout=30)
    wait_for(lambda: marked(marker), SPAWN_WAIT, "the sleep to start")
    launched = psutil.Process(sandboxed.pid)
    family = [launched, *launched.children(recursive=True)]
    # bwrap, the kernel, the sleep; a forked kernel is the recorded pid itself,
    # and the sleep it detached stays below it (it is a subreaper).
    assert len(family) >= (2 if sandboxed.forked else 3)
    assert any(marked(marker)[0].pid == p.pid for p in family)
    launched.kill()
    _gone, alive = psutil.wait_procs(family, timeout=2.0)
    assert alive == []
    out = await sandboxed.execute("print('back')", timeout=60)
    assert out.restarted
    assert "had died" in out.note
    assert out.text().startswith("back\n")


# ------------------------------------------------------- what a cell starts dies


@pytest.mark.parametrize("how", ["session", "double-fork"])
async def test_what_a_cell_detaches_dies_when_its_kernel_restarts(
    sandboxed: Kernel, how: str
) -> None:
    marker = new_marker()
    out = await sandboxed.execute(sleeper(marker, how), timeout=30)
    assert out.text().strip() == "started"
    wait_for(lambda: marked(marker), SPAWN_WAIT, "the sleep to start")
    await sandboxed.restart()
    took = wait_for(lambda: not marked(marker), 2.0, "the sleep to die with its kernel")
    assert took < 2.0
    out = await sandboxed.execute("print('alive')", timeout=30)
    assert out.text() == "alive\n"


def python(source: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": source})


def test_a_detached_sleep_is_gone_within_two_seconds_of_recursa_stop(
    server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    marker = new_marker()
    server.push(Reply(tool_calls=[python(sleeper(marker, "session"))]), Reply(text="left it"))
    started = recursa(["run", "--detach", "--model", "openai/m", "go"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip().splitlines()[-1]
    waited = recursa(["attach", session, "--until-idle", "--after", "0"], env, tmp_path)
    assert waited.returncode == 0, waited.stderr
    assert marked(marker), "the cell's sleep is not running"
    stopped = recursa(["stop", session], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: not marked(marker), 2.0, "the sleep to die after recursa stop")


# ------------------------------------------------------------------- network


async def test_network_false_cuts_the_network_and_true_keeps_it(home: Path, tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    attempt = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__)"
    )
    try:
        for network, expected in ((False, "refused"), (True, "connected")):
            workspace = tmp_path / f"net-{network}"
            workspace.mkdir()
            async with Kernel(
                workspace,
                kernel_env(),
                runtime_dir=home / "kernels",
                sandbox=policy(home, network=network),
            ) as kernel:
                out = await kernel.execute(attempt, timeout=30)
            assert out.text().split()[0] == expected, out.text()
    finally:
        listener.close()


# ------------------------------------------------------------ no silent downgrade


async def test_a_missing_bubblewrap_fails_the_start_in_one_line(home: Path, tmp_path: Path) -> None:
    kernel = Kernel(
        tmp_path,
        kernel_env(),
        runtime_dir=home / "kernels",
        sandbox=policy(home, bwrap=str(tmp_path / "no-such-bwrap")),
    )
    with pytest.raises(KernelError) as caught:
        await kernel.start()
    message = str(caught.value)
    assert "\n" not in message
    assert "not installed" in message
    assert PACKAGE in message
    assert OPT_OUT in message
    assert not kernel.is_alive()
    await kernel.shutdown()


async def test_a_workspace_that_is_the_home_is_refused(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    kernel = Kernel(home, kernel_env(), runtime_dir=home / "kernels", sandbox=policy(home))
    with pytest.raises(KernelError, match="must not see"):
        await kernel.start()
    await kernel.shutdown()


# ----------------------------------------------------- everything still works


def tiny_wheel(directory: Path) -> Path:
    """A wheel of one module, built by hand: pip installs it with no network."""
    files = {
        "recursa_tiny.py": b"VALUE = 'from the wheel'\n",
        "recursa_tiny-0.1.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: recursa-tiny\nVersion: 0.1\n"
        ),
        "recursa_tiny-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("recursa_tiny-0.1.dist-info/RECORD,,")
    path = directory / "recursa_tiny-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("recursa_tiny-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


async def test_bash_and_pip_install_into_the_workspace_work(sandboxed: Kernel) -> None:
    out = await sandboxed.execute("%%bash\necho made > made.txt\ncat made.txt", timeout=30)
    assert out.text() == "made\n"
    wheels = sandboxed.cwd / "wheels"
    wheels.mkdir()
    wheel = tiny_wheel(wheels)
    install = (
        "import subprocess, sys\n"
        "done = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-index',\n"
        f"    '--quiet', '--target', 'lib', {str(wheel)!r}], capture_output=True, text=True)\n"
        "print(done.returncode, done.stderr[-500:])"
    )
    out = await sandboxed.execute(install, timeout=120)
    assert out.text().startswith("0"), out.text()
    out = await sandboxed.execute(
        "import sys; sys.path.insert(0, 'lib'); import recursa_tiny; print(recursa_tiny.VALUE)",
        timeout=30,
    )
    assert out.text() == "from the wheel\n"


async def test_interrupt_keeps_the_namespace_and_restart_clears_it(sandboxed: Kernel) -> None:
    await sandboxed.execute("kept = 41", timeout=30)
    out = await sandboxed.execute("import time; time.sleep(60)", timeout=1.0)
    assert out.status == "timeout"
    assert not out.restarted
    out = await sandboxed.execute("print(kept + 1)", timeout=30)
    assert out.text() == "42\n"
    await sandboxed.restart()
    out = await sandboxed.execute("print('kept' in globals())", timeout=30)
    assert out.text() == "False\n"


async def test_snapshots_go_through_the_kernels_own_directory(
    sandboxed: Kernel, home: Path
) -> None:
    target = home / "sessions" / "s-1" / "namespace.dill"
    target.parent.mkdir(parents=True)
    await sandboxed.execute("value = {'n': 1}", timeout=30)
    first = await sandboxed.snapshot(target, max_bytes=1 << 20)
    assert "value" in first.names
    await sandboxed.execute("value = {'n': 2}", timeout=30)
    await sandboxed.snapshot(target, max_bytes=1 << 20)
    assert target.is_file()
    assert Path(f"{target}.prev").is_file()
    await sandboxed.execute("value = None", timeout=30)
    restored = await sandboxed.restore(target)
    assert "value" in restored.names
    out = await sandboxed.execute("print(value)", timeout=30)
    assert out.text() == "{'n': 2}\n"
    # Nothing of the exchange is left in the kernel's directory.
    kernel_dir = own_dir(sandboxed)
    assert sorted(p.name for p in kernel_dir.iterdir() if not p.name.startswith("ipc")) == []


async def test_a_snapshot_the_kernel_replaced_by_a_link_is_refused(
    sandboxed: Kernel, home: Path
) -> None:
    secret = home / "daemon.token"
    secret.write_text("the-token")
    target = home / "sessions" / "s-2" / "namespace.dill"
    target.parent.mkdir(parents=True)
    kernel_dir = own_dir(sandboxed)
    # What a cell can do in its own directory: put a link where the harness
    # takes the snapshot from. The harness must not move a link into place.
    link = kernel_dir / "snapshot.dill"
    out = await sandboxed.execute(
        f"import os; os.symlink({str(secret)!r}, {str(link)!r})", timeout=30
    )
    assert out.status == "ok", out.text()
    with pytest.raises(KernelError, match=r"cannot be read|not a regular file"):
        exchange.install(link, target)
    assert not target.exists()
    assert secret.read_text() == "the-token"


async def test_spares_are_bound_to_one_workspace_and_others_get_a_fresh_kernel(
    home: Path, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    second = tmp_path / "second"
    first.mkdir()
    second.mkdir()
    async with KernelPool(
        kernel_env(), size=1, runtime_dir=home / "kernels", sandbox=policy(home)
    ) as pool:
        await pool.fill()
        assert pool.ready == 0  # no workspace asked for yet: no spare
        a = await pool.acquire(first)
        await pool.fill()
        assert pool.ready == 1
        b = await pool.acquire(second)  # the spare is bound to `first`: not this one
        try:
            out = await b.execute("open('here.txt', 'w').write('b'); print('ok')", timeout=30)
            assert out.text() == "ok\n"
            assert (second / "here.txt").read_text() == "b"
            # Another workspace is not there (under /tmp: the private tmpfs).
            out = await b.execute(f"open({str(first / 'x.txt')!r}, 'w')", timeout=30)
            assert out.status == "error"
            assert not (first / "x.txt").exists()
            assert b.workspace == second
        finally:
            await a.shutdown()
            await b.shutdown()


async def test_closing_the_pool_right_after_it_discards_a_spare_leaves_no_kernel(
    home: Path, tmp_path: Path
) -> None:
    """The discard is a background task, which the close cancels, maybe before
    it began: the close stops that spare itself, and waits until it is gone."""
    first = tmp_path / "first"
    second = tmp_path / "second"
    first.mkdir()
    second.mkdir()
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    pool = KernelPool(kernel_env(), size=1, runtime_dir=home / "kernels", sandbox=policy(home))
    try:
        pool.expect(first)
        await pool.fill()
        assert pool.ready == 1
        spare = [p for p in me.children(recursive=True) if p.pid not in before]
        assert spare
        pool.expect(second)  # the spare bound to `first` is discarded, in the background
    finally:
        await pool.aclose()
    # Killed as a group: the sandbox's inner processes may take a moment to go.
    # Not ours to reap, so alive means: not a zombie.
    try:
        wait_for(lambda: not [p for p in spare if lives(p)], 10, "the spare's processes gone")
    finally:
        for proc in spare:
            if lives(proc):
                proc.kill()
    assert list((home / "kernels").glob("*.json")) == []


async def test_a_runtimes_kernels_are_sandboxed_by_default(home: Path, tmp_path: Path) -> None:
    """So every runtime and daemon test of the suite runs its kernels sandboxed."""
    register_script("who", [code("import os; print(os.getpid())"), reply("ok")])
    async with make_runtime(home, limits=Limits(cell_timeout=30)) as runtime:
        assert runtime.config.kernel.sandbox == ("bwrap" if sys.platform == "linux" else "none")
        session = await runtime.create_session(model="faux/who", cwd=tmp_path)
        await session.ask("who are you")
        [finished] = [r.event for r in session.history() if isinstance(r.event, CellFinished)]
        # Pid 1 is the sandbox's init: the kernel is the next process of its namespace.
        assert int(finished.output) < 10
        [row] = runtime.store.kernels.all()
        # Forked (the default): from a zygote that runs in the sandbox; the
        # kernel is a child of the zygote, itself below bwrap.
        kernel = psutil.Process(row.pid)
        lines = [kernel.cmdline(), *(p.cmdline() for p in kernel.parents())]
        assert str(row.connection_file) in lines[0]
        launched = next(line for line in lines if any(p.endswith("bwrap") for p in line))
        assert "--unshare-pid" in launched

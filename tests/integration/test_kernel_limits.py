"""Per-kernel limits on real ipykernel processes in real cgroups: a task-count
limit that a cell runs into and survives, a memory limit that kills only its
own kernel, cgroups gone after the kernel, and a configured limit that cannot
be enforced refused in one line."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from uuid import uuid4

import psutil
import pytest

from recursa.config import Config
from recursa.errors import KernelError
from recursa.kernel import Kernel
from recursa.kernel.limits import (
    CgroupHost,
    Hierarchy,
    KernelLimits,
    kernel_cgroups,
    limit_argv,
    oom_kills,
    release_limits,
)

MakeLimited = Callable[[KernelLimits], AbstractAsyncContextManager[tuple[Kernel, str]]]


def limited_python(tmp_path: Path, prefix: list[str]) -> str:
    """An executable that runs this Python behind ``prefix``: the seam through
    which a test's kernel is launched inside its cgroup."""
    script = tmp_path / f"python-{uuid4().hex[:8]}"
    script.write_text(f'#!/bin/sh\nexec {shlex.join([*prefix, sys.executable])} "$@"\n')
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def make_limited(tmp_path: Path, config: Config) -> MakeLimited:
    """Start a kernel under ``limits`` in a cgroup of its own; stop it and
    release its cgroups afterwards. Skips where this machine cannot enforce
    limits (the error says why)."""

    @asynccontextmanager
    async def make(limits: KernelLimits) -> AsyncIterator[tuple[Kernel, str]]:
        name = f"test-{uuid4().hex[:12]}"
        try:
            prefix = limit_argv(limits, name)
        except KernelError as exc:
            pytest.skip(str(exc))
        work = tmp_path / name
        work.mkdir()
        kernel = Kernel(
            work,
            config.kernel.env,
            runtime_dir=tmp_path / "rt",
            python=limited_python(tmp_path, prefix),
        )
        try:
            async with kernel:
                yield kernel, name
        finally:
            release_limits(name)

    return make


async def test_a_task_limit_refuses_forks_past_it_and_the_kernel_survives(
    make_limited: MakeLimited,
) -> None:
    async with make_limited(KernelLimits(max_processes=20)) as (kernel, name):
        out = await kernel.execute(
            "import subprocess\n"
            "started, refused = [], 0\n"
            "for _ in range(100):\n"
            "    try:\n"
            "        started.append(subprocess.Popen(['sleep', '60']))\n"
            "    except OSError:\n"
            "        refused += 1\n"
            "print(len(started), refused)\n"
            "for p in started:\n"
            "    p.kill()\n"
            "    p.wait()\n",
            timeout=60,
        )
        assert out.status == "ok", out
        started, refused = map(int, out.text().split())
        # The kernel's own threads count too: fewer than 20 sleeps start.
        assert 0 < started < 20
        assert refused == 100 - started
        after = await kernel.execute("print(6 * 7)", timeout=30)
        assert (after.text().strip(), after.restarted) == ("42", False)
        [pids] = [d for d in kernel_cgroups(name) if (d / "pids.max").exists()]
        assert (pids / "pids.max").read_text().strip() == "20"
        assert kernel.pid is not None
        assert str(kernel.pid) in (pids / "cgroup.procs").read_text().split()


async def test_release_removes_the_cgroups_and_kills_what_escaped_the_kernel(
    make_limited: MakeLimited,
) -> None:
    async with make_limited(KernelLimits(memory_bytes=256 << 20, max_processes=64)) as (
        kernel,
        name,
    ):
        out = await kernel.execute(
            "import subprocess\n"
            "print(subprocess.Popen(['sleep', '300'], start_new_session=True).pid)\n",
            timeout=30,
        )
        escaped = psutil.Process(int(out.text()))
        cgroups = kernel_cgroups(name)
        assert {d.name for d in cgroups} == {f"recursa-{name}"}
        assert len(cgroups) in (1, 2)  # v2, or v1 memory and pids
    # The kernel is stopped and its cgroups released (make_limited's exit):
    # the sleep in its own session outlived the kernel, not its cgroup.
    assert kernel_cgroups(name) == []
    assert not any(d.exists() for d in cgroups)
    try:
        escaped.wait(timeout=5)
    except psutil.TimeoutExpired:
        escaped.kill()
        pytest.fail("a process the kernel started in a new session survived release_limits")
    release_limits(name)  # idempotent


async def test_a_memory_limit_kills_only_its_own_kernel(
    make_limited: MakeLimited, tmp_path: Path, config: Config
) -> None:
    work = tmp_path / "free"
    work.mkdir()
    async with Kernel(work, config.kernel.env, runtime_dir=tmp_path / "rt") as free:
        await free.execute("kept = 'still here'", timeout=30)
        async with make_limited(KernelLimits(memory_bytes=200 << 20)) as (kernel, name):
            await kernel.execute("x = 1", timeout=30)
            out = await kernel.execute("big = bytearray(1 << 30)", timeout=60)
            # Either Python is refused the memory, or the kernel is killed for
            # it and restarted (the note says so).
            if out.restarted:
                assert "died" in out.note or "killed" in out.note, out
                assert oom_kills(name) >= 1
            else:
                assert "MemoryError" in out.text(), out
            again = await kernel.execute("print(6 * 7)", timeout=30)
            assert again.text().strip() == "42"
        # The other kernel lost nothing, and may use more than the limit.
        other = await free.execute("print(kept, len(bytearray(300 << 20)))", timeout=60)
        assert other.text().split() == ["still", "here", str(300 << 20)]
        assert not other.restarted


def test_no_limit_means_no_cgroup_work(tmp_path: Path) -> None:
    nowhere = tmp_path / "absent"
    host = CgroupHost(v1={"memory": Hierarchy(nowhere, nowhere)})
    assert limit_argv(KernelLimits(), "k", host) == []
    assert not nowhere.exists()


def test_an_unwritable_cgroup_root_is_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "cgroup.procs").write_text("")
    text = (
        "from pathlib import Path\n"
        "import sys\n"
        "from recursa.errors import KernelError\n"
        "from recursa.kernel.limits import CgroupHost, Hierarchy, KernelLimits, limit_argv\n"
        "mount = Path(sys.argv[1])\n"
        "host = CgroupHost(v1={'memory': Hierarchy(mount, mount)})\n"
        "try:\n"
        "    limit_argv(KernelLimits(memory_bytes=200 << 20), 'k', host)\n"
        "except KernelError as exc:\n"
        "    print(exc)\n"
    )
    target = str(root / "memory")
    if os.geteuid() == 0:
        # Root writes through permissions: a read-only mount, in a mount
        # namespace of the check's own so that nothing else sees it.
        unshare = shutil.which("unshare")
        if unshare is None:
            pytest.skip("needs unshare(1) to make a read-only mount as root")
        argv = [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" -c "$3" "$1"',
            "sh",
            target,
            sys.executable,
            text,
        ]
    else:
        (root / "memory").chmod(0o555)
        argv = [sys.executable, "-c", text, target]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert "\n" not in message
    assert message.startswith("[kernel] memory_max cannot be enforced here: ")
    assert "Read-only file system" in message or "Permission denied" in message
    assert message.endswith("or unset memory_max")
    assert list((root / "memory").iterdir()) == [root / "memory" / "cgroup.procs"]

"""The limits' configuration keys, and kernel.limits on fake cgroup trees: where
a kernel's cgroup goes (v2, v1, nowhere), what is written, and the prefix's
shell program on real files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from recursa.config import load_config, parse_size
from recursa.errors import ConfigError, KernelError
from recursa.kernel.limits import (
    CgroupHost,
    Hierarchy,
    KernelLimits,
    kernel_cgroups,
    limit_argv,
    oom_kills,
)

# -- configuration ----------------------------------------------------------------------


def kernel_table(tmp_path: Path, text: str) -> KernelLimits:
    (tmp_path / "config.toml").write_text(f"[kernel]\n{text}\n")
    return KernelLimits.from_config(load_config({"RECURSA_HOME": str(tmp_path)}).kernel)


def test_no_limits_by_default(tmp_path: Path) -> None:
    limits = kernel_table(tmp_path, "")
    assert limits == KernelLimits(None, None)
    assert limits.controllers == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('memory_max = "512M"', KernelLimits(512 << 20, None)),
        ('memory_max = "4G"\nmax_processes = 256', KernelLimits(4 << 30, 256)),
        ('memory_max = "1.5GiB"', KernelLimits(3 << 29, None)),
        ("memory_max = 268435456", KernelLimits(256 << 20, None)),
        ('memory_max = "100000000"', KernelLimits(100_000_000, None)),
        ("memory_max = 0\nmax_processes = 0", KernelLimits(None, None)),
        ("max_processes = 16", KernelLimits(None, 16)),
    ],
)
def test_limit_keys(tmp_path: Path, text: str, expected: KernelLimits) -> None:
    assert kernel_table(tmp_path, text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('memory_max = "lots"', "kernel.memory_max must be a size in bytes or with a unit"),
        ('memory_max = "10M"', "kernel.memory_max must be 0 (no limit) or at least 64M"),
        ("memory_max = -1", "kernel.memory_max must be a size"),
        ("memory_max = 5e8", "kernel.memory_max must be a size"),
        ("memory_max = true", "kernel.memory_max must be a size"),
        ('memory_max = "2P"', "kernel.memory_max must be a size"),
        ("max_processes = 5", "kernel.max_processes must be 0 (no limit) or at least 16"),
        ('max_processes = "20"', "kernel.max_processes must be a whole number"),
        ("max_processes = 99999999", "kernel.max_processes must be from 0 to 4194304"),
    ],
)
def test_bad_limit_keys_are_one_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        kernel_table(tmp_path, text)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_sizes() -> None:
    assert parse_size("64k") == 64 << 10
    assert parse_size(" 2 GB ") == 2 << 30
    assert parse_size("3t") == 3 << 40
    with pytest.raises(ValueError, match="must be a size"):
        parse_size("1" * 50)


# -- the layout -------------------------------------------------------------------------

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def discover(tmp_path: Path, mountinfo: str, cgroup: str) -> CgroupHost:
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(cgroup)
    return CgroupHost.discover(tmp_path / "mountinfo", tmp_path / "cgroup")


def test_discover_a_hybrid_layout(tmp_path: Path) -> None:
    host = discover(tmp_path, HYBRID, "8:pids:/\n4:memory:/jobs/a1\n2:cpu,cpuacct:/\n0::/user/x\n")
    unified = Path("/sys/fs/cgroup/unified")
    assert host.unified == Hierarchy(unified, unified / "user/x")
    assert host.v1["memory"] == Hierarchy(
        Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/memory/jobs/a1")
    )
    assert host.v1["pids"].own == Path("/sys/fs/cgroup/pids")
    assert host.v1["cpuacct"].mount == Path("/sys/fs/cgroup/cpu,cpuacct")


def test_discover_a_mount_of_a_subtree_and_escaped_paths(tmp_path: Path) -> None:
    mountinfo = (
        "50 1 0:40 /box /cg\\040root rw - cgroup2 cgroup2 rw\n"
        "51 1 0:41 /box /mem rw - cgroup cgroup rw,memory\n"
    )
    host = discover(tmp_path, mountinfo, "4:memory:/elsewhere\n0::/box/daemon\n")
    assert host.unified == Hierarchy(Path("/cg root"), Path("/cg root/daemon"))
    assert "memory" not in host.v1  # its cgroup is outside what the mount shows


def test_discover_without_proc(tmp_path: Path) -> None:
    assert CgroupHost.discover(tmp_path / "none", tmp_path / "none") == CgroupHost()


# -- making a kernel's cgroup -----------------------------------------------------------


def cgroup_dir(path: Path, *files: str, **contents: str) -> Path:
    """A directory that looks like a cgroup: ``files`` empty, ``contents`` filled
    (``_`` in a keyword stands for ``.``)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("cgroup.procs", *files):
        (path / name).write_text("")
    for key, text in contents.items():
        (path / key.replace("_", ".", 1)).write_text(text)
    return path


def test_v2_when_this_cgroup_offers_the_controllers(tmp_path: Path) -> None:
    base = cgroup_dir(tmp_path / "daemon", cgroup_controllers="cpu memory pids\n")
    (base / "cgroup.subtree_control").write_text("")
    kernel = cgroup_dir(base / "recursa-k", "memory.max", "memory.swap.max", "pids.max")
    host = CgroupHost(unified=Hierarchy(tmp_path, base))
    argv = limit_argv(KernelLimits(256 << 20, 64), "k", host)
    assert argv[0] == "/bin/sh"
    assert argv[-2:] == [str(kernel / "cgroup.procs"), "--"]
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (kernel / "memory.max").read_text() == str(256 << 20)
    assert (kernel / "memory.swap.max").read_text() == "0"
    assert (kernel / "pids.max").read_text() == "64"
    assert kernel_cgroups("k", host) == [kernel]


def test_v2_from_the_leaf_this_process_moved_into(tmp_path: Path) -> None:
    base = cgroup_dir(tmp_path / "daemon", cgroup_controllers="pids", cgroup_subtree_control="pids")
    leaf = cgroup_dir(base / "recursa")
    kernel = cgroup_dir(base / "recursa-k", "pids.max")
    host = CgroupHost(unified=Hierarchy(tmp_path, leaf))
    assert limit_argv(KernelLimits(max_processes=32), "k", host)[-2] == str(kernel / "cgroup.procs")
    assert (kernel / "pids.max").read_text() == "32"
    assert (base / "cgroup.subtree_control").read_text() == "pids"  # already enabled


def test_v1_when_v2_lacks_a_controller(tmp_path: Path) -> None:
    unified = cgroup_dir(tmp_path / "unified", cgroup_controllers="pids")
    memory = cgroup_dir(tmp_path / "memory" / "job")
    pids = cgroup_dir(tmp_path / "pids")
    cgroup_dir(memory / "recursa-k", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
    cgroup_dir(pids / "recursa-k", "pids.max")
    host = CgroupHost(
        unified=Hierarchy(unified, unified),
        v1={
            "memory": Hierarchy(tmp_path / "memory", memory),
            "pids": Hierarchy(pids, pids),
        },
    )
    argv = limit_argv(KernelLimits(1 << 30, 100), "k", host)
    assert argv[-3:] == [
        str(memory / "recursa-k" / "cgroup.procs"),
        str(pids / "recursa-k" / "cgroup.procs"),
        "--",
    ]
    assert (memory / "recursa-k" / "memory.limit_in_bytes").read_text() == str(1 << 30)
    assert (memory / "recursa-k" / "memory.memsw.limit_in_bytes").read_text() == str(1 << 30)
    assert (pids / "recursa-k" / "pids.max").read_text() == "100"


def test_a_missing_controller_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    memory = cgroup_dir(tmp_path / "memory")
    host = CgroupHost(v1={"memory": Hierarchy(memory, memory)})
    with pytest.raises(KernelError) as info:
        limit_argv(KernelLimits(1 << 30, 100), "k", host)
    assert str(info.value) == (
        "[kernel] memory_max and max_processes cannot be enforced here: no cgroup "
        "hierarchy here has the pids controller; run the daemon where it may create "
        "cgroups (as root, or in a delegated cgroup: systemd-run --user -p Delegate=yes "
        "recursa daemon), or unset memory_max and max_processes"
    )
    assert not (memory / "recursa-k").exists()  # made for memory, then removed


def test_a_limit_file_that_is_missing_or_unwritable_is_refused(tmp_path: Path) -> None:
    # A cgroup without the controller's files: nothing is created or skipped.
    memory = cgroup_dir(tmp_path / "memory")
    host = CgroupHost(v1={"memory": Hierarchy(memory, memory)})
    kernel = cgroup_dir(memory / "recursa-k")
    with pytest.raises(KernelError, match="has no memory limit file"):
        limit_argv(KernelLimits(memory_bytes=1 << 30), "k", host)
    (kernel / "memory.limit_in_bytes").mkdir()  # there, but cannot be written
    with pytest.raises(KernelError) as info:
        limit_argv(KernelLimits(memory_bytes=1 << 30), "k", host)
    assert f"{kernel / 'memory.limit_in_bytes'}: Is a directory" in str(info.value)
    pids = cgroup_dir(tmp_path / "pids")
    cgroup_dir(pids / "recursa-k")
    with pytest.raises(KernelError, match=r"pids\.max: No such file"):
        limit_argv(
            KernelLimits(max_processes=20), "k", CgroupHost(v1={"pids": Hierarchy(pids, pids)})
        )
    assert not (pids / "recursa-k" / "pids.max").exists()


def test_a_name_that_cannot_name_a_cgroup(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="cannot name a kernel cgroup"):
        limit_argv(KernelLimits(max_processes=20), "../up", CgroupHost())


def test_oom_kills_are_read_from_either_version(tmp_path: Path) -> None:
    v2 = cgroup_dir(tmp_path / "v2" / "recursa-k", memory_events="low 0\noom 3\noom_kill 2\n")
    v1 = cgroup_dir(tmp_path / "v1" / "recursa-k", memory_oom_control="oom_kill_disable 0\n")
    host = CgroupHost(unified=Hierarchy(tmp_path, v2.parent), v1={"memory": Hierarchy(v1, v1)})
    assert oom_kills("k", host) == 2
    (v1.parent / "recursa-k" / "memory.oom_control").write_text("under_oom 0\noom_kill 1\n")
    host = CgroupHost(v1={"memory": Hierarchy(v1.parent, v1.parent)})
    assert oom_kills("k", host) == 1
    assert oom_kills("other", host) == 0


def test_the_prefix_enters_every_cgroup_then_execs(tmp_path: Path) -> None:
    first = cgroup_dir(tmp_path / "a" / "recursa-k", "pids.max")
    second = cgroup_dir(tmp_path / "b" / "recursa-k", "pids.max")
    host = CgroupHost(
        v1={
            "memory": Hierarchy(tmp_path / "a", tmp_path / "a"),
            "pids": Hierarchy(tmp_path / "b", tmp_path / "b"),
        }
    )
    (first / "memory.limit_in_bytes").write_text("")
    prefix = limit_argv(KernelLimits(128 << 20, 20), "k", host)
    done = subprocess.run(
        [*prefix, "sh", "-c", 'echo "$$ $0 $1"', "--", "two words"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid, rest = done.stdout.split(" ", 1)
    # The command ran in the same process (exec), with its arguments intact.
    assert rest == "-- two words\n"
    assert (first / "cgroup.procs").read_text().strip() == pid
    assert (second / "cgroup.procs").read_text().strip() == pid


def test_the_prefix_stops_when_it_cannot_enter(tmp_path: Path) -> None:
    kernel = cgroup_dir(tmp_path / "recursa-k", "pids.max")
    host = CgroupHost(v1={"pids": Hierarchy(tmp_path, tmp_path)})
    prefix = limit_argv(KernelLimits(max_processes=20), "k", host)
    (kernel / "cgroup.procs").unlink()
    (kernel / "cgroup.procs").mkdir()
    done = subprocess.run([*prefix, "echo", "ran"], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (126, "")

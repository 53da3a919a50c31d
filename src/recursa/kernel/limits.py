"""Per-kernel resource limits: memory and task count, held by a cgroup of the kernel's own.

A limit holds for the whole kernel: the ipykernel process, the shells and
programs it starts, and whatever those fork. A double fork or a new session
leaves the process group, never the cgroup. So every limited kernel gets a
cgroup of its own, named for it (``recursa-<name>``), and its command line
starts with a prefix (:func:`limit_argv`) that moves the launched process into
that cgroup before it execs the kernel: nothing runs for the kernel outside
it, not even for one fork.

Where the cgroup is made, first match wins:

- **cgroup v2**, when this process's cgroup offers every controller needed
  (``memory`` for ``memory_max``, ``pids`` for ``max_processes``): a child of
  it. A non-root cgroup that holds processes cannot hand controllers to its
  children (the no-internal-processes rule), so when enabling them is refused
  for that reason this process moves itself into a leaf child, ``recursa``, and
  from then on its parent is the base (a restarted daemon finds it the same).
- **cgroup v1**: a child of this process's cgroup in the ``memory`` and the
  ``pids`` hierarchy (each one needed).
- Else, or when the cgroup cannot be written: :class:`KernelError`, one line
  naming the cause and the fix. A configured limit is never silently dropped.

No limit configured means no cgroup work at all: :func:`limit_argv` returns
``[]`` at once. :func:`release_limits` removes a kernel's cgroups once it is
stopped, killing first whatever is still in them (a process the kernel started
in a new session outlives it otherwise). :func:`oom_kills` says whether the
memory limit killed something, for the note that tells of a kernel's death.

``max_processes`` is the cgroup's ``pids.max``: it counts tasks, threads
included, and an idle kernel runs about a dozen of its own. The memory limit
has no swap beyond it (``memory.swap.max`` 0, or ``memory.memsw`` equal to it).
Every function takes the cgroup layout as :class:`CgroupHost` (tests pass a
fake one); by default it is read from ``/proc/self``.

For the launcher: the prefix comes first, before a sandbox's own command (its
shell writes to ``/sys/fs/cgroup`` as this process sees it), so the sandbox
is inside the cgroup too; a kernel that cannot write the cgroup tree (a
sandbox's read-only filesystem) cannot leave it. Call :func:`release_limits`
when a kernel is stopped, never when one is let go to be reattached later.
Kernels' cgroups are found from this process's own cgroup: a daemon restarted
in another cgroup does not find those of the kernels it reattached.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from recursa.config import KernelConfig
from recursa.errors import KernelError

Controller = Literal["memory", "pids"]

CGROUP_PREFIX = "recursa-"
"""A kernel's cgroup is ``recursa-<name>``, a child of the base cgroup."""
DAEMON_LEAF = "recursa"
"""The v2 leaf this process moves into, so that its own cgroup may have children
with controllers (a name no kernel's cgroup can have: those all have a dash)."""
RELEASE_WAIT = 1.0
"""Seconds :func:`release_limits` waits for killed leftovers to leave a cgroup."""
_RELEASE_POLL = 0.01

ENTER_SCRIPT = (
    'for f; do [ "$f" = -- ] && break; echo $$ >"$f" || exit 126; shift; done; shift; exec "$@"'
)
"""The prefix's shell program: write its own pid into each ``cgroup.procs``
given before ``--`` (moving itself into those cgroups), then exec the rest of
its arguments, which keeps the pid. It forks nothing before that: ``echo`` is
a builtin and a redirection is an ``open`` in the shell itself."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_FIX = (
    "run the daemon where it may create cgroups (as root, or in a delegated cgroup: "
    "systemd-run --user -p Delegate=yes recursa daemon), or unset"
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KernelLimits:
    """What one kernel and everything it starts may use; None: no limit."""

    memory_bytes: int | None = None
    max_processes: int | None = None

    @classmethod
    def from_config(cls, config: KernelConfig) -> KernelLimits:
        return cls(memory_bytes=config.memory_max, max_processes=config.max_processes)

    @property
    def controllers(self) -> tuple[Controller, ...]:
        """The cgroup controllers these limits need; empty when there are none."""
        needed: list[Controller] = []
        if self.memory_bytes is not None:
            needed.append("memory")
        if self.max_processes is not None:
            needed.append("pids")
        return tuple(needed)

    @property
    def keys(self) -> str:
        """The configuration keys that are set, for a message."""
        names = {"memory": "memory_max", "pids": "max_processes"}
        return " and ".join(names[c] for c in self.controllers)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One mounted cgroup hierarchy: its mount point, and the directory of the
    cgroup this process is in."""

    mount: Path
    own: Path


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where this process's cgroups are: the v2 (unified) hierarchy if mounted,
    and the v1 hierarchies by controller."""

    unified: Hierarchy | None = None
    v1: Mapping[str, Hierarchy] = field(default_factory=dict)

    @classmethod
    def discover(
        cls,
        mountinfo: Path = Path("/proc/self/mountinfo"),
        cgroup: Path = Path("/proc/self/cgroup"),
    ) -> CgroupHost:
        """This process's layout, from its mount table and cgroup file. A
        hierarchy whose mount does not show this process's cgroup (another
        cgroup namespace's subtree) is left out."""
        try:
            mounts = mountinfo.read_text(encoding="utf-8")
            membership = cgroup.read_text(encoding="utf-8")
        except OSError:
            return cls()
        paths: dict[str, str] = {}  # "" for v2, else each v1 controller
        for line in membership.splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3:
                for controller in parts[1].split(",") if parts[1] else [""]:
                    paths[controller] = parts[2]
        unified: Hierarchy | None = None
        v1: dict[str, Hierarchy] = {}
        for root, point, fstype, options in _cgroup_mounts(mounts):
            if fstype == "cgroup2" and unified is None and "" in paths:
                unified = _hierarchy(point, root, paths[""])
            elif fstype == "cgroup":
                for controller in options:
                    if controller in paths and controller not in v1:
                        found = _hierarchy(point, root, paths[controller])
                        if found is not None:
                            v1[controller] = found
        return cls(unified=unified, v1=v1)


def limit_argv(limits: KernelLimits, name: str, host: CgroupHost | None = None) -> list[str]:
    """The argv prefix that starts a command inside kernel ``name``'s own cgroup,
    made now with ``limits`` set on it; ``[]`` when no limit is set (and no
    cgroup is touched). Calling it again for the same name (a restart) reuses
    the cgroup.

    Raises :class:`KernelError`, one line naming the cause and the fix, when a
    limit is set but cannot be enforced here; nothing is left behind then.
    """
    needed = limits.controllers
    if not needed:
        return []
    _check_name(name)
    host = host if host is not None else CgroupHost.discover()
    made: list[Path] = []
    try:
        dirs = _in_unified(host.unified, needed, name, made)
        if dirs is None:
            dirs = _in_v1(host, needed, name, made)
        for directory, controllers in dirs:
            _set_limits(directory, controllers, limits)
    except (OSError, _Unenforceable) as exc:
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                directory.rmdir()
        cause = _cause(exc) if isinstance(exc, OSError) else str(exc)
        keys = limits.keys
        raise KernelError(
            f"[kernel] {keys} cannot be enforced here: {cause}; {_FIX} {keys}"
        ) from None
    procs = [str(directory / "cgroup.procs") for directory, _ in dirs]
    return ["/bin/sh", "-c", ENTER_SCRIPT, "recursa-limits", *procs, "--"]


def release_limits(name: str, host: CgroupHost | None = None) -> None:
    """Remove kernel ``name``'s cgroups, if it has any. Call it once the kernel
    process is gone; a process still in them (one the kernel started in a new
    session or by a double fork) is killed first, waiting up to
    :data:`RELEASE_WAIT` seconds for it to go. Idempotent; a cgroup that cannot
    be removed is logged and left (a later call tries again)."""
    if _NAME.fullmatch(name) is None:
        return
    for directory in kernel_cgroups(name, host):
        _empty(directory)
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("kernel cgroup %s was not removed: %s", directory, exc.strerror)


def kernel_cgroups(name: str, host: CgroupHost | None = None) -> list[Path]:
    """The cgroup directories of kernel ``name`` that exist (none without limits)."""
    _check_name(name)
    host = host if host is not None else CgroupHost.discover()
    candidates: list[Path] = []
    if host.unified is not None:
        candidates.append(_unified_base(host.unified) / f"{CGROUP_PREFIX}{name}")
    candidates += [h.own / f"{CGROUP_PREFIX}{name}" for h in host.v1.values()]
    return [path for path in dict.fromkeys(candidates) if path.is_dir()]


def oom_kills(name: str, host: CgroupHost | None = None) -> int:
    """How many processes of kernel ``name`` its memory limit has killed so far
    (0 without a memory limit). Read it before :func:`release_limits`."""
    total = 0
    for directory in kernel_cgroups(name, host):
        for file in ("memory.events", "memory.oom_control"):  # v2, v1
            with contextlib.suppress(OSError, ValueError):
                for line in (directory / file).read_text(encoding="ascii").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        total += int(value)
    return total


# -- making the cgroup ------------------------------------------------------------------


def _in_unified(
    unified: Hierarchy | None, needed: tuple[Controller, ...], name: str, made: list[Path]
) -> list[tuple[Path, tuple[Controller, ...]]] | None:
    """The kernel's cgroup in the v2 hierarchy, made; None when this process's
    cgroup there does not offer every controller ``needed`` (then v1 may)."""
    if unified is None:
        return None
    base = _unified_base(unified)
    try:
        offered = _words(base / "cgroup.controllers")
    except FileNotFoundError:
        return None
    if not set(needed) <= offered:
        return None
    missing = set(needed) - _words(base / "cgroup.subtree_control")
    if missing:
        _delegate(unified, base, sorted(missing))
    return [(_make(base / f"{CGROUP_PREFIX}{name}", made), needed)]


def _delegate(unified: Hierarchy, base: Path, controllers: list[str]) -> None:
    """Enable ``controllers`` for the children of ``base``. When ``base`` holds
    processes that forbids it (EBUSY); if this process is the one there, it
    moves into the leaf :data:`DAEMON_LEAF` and tries again."""
    enable = " ".join(f"+{c}" for c in controllers)
    try:
        _write(base / "cgroup.subtree_control", enable)
        return
    except OSError as exc:
        if exc.errno != errno.EBUSY or unified.own != base:
            raise
    leaf = base / DAEMON_LEAF
    leaf.mkdir(exist_ok=True)
    _write(leaf / "cgroup.procs", str(os.getpid()))
    try:
        _write(base / "cgroup.subtree_control", enable)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        raise _Unenforceable(
            f"{base} holds processes besides this one, so its children cannot have "
            f"the {' and '.join(controllers)} controllers"
        ) from None


def _in_v1(
    host: CgroupHost, needed: tuple[Controller, ...], name: str, made: list[Path]
) -> list[tuple[Path, tuple[Controller, ...]]]:
    """The kernel's cgroups in the v1 hierarchies of ``needed``, made."""
    dirs: list[tuple[Path, tuple[Controller, ...]]] = []
    for controller in needed:
        hierarchy = host.v1.get(controller)
        if hierarchy is None:
            raise _Unenforceable(f"no cgroup hierarchy here has the {controller} controller")
        dirs.append((_make(hierarchy.own / f"{CGROUP_PREFIX}{name}", made), (controller,)))
    return dirs


def _set_limits(directory: Path, controllers: tuple[Controller, ...], limits: KernelLimits) -> None:
    """Write ``limits`` of ``controllers`` into one kernel cgroup, by the file
    names of its version. A limit file that is not there (the controller is
    not enabled for it) is refused, never created or skipped."""
    if "memory" in controllers and limits.memory_bytes is not None:
        memory = str(limits.memory_bytes)
        if (directory / "memory.max").exists():  # v2
            _write(directory / "memory.max", memory)
            if (directory / "memory.swap.max").exists():
                _write(directory / "memory.swap.max", "0")
        elif (directory / "memory.limit_in_bytes").exists():  # v1
            # memsw (memory + swap) may not be below the memory limit: set after it.
            _write(directory / "memory.limit_in_bytes", memory)
            if (directory / "memory.memsw.limit_in_bytes").exists():
                _write(directory / "memory.memsw.limit_in_bytes", memory)
        else:
            raise _Unenforceable(f"{directory} has no memory limit file")
    if "pids" in controllers and limits.max_processes is not None:
        _write(directory / "pids.max", str(limits.max_processes))


def _make(directory: Path, made: list[Path]) -> Path:
    try:
        directory.mkdir()
        made.append(directory)
    except FileExistsError:
        pass  # a restart of the same kernel: its cgroup is reused
    return directory


def _unified_base(unified: Hierarchy) -> Path:
    """The v2 cgroup kernels' cgroups go in: this process's, or its parent
    when this process is in the leaf it moved itself into."""
    own = unified.own
    return own.parent if own.name == DAEMON_LEAF and own != unified.mount else own


# -- releasing --------------------------------------------------------------------------


def _empty(directory: Path) -> None:
    """Kill every process in the cgroup ``directory`` and wait (a bounded time)
    until none is left in it."""
    deadline = time.monotonic() + RELEASE_WAIT
    while True:
        try:
            pids = [int(word) for word in (directory / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        if not pids or time.monotonic() >= deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(_RELEASE_POLL)


# -- small parts ------------------------------------------------------------------------


def _check_name(name: str) -> None:
    if _NAME.fullmatch(name) is None:
        raise KernelError(f"{name!r} cannot name a kernel cgroup: use letters, digits, . _ -")


class _Unenforceable(Exception):
    """A configured limit cannot be enforced here; the text is the cause."""


def _cause(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def _words(path: Path) -> set[str]:
    return set(path.read_text(encoding="ascii").split())


def _write(path: Path, text: str) -> None:
    """Write a cgroup control file, which must exist (never create one)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode("ascii"))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)


def _cgroup_mounts(mountinfo: str) -> Iterator[tuple[str, Path, str, list[str]]]:
    """``(root, mount point, fstype, super options)`` of each cgroup mount in
    ``/proc/self/mountinfo`` text."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        yield _unescape(fields[3]), Path(_unescape(fields[4])), tail[0], tail[2].split(",")


def _hierarchy(point: Path, root: str, path: str) -> Hierarchy | None:
    """This process's cgroup directory under a mount of ``root`` at ``point``;
    None when ``path`` lies outside what the mount shows."""
    relative = os.path.relpath(path, root)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    own = point if relative == os.curdir else point / relative
    return Hierarchy(mount=point, own=own)


def _unescape(text: str) -> str:
    """mountinfo writes a space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


__all__ = [
    "CGROUP_PREFIX",
    "DAEMON_LEAF",
    "ENTER_SCRIPT",
    "RELEASE_WAIT",
    "CgroupHost",
    "Hierarchy",
    "KernelLimits",
    "kernel_cgroups",
    "limit_argv",
    "oom_kills",
    "release_limits",
]

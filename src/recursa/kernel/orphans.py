"""Kernels nobody holds any more: found by their command lines, stopped, their
files removed.

A kernel outlives the process that launched it, so that a daemon killed with
SIGKILL can reattach its sessions' kernels when it starts again (the store
remembers which kernel each session holds). A kernel that no session held yet
when its launcher died (a warm spare of the pool, or one on its way to a
session) is remembered nowhere, and would run for ever: one more after every
crash.

So every connection file is named for the process that launched its kernel,
``kernel-<launcher pid>-<random>.json`` (:func:`connection_name`), and a
kernel's command line names its connection file. The kernels of a runtime
directory are found by their command lines (:func:`running_kernels`); one
whose launcher is gone and that nobody claims is an orphan, which
:func:`stop_orphans` kills (its whole process group) before removing its
connection file, log and sockets.

A kernel whose launcher still runs is never touched: it may belong to another
runtime on the same directory (``recursa run --no-daemon`` beside a daemon).
If the launcher's pid was taken by a new process since, the orphan is left
running: a leak, never a wrong kill. Connection files named the old way
(``kernel-<random>.json``) carry no launcher and are left alone too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
from collections.abc import Collection
from pathlib import Path
from uuid import uuid4

from recursa.errors import KernelError
from recursa.kernel.launch import kernel_dir_of, zygote_dir
from recursa.kernel.limits import release_limits
from recursa.kernel.pids import command_lines, is_alive
from recursa.kernel.watch import ProcessWatch

log = logging.getLogger(__name__)

ORPHAN_KILL_WAIT = 5.0
"""Seconds an orphan killed with SIGKILL has to be gone."""

_NAME = re.compile(r"kernel-(?P<launcher>\d+)-(?P<key>[0-9a-f]+)")


def connection_name() -> str:
    """A new kernel's file name stem, naming this process as its launcher."""
    return f"kernel-{os.getpid()}-{uuid4().hex[:12]}"


def launcher_of(connection_file: Path) -> int | None:
    """The pid of the process that launched the kernel of ``connection_file``;
    None for a name without one."""
    found = _NAME.fullmatch(connection_file.stem)
    return int(found["launcher"]) if found else None


def running_kernels(runtime_dir: Path) -> dict[int, Path]:
    """Live kernel processes launched with a connection file in ``runtime_dir``,
    by pid (a zombie counts as gone). A sandboxed kernel is three processes
    with its file on their command lines (``bwrap``, the sandbox's init and
    the kernel): the one launched, which leads their process group, stands
    for them."""
    runtime_dir = _absolute(runtime_dir)
    pattern = re.compile(re.escape(str(runtime_dir)) + r"/kernel-[^/\s]+\.json")
    by_file: dict[Path, list[int]] = {}
    for pid, args in command_lines():
        for arg in args:
            match = pattern.search(arg)
            if match is not None:
                by_file.setdefault(Path(match.group()), []).append(pid)
                break
    return {_launched(pids): path for path, pids in by_file.items()}


def _launched(pids: list[int]) -> int:
    """Of the processes of one kernel, the group leader (else the oldest pid)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                return pid
    return min(pids)


async def stop_orphans(runtime_dir: Path, *, keep: Collection[Path]) -> list[int]:
    """Kill every kernel of ``runtime_dir`` whose launcher is gone and whose
    connection file is not in ``keep`` (the files sessions hold), and remove
    the files such kernels leave (also of ones already dead). Returns the pids
    killed. Never raises for one kernel: what fails is logged and left.

    The scan is a few milliseconds of synchronous reads of the process
    table (:func:`~recursa.kernel.pids.command_lines`), done once at a
    daemon's start."""
    orphans, kept = find_orphans(runtime_dir, keep=keep)
    killed: list[int] = []
    for pid, connection_file in orphans.items():
        try:
            await _kill(pid, connection_file)
        except KernelError as exc:  # gone meanwhile, or its pid is someone else's now
            log.info("orphan kernel %d: %s", pid, exc)
            kept.add(connection_file)
            continue
        killed.append(pid)
        log.warning("stopped orphan kernel %d (%s)", pid, connection_file.name)
    _remove_litter(runtime_dir, kept)
    return killed


def find_orphans(runtime_dir: Path, *, keep: Collection[Path]) -> tuple[dict[int, Path], set[Path]]:
    """The orphans of ``runtime_dir`` by pid, and the connection files to keep:
    ``keep`` and those of every kernel that is not an orphan."""
    kept = {_absolute(path) for path in keep}
    orphans: dict[int, Path] = {}
    for pid, connection_file in running_kernels(runtime_dir).items():
        if connection_file in kept or not _launcher_gone(connection_file):
            kept.add(connection_file)
        else:
            orphans[pid] = connection_file
    return orphans, kept


def _remove_litter(runtime_dir: Path, kept: set[Path]) -> None:
    """Remove the files of kernels that are gone, launched by processes that
    are gone; and those of fork servers (:mod:`recursa.kernel.forkserver`)
    whose launcher is gone: their marker and log, and their directory once
    no kernel's directory is left in it (a zygote lives while its kernels do)."""
    with contextlib.suppress(OSError):
        for connection_file in _absolute(runtime_dir).glob("kernel-*.json"):
            if connection_file not in kept and _launcher_gone(connection_file):
                _remove_files(connection_file)
    with contextlib.suppress(OSError):
        for marker in _absolute(runtime_dir).glob("zygote-*.zygote"):
            if not _launcher_gone(marker.with_name("kernel" + marker.stem.removeprefix("zygote"))):
                continue
            # Where it is now, and where a version that did not leave room for
            # its kernels' names put it (beside the marker).
            places = {marker.parent / marker.stem}
            with contextlib.suppress(KernelError):  # no private temporary directory
                places.add(zygote_dir(marker.parent, marker.stem))
            for directory in places:
                with contextlib.suppress(OSError):
                    directory.rmdir()  # not while a kernel's directory is in it
            if not any(directory.exists() for directory in places):
                for path in (marker, marker.with_suffix(".log")):
                    with contextlib.suppress(OSError):
                        path.unlink()


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))


def _launcher_gone(connection_file: Path) -> bool:
    launcher = launcher_of(connection_file)
    if launcher is None or launcher == os.getpid():
        return False
    return not is_alive(launcher)


async def _kill(pid: int, connection_file: Path) -> None:
    # The pidfd taken by adopt() holds the very process whose command line was
    # checked, so a pid reused since the scan is never signalled.
    watch = ProcessWatch.adopt(pid, connection_file)
    try:
        watch.signal_group(signal.SIGKILL)
        await watch.wait_exit(ORPHAN_KILL_WAIT)
        if watch.is_alive():
            raise KernelError(f"kernel process {pid} did not exit when killed")
    finally:
        watch.close()


def _remove_files(connection_file: Path) -> None:
    """The connection file, the kernel's log, its unix sockets, its directory
    and its limits' cgroup."""
    sockets: list[Path] = []
    directory: Path | None = None
    try:
        info = json.loads(connection_file.read_text(encoding="utf-8"))
        if isinstance(info, dict) and info.get("transport") == "ipc":
            prefix = str(info["ip"])
            sockets = [
                Path(f"{prefix}-{port}")
                for key, port in info.items()
                if key.endswith("_port") and isinstance(port, int)
            ]
            directory = kernel_dir_of(Path(prefix), connection_file.stem)
    except (OSError, ValueError, KeyError):
        pass
    for path in (*sockets, connection_file.with_suffix(".log"), connection_file):
        with contextlib.suppress(OSError):
            path.unlink()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
    release_limits(connection_file.stem)


__all__ = [
    "ORPHAN_KILL_WAIT",
    "connection_name",
    "find_orphans",
    "launcher_of",
    "running_kernels",
    "stop_orphans",
]

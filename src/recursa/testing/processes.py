"""The processes a ``RECURSA_HOME`` left: its daemon, and its kernels (whose
command lines name their connection files under the home). For tests, demos
and benchmarks that must leave nothing running."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

KILL_WAIT = 10.0
"""Seconds to wait for killed processes to be gone."""


def home_processes(home: Path) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line names something under ``home``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(str(home) in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def kill_all(victims: list[psutil.Process]) -> None:
    """SIGKILL each (gone already is fine) and wait for them."""
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.kill()
    psutil.wait_procs(victims, timeout=KILL_WAIT)


def kill_home_processes(home: Path) -> None:
    """Kill every live process whose command line names the home."""
    kill_all(home_processes(home))


__all__ = ["home_processes", "kill_all", "kill_home_processes"]

"""Peak memory of a set of processes while something runs, for
``benchmarks/compare.py``: RSS and PSS sampled every 10 ms in a thread, with
each process's role, and the sums the comparison prints. :class:`Sampling`,
the thread that samples while a ``with`` block runs, serves the other
benchmarks' samplers too (``scale.py``, ``fanout.py``)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Self

import psutil


class Sampling:
    """A thread that calls :meth:`sample` every ``interval`` seconds while a
    ``with`` block runs (``first``: once at its start too)."""

    def __init__(self, interval: float, *, first: bool = False, name: str = "sampler") -> None:
        self.interval = interval
        self._first = first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        if self._first:
            self.sample()
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        raise NotImplementedError


class Peak(Sampling):
    """Samples the RSS and PSS of the processes ``pick`` returns (each with
    its role), every 10 ms, and keeps every sample."""

    def __init__(self, pick: Callable[[], list[tuple[str, psutil.Process]]]) -> None:
        super().__init__(0.01)
        self._pick = pick
        self.samples: list[list[tuple[str, int, int, int]]] = []
        """Per sample: (role, pid, RSS, PSS) of each process."""
        self.kernel: set[int] = set()
        """The run's kernel: its process and any below it (an exec'd kernel's
        pid is its sandbox's wrapper), set once the run has said which."""

    def sample(self) -> None:
        sample = []
        for role, process in self._pick():
            try:
                info = process.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            sample.append((role, process.pid, info.rss, getattr(info, "pss", info.rss)))
        self.samples.append(sample)

    @property
    def rss(self) -> int:
        return max((sum(p[2] for p in s) for s in self.samples), default=0)

    @property
    def pss(self) -> int:
        return max((sum(p[3] for p in s) for s in self.samples), default=0)

    @property
    def session_rss(self) -> int:
        """The peak summed RSS of the client, the daemon and the run's kernel."""
        own = {"client", "daemon"}
        return max(
            (sum(p[2] for p in s if p[0] in own or p[1] in self.kernel) for s in self.samples),
            default=0,
        )

    @property
    def parts(self) -> dict[str, int]:
        """RSS by role at the sample with the largest sum."""
        if not self.samples:
            return {}
        largest = max(self.samples, key=lambda s: sum(p[2] for p in s))
        parts: dict[str, int] = {}
        for role, pid, rss, _ in largest:
            role = "the run's kernel" if pid in self.kernel else role
            parts[role] = parts.get(role, 0) + rss
        return parts


def role_of(process: psutil.Process) -> str:
    """A process below recursa's daemon: its fork server, or other kernels
    (the run's kernel is told apart later, by its pid) and their wrappers."""
    try:
        return "fork server" if "recursa.kernel.zygote" in process.cmdline() else "other kernels"
    except psutil.Error:
        return "other kernels"


def kernel_pid(out: str) -> int | None:
    """The run's kernel, from the line its transcript shows when it is ready."""
    found = re.search(r"kernel ready: kernel pid (\d+)", out)
    return int(found[1]) if found else None


def tree_of(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []

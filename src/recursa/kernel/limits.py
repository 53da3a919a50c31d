"""Per-kernel resource limits (a stub: helper G's module replaces this file).

The interface is the agreed one: :class:`KernelLimits`, :func:`limit_argv`
and :func:`release_limits`. This stub enforces nothing: it sets no limit and
its argv prefix is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from recursa.config import KernelConfig


@dataclass(frozen=True, slots=True)
class KernelLimits:
    """Memory and process-count caps of one kernel; None is no cap."""

    memory_bytes: int | None = None
    max_processes: int | None = None

    @classmethod
    def from_config(cls, config: KernelConfig) -> KernelLimits:
        """The limits ``[kernel]`` sets: none in this stub."""
        return cls()


def limit_argv(limits: KernelLimits, name: str) -> list[str]:
    """The argv prefix that runs a kernel under ``limits``; empty here."""
    return []


def release_limits(name: str) -> None:
    """Remove what :func:`limit_argv` set up for kernel ``name``; nothing here."""


__all__ = ["KernelLimits", "limit_argv", "release_limits"]

"""Runs inside the kernel: the restore hooks, and ``on_restore`` that registers them.

The extension (:mod:`recursa.api.extension`) binds :func:`on_restore` in
the namespace for the model. :data:`restore_hooks` is the kernel's one
registry: a snapshot keeps it (by value), a restore replaces it and runs it
(:mod:`recursa.api.namespace`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

Hook = Callable[[], object]
"""A restore hook: no arguments; what it returns is ignored."""

restore_hooks: list[Hook] = []
"""The hooks, in the order they run."""

_H = TypeVar("_H", bound=Hook)


def on_restore(hook: _H) -> _H:
    """Register ``hook`` to run after this namespace is restored from a snapshot.

    A snapshot keeps what can be pickled; a hook recreates the rest: it
    reopens files, reconnects clients, restarts subprocesses. Hooks run with
    no arguments after every restore (when the session is loaded again, or
    its kernel was replaced), in the order they were registered; one that
    raises is reported and the others still run. Registering a function
    again, or another one of the same name, replaces it in its place. Returns
    ``hook``, so it also works as a decorator. Hooks travel in the snapshot,
    pickled by value: define them in a cell.
    """
    if not callable(hook):
        raise TypeError("on_restore() takes a function")
    name = _hook_name(hook)
    for i, known in enumerate(restore_hooks):
        if known is hook or ("<lambda>" not in name and _hook_name(known) == name):
            restore_hooks[i] = hook
            return hook
    restore_hooks.append(hook)
    return hook


def _hook_name(hook: object) -> str:
    return f"{getattr(hook, '__module__', '')}.{getattr(hook, '__qualname__', repr(hook))}"


__all__ = ["Hook", "on_restore", "restore_hooks"]

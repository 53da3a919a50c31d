"""Runs inside the kernel: snapshots of the namespace, and restores with their hooks.

The harness asks for them through :mod:`recursa.api.commands`, which calls
:func:`snapshot` or :func:`restore` with the kernel's registry of restore
hooks (:data:`recursa.api.hooks.restore_hooks`). The file format is
:mod:`recursa.api.snapfile`. Both import only the standard library, and
dill and IPython once a snapshot is taken or restored.

What a snapshot keeps: every user variable of the namespace, in its order:
not IPython's own (``In``, ``Out``, ``_``, ``_i3``, ``exit``...) nor the
harness's (``on_restore``), but ``_out``. Each is pickled on its own, so one
that cannot be pickled is listed with a one-line reason and the others are
kept. Modules are kept by reference (their name), functions and classes
defined in the kernel by value, open files not at all. Under the size cap,
the biggest values that do not fit are left out and listed. The restore
hooks are kept too, by value, so a new kernel runs the same ones.

Writes are atomic: a temporary file beside the target, synced, renamed over
it, the previous good snapshot kept as ``<path>.prev``; a restore that finds
the snapshot torn or damaged uses ``.prev``.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

from recursa.api.hooks import Hook
from recursa.api.snapfile import (
    HOOKS,
    VARIABLE,
    Corrupt,
    TooBig,
    Writer,
    commit,
    message,
    read,
    reason,
    sweep,
    temporary_name,
)

IPYTHON_NAMES = frozenset(
    {"In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh"}
    | {"exit", "quit", "get_ipython", "_exit_code"}
)
"""Names IPython keeps in the namespace for itself."""
_IPYTHON_PATTERN = re.compile(r"_i\d+|_\d+|__.*__|__recursa.*")
_PASSES = 4
"""How many times a snapshot over its cap is written again, without its biggest values."""
_KERNEL_SIDE = frozenset({"recursa.api.hooks"})
"""Modules whose functions the extension puts in the namespace (``on_restore``)."""


class SnapshotError(Exception):
    """No usable snapshot; the message says why, in one line."""


def user_names(shell: Any) -> list[str]:
    """The names a snapshot keeps, in the namespace's order."""
    hidden = shell.user_ns_hidden
    names = []
    for name, value in list(shell.user_ns.items()):
        if name in IPYTHON_NAMES or _IPYTHON_PATTERN.fullmatch(name):
            continue
        if name in hidden and hidden[name] is value:
            continue  # still IPython's own object
        if callable(value) and getattr(value, "__module__", None) in _KERNEL_SIDE:
            continue  # on_restore: every kernel's extension binds it
        names.append(name)
    return names


# -- snapshot ----------------------------------------------------------------------------


def snapshot(hooks: list[Hook], path: str, max_bytes: int) -> dict[str, Any]:
    """Write the namespace and ``hooks`` to ``path``; return the harness's report:
    the names kept, those skipped with why, the file's size."""
    import dill
    from IPython import get_ipython

    shell = get_ipython()
    target = os.path.abspath(path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    sweep(target)
    temporary = temporary_name(target)
    skipped: dict[str, str] = {}
    items = [(name, shell.user_ns[name]) for name in user_names(shell)]
    try:
        for _ in range(_PASSES):
            writer = Writer(temporary, dill=dill, main=shell.user_module, limit=max_bytes)
            try:
                kept, sizes = _write(writer, items, hooks, skipped, max_bytes)
            except BaseException:
                writer.abort()
                raise
            size = writer.close()
            if size <= max_bytes:
                break
            dropped = _biggest(kept, sizes, size - max_bytes)
            if not dropped:
                break  # only the hooks are left, and they are never dropped
            for name in dropped:
                skipped[name] = (
                    f"{sizes[name]:,} bytes pickled: among the biggest values, which did "
                    f"not fit in the snapshot cap of {max_bytes:,} bytes"
                )
            items = [(name, value) for name, value in items if name not in dropped]
        commit(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return {"names": kept, "skipped": skipped, "size": size}


def _write(
    writer: Writer,
    items: list[tuple[str, object]],
    hooks: list[Hook],
    skipped: dict[str, str],
    max_bytes: int,
) -> tuple[list[str], dict[str, int]]:
    """Add every value that pickles; the others go to ``skipped``, with why."""
    kept: list[str] = []
    sizes: dict[str, int] = {}
    too_big = f"more than the snapshot cap of {max_bytes:,} bytes"
    for name, value in items:
        if name in skipped:
            continue
        try:
            sizes[name] = writer.add(VARIABLE, name, value)
        except TooBig:
            skipped[name] = too_big
        except Exception as exc:
            skipped[name] = f"{type(value).__name__}: {message(exc)}"
        else:
            kept.append(name)
    good = []
    for hook in hooks:
        try:
            writer.check(hook)
        except TooBig:
            skipped[f"on_restore({_hook_name(hook)})"] = too_big
        except Exception as exc:
            skipped[f"on_restore({_hook_name(hook)})"] = message(exc)
        else:
            good.append(hook)
    try:
        writer.add(HOOKS, "on_restore", good)
    except TooBig:
        skipped["on_restore"] = f"the restore hooks: {too_big}"
    except Exception as exc:
        skipped["on_restore"] = f"the restore hooks: {message(exc)}"
    return kept, sizes


def _biggest(kept: list[str], sizes: dict[str, int], excess: int) -> set[str]:
    """The biggest values whose sizes together cover ``excess``."""
    dropped = set()
    for name in sorted(kept, key=lambda n: sizes[n], reverse=True):
        if excess <= 0:
            break
        dropped.add(name)
        excess -= sizes[name]
    return dropped


# -- restore -----------------------------------------------------------------------------


def restore(hooks: list[Hook], path: str) -> dict[str, Any]:
    """Replace the namespace's user variables with those of the snapshot at
    ``path`` (or of ``<path>.prev`` if it is unusable), make its hooks the
    registry ``hooks``, and run them in order; return the harness's report."""
    import dill
    from IPython import get_ipython

    shell = get_ipython()
    target = os.path.abspath(path)
    note = ""
    try:
        records = read(target, dill=dill, main=shell.user_module)
    except (Corrupt, OSError) as exc:
        why = _unusable(exc)
        try:
            records = read(f"{target}.prev", dill=dill, main=shell.user_module)
        except (Corrupt, OSError) as prev_exc:
            raise SnapshotError(
                f"the snapshot {target} is unusable ({why}), and so is the one before it "
                f"({_unusable(prev_exc)})"
            ) from None
        note = f"the last snapshot was unusable ({why}), so the one before it was restored"
    # Unpickled into a fresh dict first: the namespace changes only once the
    # whole file has been read.
    loaded: dict[str, object] = {}
    failed: dict[str, str] = {}
    hook_errors: list[str] = []
    restored_hooks: list[Hook] = []
    for kind, name, ok, value in records:
        if kind == HOOKS:
            if ok and isinstance(value, list):
                restored_hooks = value
            else:
                hook_errors.append(f"the restore hooks could not be restored: {value}")
        elif ok:
            loaded[name] = value
        else:
            failed[name] = str(value)
    namespace = shell.user_ns
    for name in user_names(shell):
        del namespace[name]
    namespace.update(loaded)
    hooks[:] = restored_hooks
    hook_errors.extend(run_hooks(hooks))
    return {"names": list(loaded), "failed": failed, "hook_errors": hook_errors, "note": note}


def run_hooks(hooks: list[Hook]) -> list[str]:
    """Run each hook in order; one line for each that failed."""
    errors = []
    for hook in list(hooks):
        try:
            result = hook()
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError("it returned an awaitable: restore hooks must be plain functions")
        except (Exception, SystemExit) as exc:
            errors.append(f"{_hook_name(hook)}: {reason(exc)}")
    return errors


def describe(exc: BaseException) -> str:
    """What the harness is told when a snapshot or restore fails."""
    return str(exc) if isinstance(exc, SnapshotError) else reason(exc)


def _unusable(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "missing"
    return str(exc) if isinstance(exc, Corrupt) else reason(exc)


def _hook_name(hook: object) -> str:
    return str(getattr(hook, "__qualname__", None) or repr(hook))


__all__ = [
    "IPYTHON_NAMES",
    "SnapshotError",
    "describe",
    "restore",
    "run_hooks",
    "snapshot",
    "user_names",
]

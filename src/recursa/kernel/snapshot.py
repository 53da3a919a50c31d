"""Snapshots of a kernel's namespace, from the harness's side.

The work happens inside the kernel (:mod:`recursa.kernel.namespace` and
:mod:`recursa.kernel.snapfile`, which this module sends there as source),
as one silent request: no output, no history, no execution count. The
outcome comes back as a payload of the reply, and becomes a
:class:`~recursa.kernel.types.SnapshotReport` or
:class:`~recursa.kernel.types.RestoreReport` here.

Every kernel's bootstrap creates the private module ``__recursa__`` from
:data:`HOOKS_SOURCE`: the registry of restore hooks, ``on_restore`` (which
the bootstrap also puts in the namespace, for the model), and ``call``, the
entry point of the requests built here.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from recursa.errors import KernelError
from recursa.kernel.types import RestoreReport, SnapshotReport

SNAPSHOT_TIMEOUT = 600.0
"""Seconds a snapshot or a restore may take in the kernel (a large
namespace is pickled at some hundreds of megabytes a second)."""

HOOKS_SOURCE = r'''
restore_hooks = []


def on_restore(hook):
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


def _hook_name(hook):
    return f"{getattr(hook, '__module__', '')}.{getattr(hook, '__qualname__', repr(hook))}"


_code = None


def call(request):
    # A snapshot or restore for the harness. Its code comes with the request
    # and is compiled once per kernel; the outcome goes back as a payload.
    global _code
    import json

    from IPython import get_ipython

    request = json.loads(request)
    if _code is None or _code["DIGEST"] != request["digest"]:
        scope = {"__name__": "__recursa__.namespace", "DIGEST": request["digest"]}
        for name, source in request["sources"]:
            exec(compile(source, f"<recursa-{name}>", "exec"), scope)
        _code = scope
    try:
        result = _code[request["op"]](restore_hooks, **request["args"])
    except Exception as exc:
        result = {"error": _code["describe"](exc)}
    get_ipython().payload_manager.write_payload({"source": "recursa", "result": result})
'''
"""The private module ``__recursa__`` of every kernel: the restore hooks'
registry, ``on_restore``, and ``call``."""


def _sources() -> list[tuple[str, str]]:
    package = resources.files("recursa.kernel")
    # The format first: the namespace code uses its names from the same scope.
    return [
        (name, (package / f"{name}.py").read_text(encoding="utf-8"))
        for name in ("snapfile", "namespace")
    ]


_SOURCES = _sources()
_DIGEST = hashlib.sha256(json.dumps(_SOURCES).encode()).hexdigest()[:16]

CALL = "__import__('__recursa__').call({payload})"
"""The request's code; ``{payload}`` is the kernel-side expression for its payload."""


def snapshot_request(path: Path, max_bytes: int) -> str:
    if max_bytes < 1:
        raise ValueError("max_bytes must be at least 1")
    return _request("snapshot", path=str(Path(path).absolute()), max_bytes=int(max_bytes))


def restore_request(path: Path) -> str:
    return _request("restore", path=str(Path(path).absolute()))


def _request(op: str, **args: object) -> str:
    # ensure_ascii: a path that is not valid UTF-8 travels as escapes.
    return json.dumps({"op": op, "args": args, "sources": _SOURCES, "digest": _DIGEST})


def snapshot_report(reply: dict[str, Any], path: Path) -> SnapshotReport:
    result = _result(reply, f"could not snapshot the kernel's namespace to {path}")
    return SnapshotReport(
        names=tuple(str(n) for n in result.get("names", ())),
        skipped={str(k): str(v) for k, v in dict(result.get("skipped", {})).items()},
        size=int(result.get("size", 0)),
    )


def restore_report(reply: dict[str, Any], path: Path) -> RestoreReport:
    result = _result(reply, f"could not restore the kernel's namespace from {path}")
    return RestoreReport(
        names=tuple(str(n) for n in result.get("names", ())),
        failed={str(k): str(v) for k, v in dict(result.get("failed", {})).items()},
        hook_errors=tuple(str(e) for e in result.get("hook_errors", ())),
        note=str(result.get("note", "")),
    )


def _result(reply: dict[str, Any], failure: str) -> dict[str, Any]:
    for item in reply.get("payload", ()):
        if isinstance(item, dict) and item.get("source") == "recursa":
            result = item.get("result")
            if not isinstance(result, dict):
                break
            if "error" in result:
                raise KernelError(f"{failure}: {result['error']}")
            return result
    raise KernelError(f"{failure}: the kernel sent no report")


__all__ = [
    "CALL",
    "HOOKS_SOURCE",
    "SNAPSHOT_TIMEOUT",
    "restore_report",
    "restore_request",
    "snapshot_report",
    "snapshot_request",
]

"""Runs inside the kernel: the entry point of the harness's silent commands.

The harness (:mod:`recursa.kernel.commands`) runs one fixed line of code in
the kernel, a call of :func:`call`; what to do travels as data, a JSON
request ``{"op": ..., "args": {...}}``, never as code. The outcome goes back
as a payload of the reply (``{"source": "recursa", "result": ...}``), where a
failure is ``{"error": "one line"}``: the harness turns it into its own
exception. The operations are :data:`OPERATIONS`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from recursa.api import client, hooks, namespace, skills

SOURCE = "recursa"
"""The ``source`` of the payload that carries a command's result."""


def _snapshot(path: str, max_bytes: int) -> dict[str, Any]:
    return namespace.snapshot(hooks.restore_hooks, path, max_bytes)


def _restore(path: str) -> dict[str, Any]:
    return namespace.restore(hooks.restore_hooks, path)


def _chdir(path: str, create: bool = False) -> dict[str, Any]:
    if create:  # a gateway's kernel: the same path on its own host, made when missing
        os.makedirs(path, mode=0o700, exist_ok=True)
    os.chdir(path)
    return {}


def _export_env(env: dict[str, str]) -> dict[str, Any]:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TypeError("environment names and values must be strings")
    os.environ.update(env)
    client.take_credentials()  # the API's socket and token: not for programs the kernel starts
    return {}


def _set_output(cell: int, text: str) -> dict[str, Any]:
    # ``_out`` is the model's to change: made again if it is not a dict.
    from IPython import get_ipython

    user_ns = get_ipython().user_ns
    if not isinstance(user_ns.get("_out"), dict):
        user_ns["_out"] = {}
    user_ns["_out"][int(cell)] = str(text)
    return {}


def _set_variable(name: str, text: str) -> dict[str, Any]:
    # A long input the harness places in the namespace (recursa.session.inputs).
    from IPython import get_ipython

    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"not a variable name: {name!r}")
    get_ipython().user_ns[name] = str(text)
    return {"chars": len(text)}


OPERATIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "snapshot": _snapshot,
    "restore": _restore,
    "bind_skills": skills.bind,
    "chdir": _chdir,
    "export_env": _export_env,
    "set_output": _set_output,
    "set_variable": _set_variable,
}
"""What the harness may ask, by name; each takes the request's ``args`` as
keyword arguments and returns a JSON-able result."""


def call(request: str, *, shell: Any = None) -> dict[str, Any]:
    """Run the command in ``request`` (JSON) and write its result as a payload
    of the running request's reply (to ``shell``, by default the kernel's
    own); return that result. An exception becomes ``{"error": ...}``."""
    try:
        data = json.loads(request)
        operation = OPERATIONS[data["op"]]
        args = data["args"]
        if not isinstance(args, dict):
            raise TypeError("a command's args must be an object")
        result = operation(**args)
    except Exception as exc:
        result = {"error": namespace.describe(exc)}
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    shell.payload_manager.write_payload({"source": SOURCE, "result": result})
    return result


__all__ = ["OPERATIONS", "SOURCE", "call"]

"""The harness's silent commands to a kernel: snapshots, restores, skills,
its directory, its environment, ``_out``.

Each runs as one silent request: no output, no history, no execution count.
The code run in the kernel is fixed; what varies travels as data. Each
command is an operation of :mod:`recursa.api.commands` in the kernel, asked
for with a JSON request (:func:`command_request`) that the one line
:data:`CALL` reads from the request's payload; its outcome comes back as a
payload of the reply (:func:`command_result`), and becomes a
:class:`~recursa.kernel.types.SnapshotReport` or
:class:`~recursa.kernel.types.RestoreReport` here. The skills prelude, which
its caller runs as code, carries its request as a literal
(:func:`inline_command`). Everything a kernel sends
back is checked: model code may have replaced any of it.

:class:`HarnessCommands` is the part of :class:`recursa.kernel.Kernel` that
sends them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recursa.errors import KernelError
from recursa.kernel import exchange
from recursa.kernel.driver import PAYLOAD_EXPR
from recursa.kernel.lifecycle import KernelProcess
from recursa.kernel.remote import GatewayProcess
from recursa.kernel.types import RestoreReport, SnapshotReport
from recursa.kernel.wire import JSONDict

SNAPSHOT_TIMEOUT = 600.0
"""Seconds a snapshot or a restore may take in the kernel (a large
namespace is pickled at some hundreds of megabytes a second)."""

ENTRY_POINT = "recursa.api.commands"
"""The kernel-side module whose ``call`` runs a command request."""

CALL = f"__import__({ENTRY_POINT!r}, fromlist=['call']).call({PAYLOAD_EXPR})"
"""The code of every command request; the request is its payload."""

_SOURCE = "recursa"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def command_request(op: str, **args: object) -> str:
    """The JSON request for operation ``op`` of :mod:`recursa.api.commands`."""
    # ensure_ascii: a path that is not valid UTF-8 travels as escapes.
    return json.dumps({"op": op, "args": args})


def inline_command(op: str, **args: object) -> str:
    """Code that runs operation ``op`` with the request as a string literal in
    it, for a caller that can pass no payload (a session's skills prelude).
    The literal is data: ``repr`` of a ``str`` evaluates back to exactly it."""
    request = command_request(op, **args)
    return f"__import__({ENTRY_POINT!r}, fromlist=['call']).call({request!r})"


def snapshot_request(path: Path, max_bytes: int) -> str:
    if max_bytes < 1:
        raise ValueError("max_bytes must be at least 1")
    return command_request("snapshot", path=str(Path(path).absolute()), max_bytes=int(max_bytes))


def restore_request(path: Path) -> str:
    return command_request("restore", path=str(Path(path).absolute()))


def snapshot_report(reply: Mapping[str, Any], path: Path) -> SnapshotReport:
    result = command_result(reply, f"could not snapshot the kernel's namespace to {path}")
    return SnapshotReport(
        names=tuple(str(n) for n in _items(result.get("names"))),
        skipped={str(k): str(v) for k, v in _mapping(result.get("skipped")).items()},
        size=_int(result.get("size")),
    )


def restore_report(reply: Mapping[str, Any], path: Path) -> RestoreReport:
    result = command_result(reply, f"could not restore the kernel's namespace from {path}")
    return RestoreReport(
        names=tuple(str(n) for n in _items(result.get("names"))),
        failed={str(k): str(v) for k, v in _mapping(result.get("failed")).items()},
        hook_errors=tuple(str(e) for e in _items(result.get("hook_errors"))),
        note=str(result.get("note", "")),
    )


def command_result(reply: Mapping[str, Any], failure: str) -> dict[str, Any]:
    """The result a command wrote in ``reply``'s payload. Raises
    :class:`KernelError` (``failure: why``) when it failed or sent none."""
    payload = reply.get("payload", ())
    for item in payload if isinstance(payload, list) else ():
        if isinstance(item, dict) and item.get("source") == _SOURCE:
            result = item.get("result")
            if not isinstance(result, dict):
                break
            if "error" in result:
                raise KernelError(f"{failure}: {result['error']}")
            return result
    raise KernelError(f"{failure}: the kernel sent no report")


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _mapping(value: object) -> dict[object, object]:
    return dict(value) if isinstance(value, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class HarnessCommands:
    """The silent commands of a :class:`recursa.kernel.Kernel`, serialized
    with its cells by its lock. A dead kernel is restarted first (by
    :meth:`_ensure_alive`), except for a snapshot."""

    _proc: KernelProcess | GatewayProcess
    _lock: asyncio.Lock
    _started: bool
    _cwd: Path

    def _check_open(self) -> None:
        raise NotImplementedError

    async def _ensure_alive(self) -> str:
        raise NotImplementedError

    async def chdir(self, cwd: Path) -> None:
        """Move the kernel into ``cwd`` (silently); restarts start there too.
        Raises :class:`KernelError` if the kernel cannot (no such directory)."""
        cwd = absolute(cwd)
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_alive()
            # A gateway's kernel works in the same path on its own host, made
            # there when missing (README: kernels behind a gateway).
            remote = isinstance(self._proc, GatewayProcess)
            failure = f"could not move the kernel to {cwd}"
            await self._command(failure, "chdir", path=str(cwd), create=remote)
            self._cwd = cwd

    async def export_env(self, env: Mapping[str, str]) -> None:
        """Set ``env`` in the kernel's ``os.environ``, silently, and in the
        environment every later restart starts with. The session exports the
        kernel-side API's socket and token this way once it has a kernel
        (DESIGN.md, Processes). Raises ValueError for a name or value an
        environment cannot hold, and :class:`KernelError` if the kernel
        cannot be reached."""
        values = dict(env)
        for name, value in values.items():
            if not (isinstance(name, str) and _ENV_NAME.fullmatch(name)):
                raise ValueError(f"not an environment variable name: {name!r}")
            if not isinstance(value, str) or "\0" in value:
                raise ValueError(f"the value of {name} must be a string without NUL")
        self._check_open()
        async with self._lock:
            self._check_open()
            self._proc.add_env(values)
            await self._ensure_alive()
            await self._command("could not set the kernel's environment", "export_env", env=values)

    async def run_silent(self, code: str, *, payload: str | None = None) -> None:
        """Run harness code in the kernel, silently (no output, history or
        execution count): the session binds skills this way. ``payload`` is
        read by the code as ``PAYLOAD_EXPR``. Any failure, an exception in the
        code included, raises :class:`KernelError`."""
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_alive()
            await self._proc.silent(code, payload=payload)

    async def set_output(self, cell: int, text: str) -> None:
        """Set ``_out[cell] = text`` in the kernel, silently. Used when the
        output shown to the model was truncated, so the whole text stays
        reachable from code."""
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_alive()
            failure = f"could not keep the output of cell {cell}"
            await self._command(failure, "set_output", cell=int(cell), text=text)

    async def set_variable(self, name: str, text: str) -> None:
        """Set the variable ``name`` to ``text`` in the kernel, silently. The
        text travels as the request's payload, never as code, so it lands in
        no cell's source and no history. Raises ValueError for a name that is
        not an identifier, :class:`KernelError` if the kernel cannot take it."""
        if not name.isidentifier():
            raise ValueError(f"not a variable name: {name!r}")
        self._check_open()
        async with self._lock:
            self._check_open()
            await self._ensure_alive()
            failure = f"could not set the variable {name}"
            deadline = asyncio.get_running_loop().time() + SNAPSHOT_TIMEOUT
            await self._command(failure, "set_variable", deadline=deadline, name=name, text=text)

    async def _command(
        self, failure: str, op: str, *, deadline: float | None = None, **args: object
    ) -> dict[str, Any]:
        """Run operation ``op`` of :mod:`recursa.api.commands`; its result, or
        :class:`KernelError` (``failure: why``). The caller holds the lock."""
        request = command_request(op, **args)
        reply = await self._proc.silent(CALL, payload=request, deadline=deadline)
        return command_result(reply, failure)

    async def snapshot(self, path: Path, *, max_bytes: int) -> SnapshotReport:
        """Write the namespace's user variables and restore hooks to ``path``
        (silently; :mod:`recursa.api.namespace` says how) and report what
        was kept. A value that cannot be pickled, or among the biggest past
        ``max_bytes``, is listed in ``skipped``, never fatal. The file is
        replaced atomically, the one before kept as ``<path>.prev``.

        A sandboxed kernel, which cannot see ``path``, writes the file in its
        own directory, and it is moved to ``path`` from here
        (:mod:`recursa.kernel.exchange`).

        Raises :class:`KernelError` if the file cannot be written, or the
        kernel is not running: a dead kernel is not restarted for this (an
        empty snapshot would replace the last good one).
        """
        snapshot_request(path, max_bytes)  # checks the arguments before the lock
        self._check_open()
        async with self._lock:
            self._check_open()
            if not (self._started and self._proc.is_alive()):
                raise KernelError("the kernel is not running: there is no namespace to snapshot")
            via = self._proc.exchange_dir
            written = path if via is None else exchange.outbox(via)
            reply = await self._call(snapshot_request(written, max_bytes))
            report = snapshot_report(reply, path)
            if via is not None:
                exchange.install(written, path)
        return report

    async def restore(self, path: Path) -> RestoreReport:
        """Replace the namespace's user variables with the snapshot at ``path``
        (or ``<path>.prev`` if it is torn or damaged), silently, then run its
        restore hooks in order. What cannot be unpickled is listed in
        ``failed``, each hook that raises in ``hook_errors``. A dead kernel
        is restarted first. Raises :class:`KernelError` if neither file is usable.
        A sandboxed kernel reads copies put in its own directory for it.
        """
        self._check_open()
        async with self._lock:
            self._check_open()
            # A restart here needs no note: the namespace is replaced anyway.
            await self._ensure_alive()
            via = self._proc.exchange_dir
            if via is None:
                reply = await self._call(restore_request(path))
            else:
                try:
                    reply = await self._call(restore_request(exchange.stage(path, via)))
                finally:
                    exchange.unstage(via)
        return restore_report(reply, path)

    async def _call(self, request: str) -> JSONDict:
        deadline = asyncio.get_running_loop().time() + SNAPSHOT_TIMEOUT
        return await self._proc.silent(CALL, payload=request, deadline=deadline)


def absolute(path: Path) -> Path:
    """``path`` made absolute against this process's directory, like the
    kernel's first start (symlinks kept)."""
    return Path(os.path.abspath(path))


__all__ = [
    "CALL",
    "ENTRY_POINT",
    "SNAPSHOT_TIMEOUT",
    "HarnessCommands",
    "absolute",
    "command_request",
    "command_result",
    "inline_command",
    "restore_report",
    "restore_request",
    "snapshot_report",
    "snapshot_request",
]

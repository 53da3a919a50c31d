"""Starting, finding and stopping the daemon process, from the client's side.

- :func:`start` spawns ``python -m recursa.daemon`` detached (its own
  session, stdout and stderr appended to ``daemon.log``), writes the provider
  credentials to its stdin as JSON and closes it, and waits (bounded) until
  it answers ``/v1/status``. The credential variables (every provider's
  ``api_key_env`` in the configuration, plus ``OPENAI_API_KEY`` and
  ``ANTHROPIC_API_KEY``) are removed from the environment it starts with, so
  they never appear in its ``/proc/PID/environ``. If it dies first, the last
  line it logged is the error.
  With ``reuse`` it returns the running daemon's state, starting one only
  when none answers. Concurrent starters are safe: the lock admits one
  daemon, and the others' starters wait for it.
- :func:`stop` asks the daemon to shut down and waits for its process to exit.
- :func:`status` asks the daemon; None when none answers. A dead daemon's
  leftovers (socket, state file) are removed once the lock shows it is gone.

A daemon that holds the lock but does not answer is starting (opening the
host) or stopping (closing it): these functions wait for either outcome, up
to their timeout. They read no environment themselves (``env`` is given,
normally ``os.environ`` from the CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.daemon.client import DaemonClient
from recursa.daemon.paths import (
    EXIT_ALREADY_RUNNING,
    DaemonLock,
    DaemonPaths,
    DaemonState,
    clear_stale,
    ensure_token,
    prepare_home,
    read_state,
)
from recursa.errors import AuthError, DaemonError, one_line
from recursa.protocol.wire import DaemonStatus

if TYPE_CHECKING:
    from recursa.config import Config

START_TIMEOUT = 30.0
STOP_TIMEOUT = 60.0
KILL_WAIT = 5.0
PROBE_TIMEOUT = 2.0
LOG_ROTATE_BYTES = 10 * 1024 * 1024
BUILTIN_CREDENTIALS = frozenset({"OPENAI_API_KEY", "ANTHROPIC_API_KEY"})
LAST_LINE_CHARS = 1000
"""The most of a dead daemon's last log line that an error message quotes."""

# Daemons this process spawned: kept so they are reaped (not left as zombies
# while we wait for them) and so Popen never warns that one still runs.
_spawned: dict[int, subprocess.Popen[bytes]] = {}


async def status(home: Path | str) -> DaemonStatus | None:
    """The running daemon's status, or None (and a dead daemon's files cleared)."""
    paths = DaemonPaths.for_home(home)
    _reap()
    found = await _probe(paths)
    if found is None:
        clear_stale(paths)
    return found


async def start(
    home: Path | str,
    *,
    env: Mapping[str, str],
    host_factory: str | None = None,
    timeout: float = START_TIMEOUT,  # noqa: ASYNC109 (a deadline for another process)
    reuse: bool = False,
) -> DaemonState:
    """Start a daemon for ``home`` and return its state once it answers.

    Raises :class:`DaemonError` when one already runs (``reuse``: returns its
    state instead), when it exits during start (with its last log line), or
    when it does not answer in time. ``host_factory`` (``module:function``)
    is for tests."""
    state, started = await _start(DaemonPaths.for_home(home), env, host_factory, timeout)
    if not started and not reuse:
        raise DaemonError(
            f"a daemon is already running for RECURSA_HOME {DaemonPaths.for_home(home).home} "
            f"(pid {state.pid})"
        )
    return state


async def stop(
    home: Path | str,
    *,
    force: bool = False,
    timeout: float = STOP_TIMEOUT,  # noqa: ASYNC109 (a deadline for another process)
) -> int:
    """Ask the daemon to shut down (``force``: skip snapshots, kill kernels) and
    wait for its process to exit; returns its pid. With ``force``, a daemon
    still there after ``timeout`` is killed. Raises :class:`DaemonError` when
    none runs, or (without ``force``) when it has not exited in time."""
    paths = DaemonPaths.for_home(home)
    _reap()
    deadline = time.monotonic() + timeout
    found = await _answering(paths, deadline)
    if found is None:
        clear_stale(paths)
        raise DaemonError(f"no daemon is running for RECURSA_HOME {paths.home}")
    pid = found.pid
    async with DaemonClient(paths.home, timeout=timeout, reconnect_window=0) as client:
        with contextlib.suppress(DaemonError):  # a connection cut short: it is going anyway
            await client.shutdown(force=force)
    if await _wait_exit(paths, pid, deadline):
        clear_stale(paths)
        return pid
    if not force:
        raise DaemonError(
            f"the daemon (pid {pid}) is still stopping after {timeout:g}s; "
            "recursa shutdown --force stops it at once"
        )
    if DaemonLock.probe(paths):  # still the daemon: it holds the lock
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not await _wait_exit(paths, pid, time.monotonic() + KILL_WAIT):
        raise DaemonError(f"the daemon (pid {pid}) survived SIGKILL")
    clear_stale(paths)
    return pid


def credential_names(config: Config) -> frozenset[str]:
    """The environment variables that hold provider credentials."""
    names = {p.api_key_env for p in config.providers.values() if p.api_key_env}
    return frozenset(names) | BUILTIN_CREDENTIALS


# -- internals ------------------------------------------------------------------------------


async def _start(
    paths: DaemonPaths,
    env: Mapping[str, str],
    host_factory: str | None,
    timeout: float,  # noqa: ASYNC109 (a deadline for another process)
) -> tuple[DaemonState, bool]:
    """(state, whether this call started it)."""
    prepare_home(paths)
    _reap()
    deadline = time.monotonic() + timeout
    found = await _answering(paths, deadline)
    if found is not None:
        return _state_of(paths, found), False
    clear_stale(paths)
    ensure_token(paths)
    proc, log_offset = _spawn(paths, env, host_factory)
    delay = 0.01
    while True:
        found = await _probe_quietly(paths)
        if found is not None:
            return _state_of(paths, found), found.pid == proc.pid
        code = proc.poll()
        if code == EXIT_ALREADY_RUNNING:
            # Another starter's daemon won the lock: it is the one to wait for.
            found = await _answering(paths, deadline)
            if found is None:
                raise DaemonError(f"the daemon for RECURSA_HOME {paths.home} stopped as it started")
            return _state_of(paths, found), False
        if code is not None:
            line = _last_line(paths.log, log_offset) or "no output"
            raise DaemonError(
                f"the daemon exited during start (status {code}): {line} (see {paths.log})"
            )
        if time.monotonic() >= deadline:
            raise DaemonError(
                f"the daemon (pid {proc.pid}) did not answer within {timeout:g}s (see {paths.log})"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def _spawn(
    paths: DaemonPaths, env: Mapping[str, str], host_factory: str | None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the daemon process; returns it and where its log output begins."""
    # Here, not at the top: a call to a running daemon does not read (or build
    # the schema of) the configuration; the daemon it starts reads it itself.
    from recursa.config import load_config

    home = str(paths.home)
    config = load_config(env, overrides={"RECURSA_HOME": home})
    names = credential_names(config)
    secrets = {name: env[name] for name in sorted(names) if env.get(name)}
    child_env = {k: v for k, v in env.items() if k not in names}
    child_env["RECURSA_HOME"] = home
    argv = [sys.executable, "-m", "recursa.daemon", "--home", home]
    if host_factory is not None:
        argv += ["--host-factory", host_factory]
    _rotate_log(paths.log)
    log = os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        offset = os.fstat(log).st_size
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            env=child_env,
            cwd=home,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise DaemonError(f"cannot start the daemon: {exc.strerror}") from exc
    finally:
        os.close(log)
    _spawned[proc.pid] = proc
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(secrets).encode())
    except BrokenPipeError:
        pass  # it died already; the log says why
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    return proc, offset


async def _probe(paths: DaemonPaths) -> DaemonStatus | None:
    """The daemon's status; None when nothing accepts a connection. A refused
    token says which home and which token file."""
    async with DaemonClient(paths.home, timeout=PROBE_TIMEOUT, reconnect_window=0) as client:
        try:
            return await client.probe()
        except AuthError as exc:
            raise AuthError(
                f"the daemon for RECURSA_HOME {paths.home} refused the token in "
                f"{paths.token} ({exc})"
            ) from None


async def _probe_quietly(paths: DaemonPaths) -> DaemonStatus | None:
    """As :func:`_probe`, but a daemon too busy to answer also counts as not yet.
    A refused token is raised at once: waiting would not change the answer (it
    cost a wrong token 30 s and a message blaming the daemon)."""
    try:
        return await _probe(paths)
    except AuthError:
        raise
    except DaemonError:
        return None


async def _answering(paths: DaemonPaths, deadline: float) -> DaemonStatus | None:
    """The daemon's status once it answers, or None once the lock is free.
    While a daemon holds the lock without answering (starting or stopping),
    wait, up to ``deadline``."""
    delay = 0.01
    while True:
        found = await _probe_quietly(paths)
        if found is not None:
            return found
        if not DaemonLock.probe(paths):
            return None
        if time.monotonic() >= deadline:
            raise DaemonError(
                f"a daemon holds the lock for RECURSA_HOME {paths.home} but does not answer "
                f"(see {paths.log})"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.25)


async def _wait_exit(paths: DaemonPaths, pid: int, deadline: float) -> bool:
    delay = 0.01
    while _alive(pid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    return True


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (as :func:`~recursa.kernel.pids.is_alive`
    decides); a daemon this process spawned is reaped once it is gone."""
    # Imported here: the kernel package (jupyter_client, psutil) is not a
    # client's to load for a call to a running daemon.
    from recursa.kernel.pids import is_alive

    proc = _spawned.get(pid)
    if proc is not None:
        if proc.poll() is None:
            return True
        del _spawned[pid]
        return False
    return is_alive(pid)


def _reap() -> None:
    for pid, proc in list(_spawned.items()):
        if proc.poll() is not None:
            del _spawned[pid]


def _state_of(paths: DaemonPaths, found: DaemonStatus) -> DaemonState:
    state = read_state(paths)
    if state is not None and state.pid == found.pid:
        return state
    return DaemonState(
        pid=found.pid,
        socket=os.fspath(paths.socket),
        started_at=found.started_at,
        version=found.version,
        protocol=found.protocol,
    )


def _rotate_log(log: Path) -> None:
    with contextlib.suppress(OSError):
        if log.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(log, log.with_name(log.name + ".1"))


def _last_line(log: Path, offset: int) -> str:
    """The last non-empty line written to ``log`` after ``offset``."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return one_line(lines[-1], limit=LAST_LINE_CHARS) if lines else ""


__all__ = [
    "BUILTIN_CREDENTIALS",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "credential_names",
    "start",
    "status",
    "stop",
]

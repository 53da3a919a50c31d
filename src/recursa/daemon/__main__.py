"""The daemon process: ``python -m recursa.daemon --home PATH``.

Started detached by :func:`recursa.daemon.process.start`, which hands it the
provider credentials as a JSON object on stdin (so they are never in its
``/proc/PID/environ``) and sends its stdout and stderr to ``daemon.log``.

In order: make the process non-dumpable; take the home's lock (another
daemon holds it → one line, exit :data:`~recursa.daemon.paths.EXIT_ALREADY_RUNNING`);
read the credentials from stdin (skipped when stdin is a terminal) and
resolve the configuration with them; bind the people's socket and the
kernel socket (where kernels reach the kernel API: ``RECURSA_API_SOCKET``,
see :mod:`recursa.daemon.paths`); open the host; write
the state file and serve until a stop (the kernels' routes too, when the host
serves them: :func:`~recursa.daemon.host.served`);
close the host; release the lock.

Signals: SIGTERM or SIGINT while serving stops gracefully (see
:mod:`recursa.daemon.server`); before serving, they unwind the start (closing
whatever was opened); while the host closes, they force it
(``shutdown(force=True)``).

A deliberate failure is one line on stderr and the error's exit code; a bug
is its traceback followed by one line. ``--host-factory module:function``
replaces :func:`recursa.runtime.host.open_host` (for tests: a fake host in a
real daemon process); the function takes the :class:`~recursa.config.Config`
and returns the host and its async close function.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TextIO, cast

from recursa import heap
from recursa.config import Config, load_config
from recursa.daemon.errormap import MAX_MESSAGE_CHARS
from recursa.daemon.harden import harden_process
from recursa.daemon.host import Host, served
from recursa.daemon.paths import (
    EXIT_ALREADY_RUNNING,
    LOCK_WAIT,
    DaemonLock,
    DaemonPaths,
    ensure_token,
    prepare_home,
    read_state,
)
from recursa.daemon.server import DaemonServer, bind_kernel_socket, bind_socket
from recursa.errors import ConfigError, DaemonError, RecursaError, one_line
from recursa.protocol.wire import Shutdown
from recursa.redact import redact_logs
from recursa.supervisor import Supervisor


class HostFactory(Protocol):
    """Opens the daemon's host; ``api_socket`` is the daemon's kernel socket,
    where kernels reach the kernel API. Returns the host (:func:`~recursa.daemon.host.served`
    tells its audiences apart) and the function that closes it."""

    def __call__(
        self, config: Config, *, api_socket: Path
    ) -> Awaitable[tuple[object, Callable[[], Awaitable[None]]]]: ...


DEFAULT_HOST_FACTORY = "recursa.runtime.host:open_host"
MAX_SECRETS_BYTES = 1024 * 1024
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

logger = logging.getLogger("recursa.daemon")

UNUSED_MODULES = ("aiohttp",)
"""Modules the daemon never uses but the provider SDKs import when they are
installed: aiohttp (inspect_ai brings it) backs the SDKs' optional
``DefaultAioHttpClient``, and recursa's calls go through their default
httpx2 client. Left out, the daemon is smaller (9.5 MiB of RSS, measured
with openai 3.60) and its first model call comes ~90 ms sooner."""


def leave_out_unused_modules() -> None:
    """Make importing :data:`UNUSED_MODULES` fail in this process (the SDKs
    then take them as not installed). The daemon's decision alone: another
    program's process (recursa inside Inspect) may need them."""
    for name in UNUSED_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recursa.daemon", description="The recursa daemon (started by the CLI)."
    )
    parser.add_argument("--home", required=True, type=Path, help="the RECURSA_HOME to serve")
    parser.add_argument(
        "--host-factory",
        default=DEFAULT_HOST_FACTORY,
        metavar="MODULE:FUNCTION",
        help="what opens the host (for tests; default: %(default)s)",
    )
    args = parser.parse_args(argv)
    hardened = harden_process()
    leave_out_unused_modules()
    # Until the server handles signals itself, SIGTERM unwinds like Ctrl-C, so
    # a host opened meanwhile is still closed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO: a line and a write per model call (about
    # 0.05 ms of a step), for what the store already records. Retries and
    # failures are logged by recursa.session.gateway, as warnings.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    redact_logs()  # URL credentials never reach daemon.log, whoever logs them
    if not hardened:
        logger.warning("could not make the daemon non-dumpable: same-user processes can read it")
    paths = DaemonPaths.for_home(args.home)
    lock = DaemonLock(paths)
    try:
        prepare_home(paths)
        if not lock.acquire(wait=LOCK_WAIT):
            state = read_state(paths)
            pid = f" (pid {state.pid})" if state else ""
            _say(f"a daemon is already running for RECURSA_HOME {paths.home}{pid}")
            return EXIT_ALREADY_RUNNING
        secrets = read_secrets(sys.stdin)
        config = load_config(overrides={**secrets, "RECURSA_HOME": str(paths.home)})
        redact_logs(config.secrets)
        factory = load_host_factory(args.host_factory)
        asyncio.run(_run(paths, config, factory))
        return 0
    except RecursaError as exc:
        _say(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        _say("stopped by a signal before it was serving")
        return 1
    except Exception as exc:
        logger.exception("the daemon failed")
        _say(
            f"internal error: {one_line(exc, typed=True, first_line=True, limit=MAX_MESSAGE_CHARS)}"
        )
        return 1
    finally:
        lock.release()


async def _run(paths: DaemonPaths, config: Config, factory: HostFactory) -> None:
    """Serve until a stop, then close the host. The daemon's own background
    tasks (signal handling, the stop watcher) run under one supervisor,
    closed last; the host's run under the host's."""
    # Both before the host starts threads: the umask is process-wide.
    sock = bind_socket(paths)
    try:
        kernel_sock = bind_kernel_socket(paths)
    except BaseException:
        sock.close()
        raise
    try:
        async with Supervisor("daemon", logger=logger) as tasks:
            token = ensure_token(paths)
            opened, close = await factory(config, api_socket=paths.kernel_socket)
            host, kernel_host = served(opened)
            try:
                heap.enable()  # the daemon's heap is its own to freeze
                heap.settle()  # what the daemon imported lives as long as it does
                if kernel_host is None:
                    logger.warning("the host serves no kernel routes: kernels cannot reach it")
                server = DaemonServer(
                    host,
                    paths=paths,
                    sock=sock,
                    kernel_sock=kernel_sock,
                    token=token,
                    kernel_host=kernel_host,
                    tasks=tasks,
                )
                await server.serve()
            finally:
                _force_on_signal(host, tasks)
                await close()
    finally:
        sock.close()
        kernel_sock.close()


def _force_on_signal(host: Host, tasks: Supervisor) -> None:
    """While the host closes, a signal means: now (``shutdown(force=True)``)."""
    loop = asyncio.get_running_loop()

    async def shutdown_now() -> None:
        try:
            await host.shutdown(Shutdown(force=True))
        except Exception:
            logger.exception("the host failed to stop at once")

    def force() -> None:
        logger.warning("signal while stopping: stopping now (force)")
        if not tasks.closed:
            tasks.start(shutdown_now(), name="shutdown now")

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, force)


def read_secrets(stream: TextIO | None) -> dict[str, str]:
    """The credentials the starter wrote to stdin: a JSON object of variable
    names to values. Nothing (a terminal, an empty pipe) is none."""
    if stream is None or stream.closed or stream.isatty():
        return {}
    try:
        text = stream.read(MAX_SECRETS_BYTES + 1)
    finally:
        stream.close()
    if not text.strip():
        return {}
    if len(text) > MAX_SECRETS_BYTES:
        raise ConfigError("the credentials on stdin are too large")
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError("the credentials on stdin are not JSON") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and _VARIABLE.fullmatch(k) and isinstance(v, str)
        for k, v in data.items()
    ):
        raise ConfigError("the credentials on stdin must map variable names to strings")
    return cast(dict[str, str], data)


def load_host_factory(spec: str) -> HostFactory:
    """``module:function`` → the function, or a one-line :class:`DaemonError`."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise DaemonError(f"--host-factory must be MODULE:FUNCTION, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DaemonError(f"cannot import the host factory {spec}: {exc}") from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise DaemonError(f"{spec} is not a function")
    return cast(HostFactory, factory)


def _say(message: str) -> None:
    print(f"recursa daemon: {message}", file=sys.stderr, flush=True)


__all__ = [
    "DEFAULT_HOST_FACTORY",
    "UNUSED_MODULES",
    "HostFactory",
    "leave_out_unused_modules",
    "load_host_factory",
    "main",
    "read_secrets",
]


if __name__ == "__main__":
    sys.exit(main())

"""The fork server's own process: a Python that has imported ipykernel, IPython
and recursa's kernel-side modules once, and forks a kernel for each request.

Run as ``python -m recursa.kernel.zygote <padding>`` by
:class:`recursa.kernel.forkserver.ForkServer`, inside the sandbox of the
kernels it serves, with a ``SOCK_SEQPACKET`` unix socket as its standard
input. The daemon side of that socket has ``SO_PASSCRED`` set, so every
message carries its sender's pid as the daemon sees it (across the sandbox's
PID namespace): that is how the daemon learns a forked kernel's pid.

The protocol, one JSON object per message:

- zygote -> daemon: ``{"ready": true}`` once imports are done (or
  ``{"error": "..."}`` and exit); ``{"id": N, "error": "..."}`` when a fork
  could not be made; ``{"id": N, "exit": status}`` when the kernel forked for
  request N ended (its wait status).
- daemon -> zygote: ``{"id": N, "cwd": ..., "env": {...}, "argv": [...],
  "connection": {...}, "cmdline": "..."}`` with the kernel's log file as an
  attached descriptor (``SCM_RIGHTS``).
- forked kernel -> daemon: ``{"id": N, "forked": true}`` once it runs, and
  ``{"id": N, "bound": true}`` once its sockets are bound, sent by the child
  itself, so that their credentials name it.

Invariants the zygote keeps:

- **No threads at fork.** It starts none; before each fork it checks, and a
  zygote that finds a second thread answers every request with an error (the
  daemon then falls back to launching kernels the usual way).
- **Reaping and no leftovers.** The zygote is a child subreaper (and, in a
  sandbox, the PID namespace's init), each kernel is a subreaper of its own:
  what a kernel starts stays below it while it lives, whatever it detaches;
  once a kernel has died, every process that then comes up to the zygote is
  killed. That is what the sandbox's per-kernel PID namespace gives an exec'd
  kernel: its stop ends everything it started.
- **Lifetime.** It serves requests until the daemon's end of the socket
  closes, and then lives on until its last kernel has ended (kernels outlive
  a crashed daemon; a restarted one reattaches to them by pid).

In the forked child (:func:`_become_kernel`): a new session (its own
process group, which the daemon signals: SIGINT interrupts, SIGKILL stops),
default signal handlers, the environment replaced by the request's, its
working directory, its log as stdout and stderr, its command line rewritten
in place to name its connection file (as an exec'd kernel's does, so
adoption and the orphan scan recognise it; the zygote is started with
``<padding>`` to leave room), then ipykernel's application, given the
connection info directly: no connection file is read or written.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

PRELOAD = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "IPython",
    "IPython.core.interactiveshell",
    "jupyter_client.session",
    "zmq",
    "tornado.ioloop",
    "asyncio",
    "recursa.api.extension",
    "recursa.api.kernelapp",
    # What ipykernel and IPython import while a kernel starts (its debugger
    # support, without debugpy: see main(); pdb, pydoc, ...): measured on a
    # forked kernel's sys.modules.
    "ipykernel.debugger",
    "pdb",
    "pydoc",
    "tornado.gen",
    "tornado.locks",
    "tornado.queues",
    "http.server",
    "xmlrpc.client",
    "xmlrpc.server",
    "IPython.extensions",
    "IPython.extensions.storemagic",
    "IPython.core.completerlib",
    "IPython.core.debugger",
    "IPython.core.oinspect",
    "IPython.utils.wildcard",
    "tornado.platform.asyncio",
    "sqlite3",
    "faulthandler",
    "encodings.idna",
)
"""Modules imported once in the zygote, so that every kernel finds them
loaded; none may start a thread (the zygote checks)."""

MAX_MESSAGE = 1 << 20
PADDING_CHARS = 2048
"""The length of the placeholder argument that leaves room on the zygote's
command line for a kernel's (which names its connection file)."""
PADDING_CHAR = "_"

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        # Its kernels share its PID namespace: none may read its memory.
        _prctl(_PR_SET_DUMPABLE, 0)
        # As recursa.api.launcher does for an exec'd kernel: no debugpy (the
        # Jupyter debugger, never used; ~15 MB a kernel), so ipykernel runs
        # without its debugger.
        sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]
        for name in PRELOAD:
            importlib.import_module(name)
        if threading.active_count() != 1:
            raise RuntimeError(f"{threading.active_count()} threads after the imports")
    except BaseException as exc:
        _send(control, {"error": f"{type(exc).__name__}: {exc}"})
        raise SystemExit(1) from None
    # Objects made so far are never collected: a collection would write to
    # their pages and unshare them in every kernel.
    gc.freeze()
    Zygote(control).serve()


class Zygote:
    """The request loop: fork on request, reap, and clean up after kernels."""

    def __init__(self, control: socket.socket) -> None:
        self.control: socket.socket | None = control
        self.kernels: dict[int, int] = {}
        """Live kernels: pid (as the zygote sees it) -> request id."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._wakeup = read
        self._wakeup_write = write
        signal.set_wakeup_fd(write)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def serve(self) -> None:
        _send(self.control, {"ready": True})
        while self.control is not None or self.kernels:
            waiting = [self._wakeup] + ([self.control.fileno()] if self.control else [])
            try:
                ready = _select(waiting)
            except InterruptedError:
                continue
            if self._wakeup in ready:
                os.read(self._wakeup, 4096)
            self._reap()
            if self.control is not None and self.control.fileno() in ready:
                self._take_request()

    def _take_request(self) -> None:
        assert self.control is not None
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.control, MAX_MESSAGE, 4)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        if not data:
            self.control.close()  # the daemon is gone: serve no more
            self.control = None
            for fd in fds:
                os.close(fd)
            return
        request: dict[str, Any] = {}
        try:
            request = json.loads(data)
            if len(fds) != 3:
                raise ValueError("a request needs its log file, secrets and pipe attached")
            if threading.active_count() != 1:
                raise RuntimeError("the zygote runs threads; it cannot fork safely")
            pid = os.fork()
        except Exception as exc:
            for fd in fds:
                os.close(fd)
            _send(self.control, {"id": request.get("id"), "error": f"{exc}"})
            return
        if pid == 0:
            _become_kernel(self.control, request, fds, self._wakeup, self._wakeup_write)
        for fd in fds:  # never read here: the secrets are the kernel's alone
            os.close(fd)
        self.kernels[pid] = int(request["id"])

    def _reap(self) -> None:
        reaped = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped = True
            ident = self.kernels.pop(pid, None)
            if ident is not None and self.control is not None:
                _send(self.control, {"id": ident, "exit": status})
        if reaped:
            self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        """Kill every child of the zygote that is not a live kernel: what a
        dead kernel started (each kernel is a subreaper, so nothing of a live
        one comes up here). Their own children come up next, and go the same way."""
        me = os.getpid()
        for pid in _children_of(me):
            if pid not in self.kernels:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _become_kernel(
    control: socket.socket, request: dict[str, Any], fds: list[int], *zygote_fds: int
) -> None:
    """The forked child: never returns (the process exits with the kernel).

    ``fds`` are its log file, the memfd of its secrets (its environment and
    connection, key included) and the pipe it says "bound" on. The zygote's
    socket is closed before any IPython code runs, and that code reads no
    configuration or startup file: a sibling that shares this /tmp could
    have planted one in the IPython directory."""
    log_fd, secret_fd, bound_fd = fds
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in zygote_fds:
            os.close(fd)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        # Siblings share a PID namespace: none may read this one's memory,
        # environment or descriptors through /proc or ptrace (the session's
        # token is in them once the harness has exported it).
        _prctl(_PR_SET_DUMPABLE, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        with os.fdopen(secret_fd, "rb") as secrets_in:
            secrets = json.loads(secrets_in.read())
        # Before the daemon learns the pid: it checks the command line then.
        set_command_line(request["cmdline"])
        _send(control, {"id": request["id"], "forked": True})
        control.close()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(secrets["env"])
        sys.argv = ["recursa.api.launcher", *request["argv"]]
        app = kernel_app(secrets["connection"], request["argv"])
        os.write(bound_fd, b"b")
        os.close(bound_fd)
        app.start()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def kernel_app(connection: dict[str, Any], argv: list[str]) -> Any:
    """ipykernel's application on ``connection`` (a connection file's
    content), with ``argv`` as its command line options, initialized: its
    sockets are bound. Its ``start()`` runs the kernel."""
    # The kernel-side application (api is the layer above; this function runs
    # in the zygote's fork, a kernel's process).
    from recursa.api.kernelapp import KernelApp

    class ForkedKernelApp(KernelApp):
        """Takes its connection info from the request, and writes no file."""

        def init_connection_file(self) -> None:
            self.load_connection_info(cast("KernelConnectionInfo", connection))

        def write_connection_file(self, **kwargs: Any) -> None:
            pass

        def load_config_file(self, *args: Any, **kwargs: Any) -> None:
            """None: the IPython directory is in a /tmp its siblings share."""

        def _run_startup_files(self) -> None:
            """None, for the same reason."""

    app = ForkedKernelApp.instance()
    app.initialize(argv)  # type: ignore[no-untyped-call]
    return app


def set_command_line(text: str) -> None:
    """Write ``text`` (arguments joined by NUL) over this process's command
    line as ``/proc`` shows it, in the memory the original arguments occupy;
    the rest is cleared. Raises ValueError if it does not fit."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 48 and 49 of stat (arg_start, arg_end); the split starts at field 3.
    start, end = int(fields[45]), int(fields[46])
    data = text.encode() + b"\0"
    if len(data) > end - start:
        raise ValueError("the command line does not fit")
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _select(fds: list[int]) -> set[int]:
    import select

    ready, _, _ = select.select(fds, [], [])
    return set(ready)


def _send(control: socket.socket | None, message: dict[str, Any]) -> None:
    if control is None:
        return
    with contextlib.suppress(OSError):  # the daemon is gone: nobody to tell
        control.send(json.dumps(message).encode())


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


if __name__ == "__main__":
    main()

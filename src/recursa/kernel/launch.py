"""How a kernel process is launched: its command line, its manager and its bootstrap.

The kernel is ipykernel run by a given Python, always from this fixed command
line, never from a kernelspec found on disk: a user's ``python3`` kernelspec
(with its own ``env`` stanza or interpreter) must not change what an agent's
kernel is or what environment it sees.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

from recursa.errors import KernelError
from recursa.kernel.snapshot import HOOKS_SOURCE
from recursa.kernel.wire import IOPUB_QUEUE_MESSAGES, shared_context

MAX_IPC_PATH_BYTES = 96
"""Longest socket path prefix: unix socket paths must fit ``sun_path`` (108
bytes on Linux, 104 on macOS) with the ``-N`` port suffix and zeromq's own
margin."""

OUTPUT_CHUNK_CHARS = 262_144
"""Characters a kernel's output stream holds before the writer waits for them
to be sent: the largest stream message a flood of small writes produces."""

KERNEL_FLAGS: tuple[str, ...] = (
    # The kernel outlives the process that launched it (a daemon killed with
    # SIGKILL reattaches to it when it restarts). ipykernel exits with its
    # parent when given one (JPY_PARENT_PID, which jupyter_client sets unless
    # the launch is ``independent``, or this flag): a thread polls getppid()
    # every second. Pid 1 is the value ipykernel never watches ("init never
    # goes away"), and unlike 0 it does not print a connection banner into
    # the kernel's log.
    "--IPKernelApp.parent_handle=1",
    # Hundreds of kernels must not contend for one history sqlite file.
    "--HistoryManager.enabled=False",
    # Tracebacks are read by a model, not a terminal.
    "--InteractiveShell.colors=nocolor",
    # ipykernel sleeps 0.5 ms after every cell so that clients which stop
    # reading at the shell reply still see late output. This client reads
    # until ``status: idle`` on iopub, which follows all output, so the sleep
    # is pure latency.
    "--IPythonKernel._execute_sleep=0",
)

_BOOTSTRAP_SOURCE = r"""
_out = {}

def __recursa_bootstrap():
    import os
    import stat
    import sys
    import types

    # The harness's own module in this kernel: restore hooks, snapshots.
    module = types.ModuleType("__recursa__", "The harness's state in this kernel.")
    exec(compile(HOOKS_SOURCE, "<recursa-hooks>", "exec"), module.__dict__)
    sys.modules["__recursa__"] = module
    get_ipython().user_ns["on_restore"] = module.on_restore

    # The kernel-side API (rlm, agent_message): bound now, connected on first
    # use with the socket and token that Kernel.export_env puts in os.environ.
    # Hidden like IPython's own names, so snapshots leave them out. A kernel
    # Python without recursa installed has no API.
    try:
        import recursa.api
    except ImportError:
        pass
    else:
        api = {}
        recursa.api.install(api)
        get_ipython().push(api, interactive=False)

    # An interrupt must stop a cell that is awaiting (a sub-agent, a message,
    # a sleep), not only one that computes. ipykernel turns SIGINT during an
    # async cell into a cancellation of it, but schedules that from the
    # signal handler with call_soon, which does not wake an event loop asleep
    # in epoll: the cell went on until its wait ended, and the harness
    # restarted the kernel, losing the namespace. A wakeup fd makes every
    # signal wake the loop. Skipped if something else owns the wakeup fd.
    import asyncio
    import signal
    from socket import socketpair

    previous = signal.set_wakeup_fd(-1)
    if previous != -1:
        signal.set_wakeup_fd(previous)
    else:
        wake_read, wake_write = socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)

        def drain_wakeups():
            try:
                while wake_read.recv(4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass

        asyncio.get_running_loop().add_reader(wake_read.fileno(), drain_wakeups)
        signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        module.wakeup_sockets = (wake_read, wake_write)  # kept open for the kernel's life

    # ipykernel ends every cell with sys.stdout.flush() and sys.stderr.flush(),
    # and each blocks on a round trip through its IOPub thread (about 0.2 ms),
    # even with nothing to send. Skip the round trip when the stream holds no
    # text: there is nothing to order. A stream with text flushes as before,
    # so output order is exactly ipykernel's. Skipped if the internals differ.
    for stream in (sys.stdout, sys.stderr):
        lock = getattr(stream, "_buffer_lock", None)
        if lock is None or not isinstance(getattr(stream, "_buffers", None), dict):
            continue
        if getattr(stream, "echo", None) is not None:
            continue

        def flush(stream=stream, lock=lock, full_flush=stream.flush):
            with lock:
                empty = not stream._buffers
            if not empty:
                full_flush()

        stream.flush = flush

    # ipykernel forces colors on for the programs a cell runs, for notebooks
    # that render ANSI codes. A model reads plain text: let programs decide.
    for name in ("FORCE_COLOR", "CLICOLOR_FORCE"):
        os.environ.pop(name, None)

    # Text a cell writes below Python (os.system, C code) is captured by
    # ipykernel and also echoed to the process's original stdout/stderr: the
    # kernel's log file, which would then grow without bound. That log is for
    # startup failures only, so the echo goes to /dev/null from here on.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            fd = getattr(stream, "_original_stdstream_copy", None)
            if isinstance(fd, int):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)

    # The same copy is what the stream's fileno() answers, so that whatever
    # writes there (subprocess.run(..., stdout=sys.stdout), faulthandler)
    # would be lost in /dev/null. It answers the descriptor that feeds the
    # stream's pipe instead (1 or 2), whose text is captured like that of
    # os.system. Skipped if the internals differ.
    def feeds_pipe(stream):
        pipe = getattr(stream, "_fid", None)
        fd = getattr(stream, "_original_stdstream_fd", None)
        if not (isinstance(pipe, int) and isinstance(fd, int)):
            return None
        read_end, write_end = os.fstat(pipe), os.fstat(fd)
        if not stat.S_ISFIFO(read_end.st_mode) or (read_end.st_dev, read_end.st_ino) != (
            write_end.st_dev,
            write_end.st_ino,
        ):
            return None
        return fd

    for stream in (sys.stdout, sys.stderr):
        fd = feeds_pipe(stream)
        if fd is not None:
            stream.fileno = lambda fd=fd: fd

    # IPython keeps every cell's stream output in memory for %notebook, for
    # good (a "tee" around the streams' write methods during each request),
    # so the kernel would grow with all it ever printed, by gigabytes under a
    # flood. No request tees from here on; this one still does, and puts the
    # streams' write methods back when it ends.
    shell = get_ipython()
    if callable(getattr(type(shell), "_tee", None)):
        import contextlib

        shell._tee = lambda channel: contextlib.nullcontext()

    # A flood of output (a program that prints without end) must not pile up
    # in memory, here or in the harness. ipykernel sends what a stream holds
    # every 0.2 s as one message, however large (tens of megabytes a message
    # for `yes`), and its iopub socket drops messages a slow reader has no
    # room for. So a writer that finds more than `chunk` characters held
    # sends them itself and waits until they are sent, and the socket waits
    # for room instead of dropping (the harness bounds its receive queue): a
    # flood goes at the pace the harness reads, in messages of about `chunk`
    # characters, and nothing is lost. Skipped if the internals differ.
    import threading

    import zmq

    chunk = CHUNK_CHARS

    def hold_back(stream):
        lock = getattr(stream, "_buffer_lock", None)
        if lock is None:
            return
        with lock:
            held = sum(buffer.tell() for buffer in stream._buffers.values())
        if held > chunk:
            stream.flush()  # ipykernel's waits until the IOPub thread sent it

    def bounded(stream, write):
        def bounded_write(text):
            written = write(text)
            hold_back(stream)
            return written

        return bounded_write

    pub = getattr(sys.stdout, "pub_thread", None)
    socket = getattr(pub, "socket", None)
    if isinstance(socket, zmq.Socket) and socket.type == zmq.XPUB:
        configured = threading.Event()

        def configure():
            # On the IOPub thread: the socket is that thread's.
            try:
                socket.setsockopt(zmq.XPUB_NODROP, 1)
                socket.setsockopt(zmq.SNDHWM, SEND_QUEUE)
            finally:
                configured.set()

        pub.schedule(configure)
        configured.wait(5.0)

    # That text travels through one pipe per stream, and ipykernel's watcher
    # thread forwards it into the stream whenever the thread is next
    # scheduled. When a cell ends, bytes it wrote may still be in the pipe,
    # or read and not yet forwarded, as ipykernel flushes and reports idle:
    # they would then arrive after the cell and belong to none. So the
    # watcher is replaced by a pump that reads only while holding a lock, and
    # at the end of every request (post_execute, before ipykernel's last
    # flush) the main thread takes that lock and forwards what the pipe still
    # holds itself. All that was written to the descriptor before the cell
    # ended is then in the stream, in order, however threads are scheduled.
    # While a cell runs, a flush of the stream does the same first, so that
    # text also comes before the result, display or traceback ipykernel
    # flushes the streams for. (Not after: each drain costs a system call.)
    # Skipped, leaving ipykernel's watcher in place, if the internals differ.
    import array
    import codecs
    import fcntl
    import select
    import termios
    import types

    # ipykernel's read size. Larger reads let a program that floods the pipe
    # outrun the IOPub thread, and the flush that ends each cell waits for it.
    read_size = 1000

    class Pump:
        def __init__(self, stream, pipe):
            self.stream = stream
            # ipykernel's own write: not one set on the stream (a bounded
            # write must not wait while this pump holds its lock).
            self.write = types.MethodType(type(stream).write, stream)
            self.pipe = pipe
            self.lock = threading.Lock()
            # Incremental: a character split between two reads stays whole.
            self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
            self.waiting = array.array("i", [0])

        def run(self):
            # ipykernel's loop, with the lock around each read and the
            # forwarding of what it read. Like ipykernel's, it stops at end
            # of file or when OutStream.close() asks, keeping an exception for
            # close() to print; it does not echo, as the echo is /dev/null.
            poller = select.poll()
            poller.register(self.pipe, select.POLLIN)
            try:
                while True:
                    poller.poll()
                    with self.lock:
                        try:
                            data = os.read(self.pipe, read_size)
                        except BlockingIOError:
                            continue  # the main thread emptied the pipe first
                        if not data or not self.stream._should_watch:
                            return
                        self.forward(data, final=False)
                    hold_back(self.stream)
            except Exception:
                self.stream._exc = sys.exc_info()

        def drain(self, final):
            # Only what the pipe holds now: a program left writing in the
            # background cannot keep a cell from ending. Nor can a wedged
            # pump: after 0.5 s the cell ends without what the pipe holds.
            if not self.lock.acquire(timeout=0.5):
                return
            try:
                fcntl.ioctl(self.pipe, termios.FIONREAD, self.waiting)
                left = self.waiting[0]
                chunks = []
                while left > 0 and (chunk := os.read(self.pipe, left)):
                    chunks.append(chunk)
                    left -= len(chunk)
                # The end of a request is a cut (a character still incomplete
                # there is shown as U+FFFD); a flush is not.
                self.forward(b"".join(chunks), final)
            finally:
                self.lock.release()

        def forward(self, data, final):
            text = self.decoder.decode(data, final)
            if text:
                self.write(text)

    def take_over(stream):
        # A pump in place of ipykernel's watcher of this stream's pipe, or None.
        fd = feeds_pipe(stream)
        pipe = getattr(stream, "_fid", None)
        watcher = getattr(stream, "watch_fd_thread", None)
        if not (
            fd is not None
            and isinstance(watcher, threading.Thread)
            and getattr(stream, "_should_watch", None) is True
        ):
            return None
        # Stop ipykernel's watcher the way OutStream.close() does: it ends
        # after its next read once _should_watch is false, and this byte
        # makes sure there is one.
        stream._should_watch = False
        try:
            os.write(fd, b"\0")
            watcher.join(2.0)
        finally:
            stream._should_watch = True
        if watcher.is_alive():
            return None
        # What is left was written during this bootstrap (at least that byte,
        # if the watcher's last read came before it), and nobody keeps it.
        os.set_blocking(pipe, False)
        try:
            while os.read(pipe, 65536):
                pass
        except BlockingIOError:
            pass
        pump = Pump(stream, pipe)
        name = f"recursa-{stream.name}-pump"
        thread = threading.Thread(target=pump.run, name=name, daemon=True)
        thread.start()
        stream.watch_fd_thread = thread  # what OutStream.close() joins
        return pump

    pumps = [pump for pump in map(take_over, (sys.stdout, sys.stderr)) if pump is not None]
    running = False  # true from pre_execute to post_execute

    def drain_first(pump, flush):
        def drain_then_flush():
            if running:
                pump.drain(final=False)
            flush()

        return drain_then_flush

    def cell_starts():
        nonlocal running
        running = True

    def cell_ends():
        nonlocal running
        running = False
        for pump in pumps:
            pump.drain(final=True)

    if pumps:
        for pump in pumps:
            pump.stream.flush = drain_first(pump, pump.stream.flush)
        get_ipython().events.register("pre_execute", cell_starts)
        get_ipython().events.register("post_execute", cell_ends)

    # Python's writers are bounded from the next request on: when this one
    # ends, its tee puts back the write methods it found.
    def bound_writes():
        shell.events.unregister("pre_execute", bound_writes)
        for stream in (sys.stdout, sys.stderr):
            if getattr(stream, "_buffer_lock", None) is not None:
                stream.write = bounded(stream, stream.write)

    shell.events.register("pre_execute", bound_writes)

__recursa_bootstrap()
del __recursa_bootstrap
"""

_BOOTSTRAP_SOURCE = (
    _BOOTSTRAP_SOURCE.replace("CHUNK_CHARS", str(OUTPUT_CHUNK_CHARS))
    .replace("SEND_QUEUE", str(IOPUB_QUEUE_MESSAGES))
    .replace("HOOKS_SOURCE", repr(HOOKS_SOURCE))
)

# One line holding the source as a literal, which the kernel compiles itself:
# IPython tokenizes and transforms each line of a cell in Python, which for
# this much code would add several milliseconds to every kernel start.
BOOTSTRAP = f"exec(compile({_BOOTSTRAP_SOURCE!r}, '<recursa-bootstrap>', 'exec'))"
"""Run silently in every fresh kernel process. It creates ``_out``, the dict
where the session keeps the full text of outputs that were truncated for the
model, and the private module ``__recursa__`` with ``on_restore``
(:data:`recursa.kernel.snapshot.HOOKS_SOURCE`); binds the kernel-side API
(``rlm``, ``agent_message``: :func:`recursa.api.install`, which imports
neither the wire values nor httpx2) as hidden names; makes an interrupt stop
a cell that is awaiting (a signal wakes the event loop); makes an empty flush free;
stops forcing colors on programs; stops the kernel log from growing; makes
all that a cell writes to the stdout and stderr descriptors
(``sys.stdout.fileno()`` among them) part of that cell's output, ahead of
its result; and bounds what a flood of output holds in memory, by sending it
in pieces of :data:`OUTPUT_CHUNK_CHARS` at the pace the harness reads (the
iopub socket waits for room instead of dropping). Only ``_out``,
``on_restore`` and the API's names are left in the namespace. (matplotlib is
not touched: ipykernel already selects its inline, non-interactive backend
through ``MPLBACKEND``, at no cost.)"""


def kernel_argv(python: str) -> list[str]:
    """The kernel's command line; ``{connection_file}`` is filled in by jupyter_client."""
    return [python, "-m", "ipykernel_launcher", "-f", "{connection_file}", *KERNEL_FLAGS]


class _KeptKernelManager(AsyncKernelManager):
    """A manager that leaves the connection file alone when it is garbage
    collected (jupyter_client's deletes it): the kernel may outlive this
    process, and a later one reattaches through that file. :meth:`stop
    <recursa.kernel.lifecycle.KernelProcess.stop>` removes it."""

    def __del__(self) -> None:
        self._close_control_socket()


class _FixedSpecManager(KernelSpecManager):
    """Answers every kernelspec lookup with one spec built in code."""

    def __init__(self, spec: KernelSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._spec = spec

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return self._spec


def ipc_prefix(runtime_dir: Path, name: str) -> Path:
    """Where a kernel's unix sockets go: beside its connection file when the
    path fits in a socket address, else in a private directory under the
    system's temporary directory. The connection file records the choice."""
    beside = runtime_dir / f"{name}-ipc"
    if len(os.fsencode(beside)) <= MAX_IPC_PATH_BYTES:
        return beside
    short = Path(tempfile.gettempdir()) / f"recursa-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    info = short.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KernelError(
            f"{short} is not a private directory of this user; remove it, or use a "
            "shorter kernel runtime directory"
        )
    return short / f"{name}-ipc"


def make_manager(*, python: str, connection_file: Path, ipc_prefix: Path) -> AsyncKernelManager:
    """A manager for one kernel on the ipc transport."""
    if len(os.fsencode(ipc_prefix)) > MAX_IPC_PATH_BYTES:
        raise KernelError(f"the kernel socket path {ipc_prefix} is too long for a unix socket")
    spec = KernelSpec(
        argv=kernel_argv(python),
        display_name="recursa",
        language="python",
        interrupt_mode="signal",
        env={},
        metadata={},
    )
    return _KeptKernelManager(
        kernel_spec_manager=_FixedSpecManager(spec),
        transport="ipc",
        ip=str(ipc_prefix),
        connection_file=str(connection_file),
        context=shared_context(),
    )


__all__ = [
    "BOOTSTRAP",
    "KERNEL_FLAGS",
    "MAX_IPC_PATH_BYTES",
    "OUTPUT_CHUNK_CHARS",
    "ipc_prefix",
    "kernel_argv",
    "make_manager",
]

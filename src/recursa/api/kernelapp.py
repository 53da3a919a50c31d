"""Runs in the kernel's process: ipykernel's application with one thread fewer on the shell path,
and one message fewer per request.

ipykernel 7 reads the shell channel in a thread of its own (the "shell
channel" thread), which hands every request to the main thread over an
inproc socket pair and takes the reply back the same way. That thread exists
for Jupyter's kernel subshells, which recursa never asks for; on a cell's
round trip it costs two thread handoffs, about 0.4 ms of a 1.8 ms round trip
(``benchmarks/kernel_roundtrip.py``). :class:`KernelApp` reads the shell
socket on the main thread's loop instead, as ipykernel 6 did and as ipykernel
7 does for a kernel without subshell support.

ipykernel has no switch for it. Its code asks "is there a shell channel
thread?" in two ways: by truth (which path reads the shell socket) and, in
``_supports_kernel_subshells``, by ``is not None``; and one line reads the
thread's ``parent_thread`` unconditionally (for cells that ``await``). So the
thread is replaced by a falsy stand-in that knows the main thread, and the
kernel class says it supports no subshells (an ``execute_request`` that
names a subshell, which no client of recursa's sends, is not answered).
Where this ipykernel is not shaped as expected, nothing is changed: the
kernel runs as ipykernel made it.

Its kernel class can leave out the ``busy`` status (:class:`HarnessKernel`;
the harness's kernels do), and its replies leave at once (:class:`DirectStream`).

Imported after :func:`recursa.api.launcher.without_debugger` (it imports
ipykernel), and by the fork server's zygote (:mod:`recursa.kernel.zygote`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Sequence
from typing import Any

import zmq
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
from tornado.log import gen_log
from traitlets import Bool, Type
from zmq.eventloop.zmqstream import ZMQStream


class HarnessKernel(IPythonKernel):
    """IPython's kernel, as the harness's own kernels run it.

    - It says it has no subshells: ``kernel_info`` does not offer them, and a
      request to create, delete or list one is answered with an error
      (ipykernel only logs it, and its client would wait forever).
    - With ``publish_busy`` off, it publishes ``idle`` after each request but
      not ``busy`` before it. The harness, the only client of the kernels it
      launches (which turn it off: ``recursa.kernel.launch.KERNEL_FLAGS``),
      waits for ``idle`` (all of a request's output is out) and never reads
      ``busy``, which cost a message through the iopub thread per request:
      about 0.1 ms of the kernel's CPU and 0.2 ms of a cell's round trip
      (``benchmarks/kernel_roundtrip.py``). Anywhere else (a Jupyter server
      tracks ``busy`` to tell a running kernel from an idle one) it is on.
    """

    publish_busy = Bool(
        True, help="Publish the busy status before each request (the idle after it always)."
    ).tag(config=True)

    def _publish_status(self, status: str, channel: str, parent: Any = None) -> None:
        if status != "busy" or self.publish_busy:
            super()._publish_status(status, channel, parent)  # type: ignore[no-untyped-call]

    @property
    def _supports_kernel_subshells(self) -> bool:
        return False

    async def create_subshell_request(self, socket: Any, ident: Any, parent: Any) -> None:
        self._no_subshells(socket, "create_subshell_reply", ident, parent)

    async def delete_subshell_request(self, socket: Any, ident: Any, parent: Any) -> None:
        self._no_subshells(socket, "delete_subshell_reply", ident, parent)

    async def list_subshell_request(self, socket: Any, ident: Any, parent: Any) -> None:
        self._no_subshells(socket, "list_subshell_reply", ident, parent)

    def _no_subshells(self, socket: Any, reply_type: str, ident: Any, parent: Any) -> None:
        if self.session is None:
            return
        content = {
            "status": "error",
            "ename": "NotSupported",
            "evalue": "this kernel has no subshells",
            "traceback": [],
        }
        self.session.send(socket, reply_type, content, parent, ident)


class NoShellChannelThread:
    """Where ipykernel keeps its shell channel thread: false when tested, so the
    shell socket is read on the main loop, and no thread is ever started."""

    def __init__(self, parent_thread: threading.Thread) -> None:
        self.parent_thread = parent_thread

    def __bool__(self) -> bool:
        return False


class DirectStream(ZMQStream):
    """The shell channel's stream, sending a reply at once.

    ``ZMQStream`` queues what it is given and sends it from the event loop;
    ipykernel then flushes the shell stream after each request to get the
    reply out. The queue, the poller updates and the flush cost about 0.1 ms
    of the kernel's CPU per request (``benchmarks/kernel_roundtrip.py``).
    Read on the main thread (:class:`NoShellChannelThread`), the stream is
    only ever written there, so a message with nothing queued before it and
    no send callback goes straight to the socket, and a failed send is
    logged and dropped, as ``ZMQStream`` does. Anything else takes the queue
    (and once a message has, ``ZMQStream``'s own send callback stays set, so
    the rest do too).

    pyzmq sends a message a frame at a time, in Python. The reply is sent
    while ipykernel still handles the request, when SIGINT raises
    ``KeyboardInterrupt``: an interrupt between two frames would leave half a
    message on the socket, which the next reply would be glued to. So SIGINT
    is ignored while a message is sent, as it is when ipykernel flushes the
    queue after a request. And as ``ZMQStream`` does after its own sends, it
    then has any requests that arrived meanwhile handled (a send can take the
    edge of ZeroMQ's edge-triggered descriptor, and they would wait unseen).
    """

    def send_multipart(
        self,
        msg: Sequence[Any],
        flags: int = 0,
        copy: bool = True,
        track: bool = False,
        callback: Any = None,
        **kwargs: Any,
    ) -> None:
        direct = callback is None and self._send_callback is None and self._send_queue.empty()
        main = threading.current_thread() is threading.main_thread()
        interrupt = signal.getsignal(signal.SIGINT) if main else None
        if not direct or self.socket is None or interrupt is None:
            super().send_multipart(msg, flags, copy, track, callback, **kwargs)
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            try:
                self.socket.send_multipart(msg, flags=flags, copy=copy, track=track, **kwargs)
            except zmq.ZMQError as exc:
                gen_log.error("SEND Error: %s", exc)
            finally:
                # ZeroMQ's descriptor is edge-triggered and a send can take the
                # edge of requests that arrived meanwhile: have them handled, as
                # ZMQStream does after each of its own sends.
                with contextlib.suppress(zmq.ZMQError):
                    self._update_handler(self._state)  # type: ignore[no-untyped-call]
        finally:
            signal.signal(signal.SIGINT, interrupt)

    def flush(self, flag: int = zmq.POLLIN | zmq.POLLOUT, limit: int | None = None) -> int:
        """As ``ZMQStream.flush``; and when it found nothing to do (a reply
        already went out directly), the poller is brought up to date with the
        socket, as the flush of a queued reply did: ipykernel flushes after
        every request, so requests whose edge a send took are never stranded,
        even if something interrupted the send's own check."""
        count = super().flush(flag, limit)
        if not count and self.socket is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._rebuild_io_state()  # type: ignore[no-untyped-call]
        return count


class KernelApp(IPKernelApp):
    """ipykernel's application; with :class:`HarnessKernel` (the default
    here), the shell channel is read on the main thread."""

    kernel_class = Type(
        HarnessKernel,
        klass="ipykernel.kernelbase.Kernel",
        help="The Kernel subclass to be used (recursa's: no subshells, busy status optional, "
        "no shell channel thread).",
    ).tag(config=True)  # type: ignore[assignment]  # the same trait, another default

    def init_sockets(self) -> None:
        super().init_sockets()  # type: ignore[no-untyped-call]
        thread: Any = getattr(self, "shell_channel_thread", None)
        kernel_class: object = self.kernel_class
        ours = isinstance(kernel_class, type) and issubclass(kernel_class, HarnessKernel)
        if not ours or not _unstarted(thread):
            return  # another kernel class, or an ipykernel shaped otherwise: as it is
        thread.io_loop.close(all_fds=False)
        self.shell_channel_thread = NoShellChannelThread(threading.current_thread())

    def init_kernel(self) -> None:
        super().init_kernel()  # type: ignore[no-untyped-call]
        stream: object = getattr(getattr(self, "kernel", None), "shell_stream", None)
        shaped = hasattr(stream, "_send_queue") and hasattr(stream, "_send_callback")
        main = isinstance(self.shell_channel_thread, NoShellChannelThread)
        if type(stream) is ZMQStream and shaped and main:
            stream.__class__ = DirectStream  # the same object, sending at once


def _unstarted(thread: object) -> bool:
    """Whether ``thread`` is ipykernel's shell channel thread, made and not started."""
    return (
        isinstance(thread, threading.Thread)
        and thread.ident is None
        and hasattr(thread, "io_loop")
        and hasattr(thread, "parent_thread")
    )


__all__ = ["DirectStream", "HarnessKernel", "KernelApp", "NoShellChannelThread"]

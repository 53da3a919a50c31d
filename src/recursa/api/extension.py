"""Runs inside the kernel: the IPython extension that makes a fresh kernel recursa's.

The harness loads it in every new kernel process, with one silent request
(:data:`recursa.kernel.launch.BOOTSTRAP`); its settings come from the
kernel's command line as IPython configuration (``--RecursaKernel.NAME=VALUE``,
:class:`RecursaKernel`), never from code. :func:`load_ipython_extension`:

- creates ``_out``, the dict where the session keeps the full text of
  outputs that were truncated for the model;
- binds ``on_restore`` (:mod:`recursa.api.hooks`) for the model, and the
  kernel-side API (:func:`recursa.api.install`: ``rlm``, ``agent_message``,
  ...) as hidden names, so snapshots leave them out;
- makes an interrupt stop a cell that is awaiting (a signal wakes the event
  loop);
- stops forcing colors on the programs a cell runs;
- with ``api_transport=comm``, sends the kernel API's requests over the
  kernel's own channels (:mod:`recursa.api.channel`);
- changes the output streams (:mod:`recursa.api.streams`,
  :mod:`recursa.api.pump`): all that a cell writes to its descriptors is part
  of that cell's output, ahead of its result, and a flood of output is sent
  in pieces of ``output_chunk_chars`` at the pace the harness reads.

Only ``_out``, ``on_restore`` and the API's names are left in the namespace.
(matplotlib is not touched: ipykernel already selects its inline,
non-interactive backend through ``MPLBACKEND``, at no cost.)
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from traitlets import Enum, Int
from traitlets.config import Configurable

from recursa.api import channel, client, hooks, install, pump, streams

FORCED_COLOR_VARIABLES = ("FORCE_COLOR", "CLICOLOR_FORCE")
"""What ipykernel sets to force colors on, for notebooks that render ANSI codes."""


class RecursaKernel(Configurable):
    """The extension's settings, from the kernel's IPython configuration."""

    output_chunk_chars = Int(
        262_144,
        help="Characters an output stream holds before the writer waits for them to be sent.",
    ).tag(config=True)
    iopub_send_queue = Int(
        64, help="Messages the iopub socket queues for a slow reader before a writer waits."
    ).tag(config=True)
    api_transport = Enum(
        ("socket", "comm"),
        "socket",
        help="How the kernel API is reached: the daemon's socket (with the token in "
        "the environment) or comm messages on this kernel's own channels "
        "(recursa.api.channel; also switched on later by use_comm()).",
    ).tag(config=True)


class _Wakeup:
    """The socket pair whose write end is the signal wakeup fd, kept open for
    the kernel's life."""

    sockets: tuple[socket.socket, socket.socket] | None = None


def load_ipython_extension(shell: Any) -> None:
    """Make ``shell``'s kernel recursa's (see the module docstring). Meant to
    run once, in a fresh kernel, during a request."""
    settings = RecursaKernel(parent=shell)
    client.take_credentials()  # a restarted kernel starts with them in its environment
    shell.user_ns["_out"] = {}
    shell.user_ns["on_restore"] = hooks.on_restore
    api: dict[str, Any] = {}
    install(api)
    shell.push(api, interactive=False)
    wake_loop_on_signals()
    for name in FORCED_COLOR_VARIABLES:
        os.environ.pop(name, None)
    streams.capture(shell, send_queue=settings.iopub_send_queue)
    pump.take_over_all(shell, settings.output_chunk_chars)
    streams.bound_writes_from_next_request(shell, settings.output_chunk_chars)
    lighten_requests(shell)
    if settings.api_transport == "comm":
        channel.use_comm(shell)


def lighten_requests(shell: Any) -> None:
    """Take four costs off every request that buy nothing here:

    - traitlets leaves the kernel's logger at DEBUG and filters in its
      handlers, so each request builds a dozen log records nobody prints; the
      logger now stops at the lowest level its handlers print;
    - ipykernel inspects ``run_cell_async``'s signature on every execute
      request (``_accepts_parameters``, called under the name
      ``ipykernel.ipkernel`` imported; ``ipykernel.kernelbase`` calls it once,
      at start, before this runs); the answer is kept per method;
    - ``execute_input``, the broadcast of each cell's code to other frontends,
      is not sent: the harness is the kernel's only client and has the code;
    - a cell is transformed (IPython's input transformers) and checked for
      top-level ``await`` (a compile) once per request, not twice: see
      :func:`transform_once`.

    Skipped, piece by piece, where ipykernel's internals differ."""
    log = getattr(getattr(shell, "kernel", None), "log", None)
    if isinstance(log, logging.Logger) and log.handlers and not log.propagate:
        lowest = min(handler.level for handler in log.handlers)
        if lowest > log.level:
            log.setLevel(lowest)
    kernel = getattr(shell, "kernel", None)
    if callable(getattr(kernel, "_publish_execute_input", None)):
        kernel._publish_execute_input = _no_broadcast  # type: ignore[union-attr]
    ipkernel = sys.modules.get("ipykernel.ipkernel")
    accepts = getattr(ipkernel, "_accepts_parameters", None)
    if ipkernel is not None and callable(accepts) and not hasattr(accepts, "recursa_cached"):
        ipkernel._accepts_parameters = _cached_answers(accepts)  # type: ignore[attr-defined]
    transform_once(shell)


def transform_once(shell: Any) -> None:
    """Keep a cell's transform, and whether it must run as a coroutine, from
    the first time a request asks to the second.

    For a cell without top-level ``await``, ipykernel's ``do_execute``
    transforms the cell and asks ``should_run_async`` (which compiles it),
    then calls ``run_cell``, which does both again on the same text: about
    0.06 ms of a trivial cell, and more the longer the cell. The answers are
    kept for the same text only from the start of ``do_execute`` until
    ``run_cell`` has asked for both (or ipykernel found that the cell awaits,
    and runs it without asking again); at the latest until the cell is about
    to run (IPython's ``pre_execute`` event) or ``do_execute`` ends. No user
    code runs in between, so nothing a cell or a hook does (a nested
    ``run_cell``, its own ``transform_cell``) sees a kept answer. A transform
    that raises is not kept (the second call raises again, as before).
    Skipped where ipykernel and IPython are shaped otherwise."""
    kernel: Any = getattr(shell, "kernel", None)
    transform = getattr(shell, "transform_cell", None)
    should_run_async = getattr(shell, "should_run_async", None)
    do_execute = getattr(kernel, "do_execute", None)
    events = getattr(shell, "events", None)
    if not (
        callable(transform)
        and callable(should_run_async)
        and inspect.iscoroutinefunction(do_execute)
        and events is not None
    ):
        return
    if getattr(do_execute, "recursa_once", False):
        return
    kept: dict[tuple[object, ...], Any] = {}
    armed = [False]

    def transform_cell(raw_cell: str) -> Any:
        if not armed[0]:
            return transform(raw_cell)
        key = ("transform", raw_cell)
        if key in kept:
            return kept.pop(key)
        kept[key] = transformed = transform(raw_cell)
        return transformed

    def should_run_async_once(raw_cell: str, **kwargs: Any) -> Any:
        if not armed[0]:
            return should_run_async(raw_cell, **kwargs)
        failed = kwargs.get("preprocessing_exc_tuple") is not None
        key = ("async", raw_cell, kwargs.get("transformed_cell"), failed)
        if key in kept:
            answer = kept.pop(key)
            disarm()  # run_cell has asked both: nothing else will
            return answer
        answer = should_run_async(raw_cell, **kwargs)
        if answer:
            disarm()  # ipykernel runs the cell itself, without asking again
        else:
            kept[key] = answer
        return answer

    def disarm(*args: object) -> None:
        armed[0] = False
        kept.clear()

    async def do_execute_once(*args: Any, **kwargs: Any) -> Any:
        kept.clear()
        armed[0] = True
        try:
            return await do_execute(*args, **kwargs)
        finally:
            disarm()

    do_execute_once.recursa_once = True  # type: ignore[attr-defined]
    shell.transform_cell = transform_cell
    shell.should_run_async = should_run_async_once
    events.register("pre_execute", disarm)
    kernel.do_execute = do_execute_once


def _no_broadcast(*args: object, **kwargs: object) -> None:
    """In place of ipykernel's ``execute_input`` message: nobody else listens."""


def _cached_answers(accepts: Callable[[Any, list[str]], Any]) -> Callable[..., Any]:
    answers: dict[tuple[object, tuple[str, ...]], Any] = {}

    def cached(meth: Any, param_names: list[str]) -> Any:
        key = (getattr(meth, "__func__", meth), tuple(param_names))
        if key not in answers:
            answers[key] = accepts(meth, param_names)
        return answers[key]

    cached.recursa_cached = True  # type: ignore[attr-defined]
    return cached


def wake_loop_on_signals() -> None:
    """Make every signal wake the running event loop.

    An interrupt must stop a cell that is awaiting (a sub-agent, a message, a
    sleep), not only one that computes. ipykernel turns SIGINT during an
    async cell into a cancellation of it, but schedules that from the signal
    handler with ``call_soon``, which does not wake a loop asleep in epoll:
    the cell would go on until its wait ended. Skipped if something else
    owns the wakeup fd."""
    previous = signal.set_wakeup_fd(-1)
    if previous != -1:
        signal.set_wakeup_fd(previous)
        return
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)

    def drain_wakeups() -> None:
        try:
            while wake_read.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    asyncio.get_running_loop().add_reader(wake_read.fileno(), drain_wakeups)
    signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
    _Wakeup.sockets = (wake_read, wake_write)


__all__ = [
    "FORCED_COLOR_VARIABLES",
    "RecursaKernel",
    "lighten_requests",
    "load_ipython_extension",
    "transform_once",
    "wake_loop_on_signals",
]

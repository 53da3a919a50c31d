"""Real ipykernel processes: output, persistence, limits, death, environment."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from jupyter_client import AsyncKernelClient

from recursa.config import Config, load_config
from recursa.errors import KernelError
from recursa.kernel import CellOutput, Kernel, OutputPart
from recursa.kernel.wire import make_session


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def make_kernel(tmp_path: Path, workdir: Path, config: Config) -> Callable[..., Kernel]:
    def make(**options: object) -> Kernel:
        return Kernel(workdir, config.kernel.env, runtime_dir=tmp_path / "rt", **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def kernel(make_kernel: Callable[..., Kernel]) -> AsyncIterator[Kernel]:
    async with make_kernel() as k:
        yield k


def pidfd(pid: int) -> int:
    """A descriptor that becomes readable when process ``pid`` exits."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        pytest.skip("needs pidfd_open (Linux 5.3 and later)")
    fd: int = opener(pid)
    return fd


async def exited(fd: int, timeout: float = 10.0) -> None:
    """Wait, on the event loop, until the process of pidfd ``fd`` has exited;
    then close ``fd``. The process is not reaped: its parent reads its status."""
    loop = asyncio.get_running_loop()
    gone = asyncio.Event()
    loop.add_reader(fd, gone.set)
    try:
        await asyncio.wait_for(gone.wait(), timeout)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


IGNORES_INTERRUPTS = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "while True:\n"
    "    print('tick', flush=True)\n"
    "    time.sleep(0.05)\n"
)
"""A cell that ignores SIGINT, and keeps printing."""


def kinds(out: CellOutput) -> list[str]:
    return [p.kind for p in out.parts]


# -- output -----------------------------------------------------------------------------


async def test_outputs_arrive_in_order(kernel: Kernel) -> None:
    code = (
        "import sys\n"
        "from IPython.display import display\n"
        "print('out', flush=True)\n"
        "print('err', file=sys.stderr, flush=True)\n"
        "display('shown')\n"
        "print('more')\n"
        "6 * 7\n"
    )
    out = await kernel.execute(code, timeout=10)
    assert out.status == "ok"
    assert out.parts == (
        OutputPart("stdout", "out\n"),
        OutputPart("stderr", "err\n"),
        OutputPart("display", "'shown'"),
        OutputPart("stdout", "more\n"),
        OutputPart("result", "42"),
    )
    assert out.execution_count == 1
    assert out.note == ""
    assert not out.restarted
    assert out.duration > 0


async def test_an_error_gives_a_plain_traceback_after_earlier_output(kernel: Kernel) -> None:
    out = await kernel.execute("print('before', flush=True)\n1 / 0\n", timeout=10)
    assert out.status == "error"
    assert kinds(out) == ["stdout", "error"]
    traceback = out.parts[1].text
    assert "ZeroDivisionError" in traceback
    assert "1 / 0" in traceback
    assert "\x1b" not in traceback
    assert out.text().startswith("before\n")


async def test_streaming_callback_sees_parts_as_they_arrive(kernel: Kernel) -> None:
    seen: list[OutputPart] = []
    first = asyncio.Event()

    def watch(part: OutputPart) -> None:
        seen.append(part)
        first.set()

    task = asyncio.create_task(
        kernel.execute(
            "import time\nprint('early', flush=True)\ntime.sleep(0.3)\n'late'",
            timeout=10,
            on_output=watch,
        )
    )
    await asyncio.wait_for(first.wait(), 10)
    assert not task.done()  # the first piece came while the cell still ran
    out = await task
    assert seen == [OutputPart("stdout", "early\n"), OutputPart("result", "'late'")]
    assert out.parts == tuple(seen)


async def test_bash_cells(kernel: Kernel) -> None:
    out = await kernel.execute("%%bash\necho hello\necho oops >&2\n", timeout=10)
    assert out.status == "ok"
    assert out.parts == (OutputPart("stdout", "hello\n"), OutputPart("stderr", "oops\n"))


async def test_top_level_await(kernel: Kernel) -> None:
    out = await kernel.execute("import asyncio\nawait asyncio.sleep(0)\n'awaited'", timeout=10)
    assert out.status == "ok"
    assert out.parts == (OutputPart("result", "'awaited'"),)


async def test_requests_build_no_debug_records_and_inspect_once(kernel: Kernel) -> None:
    # recursa's extension quiets the kernel's logger to what its handlers print,
    # keeps ipykernel's answer about run_cell_async's parameters (it called
    # inspect.signature on every request), and sends no execute_input
    # broadcast: each costs CPU on every request.
    probe = (
        "import logging\n"
        "k = get_ipython().kernel\n"
        "print(k.log.isEnabledFor(logging.DEBUG), k.log.isEnabledFor(logging.WARNING),"
        " k._publish_execute_input.__name__)"
    )
    out = await kernel.execute(probe, timeout=10)
    assert out.parts == (OutputPart("stdout", "False True _no_broadcast\n"),)
    counting = (
        "import inspect\n"
        "_signature, _calls = inspect.signature, []\n"
        "def _counted(*args, **kwargs):\n"
        "    _calls.append(args)\n"
        "    return _signature(*args, **kwargs)\n"
        "inspect.signature = _counted"
    )
    assert (await kernel.execute(counting, timeout=10)).status == "ok"
    # Requests still pass their cell ids and metadata through.
    again = await kernel.execute("1 + 1", timeout=10)
    assert again.status == "ok" and again.parts == (OutputPart("result", "2"),)
    told = await kernel.execute("inspect.signature = _signature\nprint(len(_calls))", timeout=10)
    assert told.parts == (OutputPart("stdout", "0\n"),)  # two requests, no inspection


async def test_a_cell_is_transformed_and_compiled_for_await_once_per_request(
    kernel: Kernel,
) -> None:
    # ipykernel's do_execute transforms the cell and asks whether it awaits
    # (a compile), then IPython's run_cell does both again; the extension
    # keeps the answers for the second time, within one request only.
    counting = (
        "import IPython.core.interactiveshell as _ish\n"
        "_transforms, _compiles, _should = [], [], _ish._should_be_async\n"
        "def _counted(cell):\n"
        "    _compiles.append(cell)\n"
        "    return _should(cell)\n"
        "_ish._should_be_async = _counted\n"
        "get_ipython().input_transformers_post.append(lambda lines: _transforms.append(1) or lines)"
    )
    assert (await kernel.execute(counting, timeout=10)).status == "ok"
    assert (await kernel.execute("x = 1", timeout=10)).status == "ok"
    # This cell is counted too, before it runs: two requests, once each.
    out = await kernel.execute("print(len(_transforms), len(_compiles))", timeout=10)
    assert out.parts == (OutputPart("stdout", "2 2\n"),), out
    # A cell that awaits takes ipykernel's other path, and still runs.
    out = await kernel.execute("import asyncio\nawait asyncio.sleep(0)\n7", timeout=10)
    assert out.parts == (OutputPart("result", "7"),), out


async def test_nothing_a_cell_does_sees_a_kept_transform(kernel: Kernel) -> None:
    # `ls` is a magic until a variable of that name hides it: a transform
    # depends on the namespace, so none is kept past the start of a cell.
    inside = (
        "ip = get_ipython()\n"
        "before = ip.transform_cell('ls')\n"
        "ls = 1\n"
        "after = ip.transform_cell('ls')\n"
        "print('magic' in before, 'magic' in after)"
    )
    out = await kernel.execute(inside, timeout=10)
    assert out.parts == (OutputPart("stdout", "True False\n"),), out
    # Nor across requests: the same text, once a magic and once a name.
    assert (await kernel.execute("del ls", timeout=10)).status == "ok"
    listing = await kernel.execute("ls -d /", timeout=10)
    assert listing.status == "ok" and "/" in listing.text(), listing
    assert (await kernel.execute("ls = 5", timeout=10)).status == "ok"
    assert (await kernel.execute("ls", timeout=10)).parts == (OutputPart("result", "5"),)
    # A transform that fails still fails, with its error.
    bad = await kernel.execute("%%not_a_cell_magic\n1", timeout=10)
    assert bad.status == "error" and "not_a_cell_magic" in bad.text(), bad


async def test_messages_are_packed_with_orjson_and_read_exactly(kernel: Kernel) -> None:
    # jupyter_client's Session packs with orjson when it is installed (a
    # dependency for that), in the kernel and in the harness; both read with
    # the json module, which keeps big integers exact (orjson makes floats).
    probe = "k = get_ipython().kernel\nprint(k.session.pack.__name__, k.session.unpack.__name__)"
    out = await kernel.execute(probe, timeout=10)
    assert out.parts == (OutputPart("stdout", "orjson_packer json_unpacker\n"),), out
    session = make_session({"key": "k"})
    assert (session.pack.__name__, session.unpack.__name__) == ("orjson_packer", "json_unpacker")
    big = 123456789012345678901234567890
    assert session.unpack(session.pack({"n": big, "x": 0.1})) == {"n": big, "x": 0.1}


async def test_a_request_publishes_idle_but_not_busy(kernel: Kernel) -> None:
    # The harness waits for `idle` and never reads `busy`, so the kernel does
    # not send it (recursa.api.kernelapp.HarnessKernel); a Jupyter client
    # still finds the kernel ready and a request's output complete.
    client = AsyncKernelClient()
    client.load_connection_file(str(kernel.connection_file))
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=10)
        msg_id = client.execute("print('seen')")
        states: list[str] = []
        texts: list[str] = []
        while "idle" not in states:
            msg = await client.get_iopub_msg(timeout=10)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                states.append(msg["content"]["execution_state"])
            elif msg["msg_type"] == "stream":
                texts.append(msg["content"]["text"])
        reply = await client.get_shell_msg(timeout=10)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "ok"
        assert states == ["idle"] and "".join(texts) == "seen\n", (states, texts)
    finally:
        client.stop_channels()


ONE_SHELL_THREAD = (
    "import asyncio, threading\n"
    "k = get_ipython().kernel\n"
    "await asyncio.sleep(0)\n"
    "print([t.name for t in threading.enumerate()].count('Shell channel'),"
    " k._supports_kernel_subshells, type(k).__name__, type(k.shell_stream).__name__)"
)
"""A cell that awaits (ipykernel reads the shell channel thread's stand-in
there), then tells whether that thread runs, whether subshells are offered,
and the classes of the kernel and of its shell stream."""


async def test_the_shell_channel_is_read_on_the_main_thread(kernel: Kernel) -> None:
    # recursa.api.kernelapp: no shell channel thread (it serves Jupyter's
    # subshells, never asked for; two thread handoffs a cell), and cells
    # that await still run.
    out = await kernel.execute(ONE_SHELL_THREAD, timeout=10)
    assert out.parts == (OutputPart("stdout", "0 False HarnessKernel DirectStream\n"),), out


async def test_a_reply_goes_straight_to_the_socket_with_interrupts_held_off(
    kernel: Kernel,
) -> None:
    # recursa.api.kernelapp.DirectStream: the reply is sent while the request
    # is handled (not from the queue ipykernel flushes after it), and SIGINT
    # is ignored while its frames go out, so an interrupt cannot cut it in two.
    spy = (
        "import signal, traceback\n"
        "_stream = get_ipython().kernel.shell_stream\n"
        "_real, _sends = _stream.socket, []\n"
        "class _Spy:\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(_real, name)\n"
        "    def send_multipart(self, *args, **kwargs):\n"
        "        queued = any(f.name == '_handle_send' for f in traceback.extract_stack())\n"
        "        _sends.append((signal.getsignal(signal.SIGINT) is signal.SIG_IGN, queued))\n"
        "        return _real.send_multipart(*args, **kwargs)\n"
        "_stream.socket = _Spy()"
    )
    assert (await kernel.execute(spy, timeout=10)).status == "ok"
    assert (await kernel.execute("x = 1", timeout=10)).status == "ok"
    told = await kernel.execute("_stream.socket = _real\nprint(_sends[:2])", timeout=10)
    # The spy's own cell's reply, then the next one: both direct, both shielded.
    assert told.parts == (OutputPart("stdout", "[(True, False), (True, False)]\n"),), told
    # And an interrupt still stops a cell.
    stopped = await kernel.execute("import time\ntime.sleep(30)", timeout=0.5)
    assert stopped.status in ("timeout", "interrupted"), stopped
    assert (await kernel.execute("print('after')", timeout=10)).text() == "after\n"


async def test_a_request_that_arrives_during_a_cell_is_answered_after_it(
    kernel: Kernel,
) -> None:
    # It waits in the socket while the cell runs; the cell's reply, sent
    # straight to the socket, must not leave it unseen (ZeroMQ's descriptor is
    # edge-triggered, and a send can take its edge).
    client = AsyncKernelClient()
    client.load_connection_file(str(kernel.connection_file))
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=10)
        running = client.execute("import time\nprint('running', flush=True)\ntime.sleep(0.5)")
        while True:
            msg = await client.get_iopub_msg(timeout=10)
            if msg["parent_header"].get("msg_id") == running and msg["msg_type"] == "stream":
                break
        info = client.kernel_info()
        replies = [await client.get_shell_msg(timeout=5) for _ in range(2)]
        assert [r["parent_header"]["msg_id"] for r in replies] == [running, info]
        # Even if an interrupt lands between the reply's send and its check
        # (simulated: the check raises once), the flush after the request
        # has the waiting request handled.
        armed = "_s = get_ipython().kernel.shell_stream\n_arm = []\n" + (
            "def _check(state, _real=_s._update_handler):\n"
            "    if _arm:\n"
            "        _arm.clear()\n"
            "        raise KeyboardInterrupt\n"
            "    return _real(state)\n"
            "_s._update_handler = _check"
        )
        assert (await kernel.execute(armed, timeout=10)).status == "ok"
        running = client.execute("_arm.append(1)\nprint('running', flush=True)\ntime.sleep(0.5)")
        while True:
            msg = await client.get_iopub_msg(timeout=10)
            if msg["parent_header"].get("msg_id") == running and msg["msg_type"] == "stream":
                break
        info = client.kernel_info()
        replies = [await client.get_shell_msg(timeout=5) for _ in range(2)]
        assert [r["parent_header"]["msg_id"] for r in replies] == [running, info]
        assert (await kernel.execute("del _s._update_handler", timeout=10)).status == "ok"
    finally:
        client.stop_channels()


async def test_a_request_for_a_subshell_is_answered_with_an_error(kernel: Kernel) -> None:
    # ipykernel only logs these when it has no subshells; a client would wait.
    client = AsyncKernelClient()
    client.load_connection_file(str(kernel.connection_file))
    client.start_channels()
    try:
        for kind in ("create", "list", "delete"):
            request = client.session.msg(f"{kind}_subshell_request", {})
            client.control_channel.send(request)
            reply = await client.get_control_msg(timeout=10)
            assert reply["parent_header"]["msg_id"] == request["header"]["msg_id"]
            assert reply["msg_type"] == f"{kind}_subshell_reply"
            assert reply["content"]["status"] == "error", reply
        # The kernel goes on as before.
        out = await kernel.execute("print('still here')", timeout=10)
        assert out.parts == (OutputPart("stdout", "still here\n"),)
    finally:
        client.stop_channels()


async def test_a_kernel_runs_without_the_debugger(kernel: Kernel) -> None:
    # recursa.api.launcher keeps debugpy (the Jupyter debugger, ~15 MB) out.
    probe = "import sys\nprint(sys.modules.get('debugpy', 'absent'), 'pydevd' in sys.modules)"
    out = await kernel.execute(probe, timeout=10)
    assert out.parts == (OutputPart("stdout", "None False\n"),)


async def test_variables_persist_between_cells(kernel: Kernel) -> None:
    assert (await kernel.execute("x = 41", timeout=10)).parts == ()
    out = await kernel.execute("x + 1", timeout=10)
    assert out.parts == (OutputPart("result", "42"),)
    assert out.execution_count == 2


async def test_output_that_is_not_utf8_becomes_valid_text(kernel: Kernel) -> None:
    out = await kernel.execute("%%bash\nprintf 'a\\xff\\xfeb\\n'\n", timeout=10)
    text = out.text()
    text.encode("utf-8")
    assert text.startswith("a")
    assert text.rstrip().endswith("b")
    out = await kernel.execute(
        "import os\nprint('lone \\udcff surrogate', flush=True)\nos.write(1, b'raw \\xff byte\\n')\n",
        timeout=10,
    )
    assert out.status == "ok"
    text = out.text()
    text.encode("utf-8")
    assert "lone" in text
    # A lone surrogate in the code itself reaches the kernel, which reports on it.
    out = await kernel.execute("x = '\ud800'", timeout=10)
    assert out.status in ("ok", "error")
    out.text().encode("utf-8")
    assert (await kernel.execute("'still fine'", timeout=10)).status == "ok"
    assert "surrogate" in text


async def test_five_megabytes_of_output_are_captured(kernel: Kernel) -> None:
    out = await kernel.execute("print('x' * 5_000_000)", timeout=30)
    assert out.status == "ok"
    assert out.parts == (OutputPart("stdout", "x" * 5_000_000 + "\n"),)
    assert out.note == ""


async def test_output_past_the_cap_is_counted_not_kept(make_kernel: Callable[..., Kernel]) -> None:
    async with make_kernel(max_output_chars=1_000_000) as kernel:
        out = await kernel.execute("print('x' * 5_000_000)\n1 / 0", timeout=30)
    assert out.status == "error"
    assert kinds(out) == ["stdout", "error"]
    assert out.parts[0].text == "x" * 1_000_000
    assert "ZeroDivisionError" in out.parts[1].text  # the error survives the flood
    assert "beyond 1,000,000 characters" in out.note
    assert "4,000,001 more characters were dropped" in out.note


async def test_set_output_is_silent(kernel: Kernel) -> None:
    first = await kernel.execute("a = 1", timeout=10)
    full = "line ✓\n" * 300_000 + "lone \udcff \ud800"
    await kernel.set_output(first.execution_count or 0, full)
    out = await kernel.execute("len(_out[1]), _out[1][:6]", timeout=10)
    assert out.execution_count == (first.execution_count or 0) + 1  # no count used by set_output
    assert out.parts == (OutputPart("result", f"({len(full)}, 'line ✓')"),)


# -- limits and interrupts -------------------------------------------------------------


async def test_timeout_interrupts_and_keeps_the_namespace(kernel: Kernel) -> None:
    await kernel.execute("kept = 'yes'", timeout=10)
    pid = kernel.pid
    began = time.monotonic()
    out = await kernel.execute(
        "import time\nprint('working', flush=True)\ntime.sleep(30)", timeout=0.5
    )
    assert time.monotonic() - began < 3
    assert out.status == "timeout"
    assert out.note == "the cell ran past its 0.5 s limit and was interrupted; variables are kept"
    assert out.parts[0] == OutputPart("stdout", "working\n")
    assert "KeyboardInterrupt" in out.parts[-1].text
    assert not out.restarted
    assert kernel.restarts == 0
    assert kernel.pid == pid
    assert (await kernel.execute("kept", timeout=10)).parts == (OutputPart("result", "'yes'"),)


async def test_code_that_ignores_interrupts_gets_a_restarted_kernel(
    make_kernel: Callable[..., Kernel],
) -> None:
    async with make_kernel(interrupt_grace=0.5) as kernel:
        await kernel.execute("doomed = 1", timeout=10)
        pid = kernel.pid
        code = (
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n"
        )
        began = time.monotonic()
        out = await kernel.execute(code, timeout=0.3)
        assert time.monotonic() - began < 5
        assert out.status == "timeout"
        assert out.note == (
            "the cell ran past its 0.3 s limit and did not stop when interrupted, "
            "so the kernel was restarted; all variables are gone"
        )
        assert out.restarted
        assert kernel.restarts == 1
        assert kernel.pid != pid
        after = await kernel.execute("'doomed' in globals(), 2 + 2", timeout=10)
        assert after.parts == (OutputPart("result", "(False, 4)"),)
        assert not after.restarted  # told once, with the cell it happened to


async def test_interrupt_on_request(kernel: Kernel) -> None:
    started = asyncio.Event()
    task = asyncio.create_task(
        kernel.execute(
            "import time\nprint('go', flush=True)\ntime.sleep(30)",
            timeout=60,
            on_output=lambda part: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 10)
    await kernel.interrupt()
    out = await asyncio.wait_for(task, 10)
    assert out.status == "interrupted"
    assert out.note == "the cell was interrupted on request; variables are kept"
    assert not out.restarted
    assert kernel.restarts == 0


async def test_a_cancelled_cell_does_not_keep_running(kernel: Kernel) -> None:
    started = asyncio.Event()
    task = asyncio.create_task(
        kernel.execute(
            "import time\nprint('go', flush=True)\ntime.sleep(30)",
            timeout=60,
            on_output=lambda part: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    began = time.monotonic()
    out = await kernel.execute("'free'", timeout=10)
    assert out.parts == (OutputPart("result", "'free'"),)
    assert time.monotonic() - began < 5
    # It stopped when interrupted: nothing to tell the next cell.
    assert out.note == ""
    assert not out.restarted
    assert kernel.restarts == 0


async def test_a_cancelled_cell_that_ignores_interrupts_is_stopped_before_the_next_one(
    make_kernel: Callable[..., Kernel],
) -> None:
    async with make_kernel(interrupt_grace=1.0) as kernel:
        await kernel.execute("kept = 1", timeout=10)
        pid = kernel.pid
        seen: list[OutputPart] = []
        started = asyncio.Event()

        def watch(part: OutputPart) -> None:
            seen.append(part)
            started.set()

        task = asyncio.create_task(kernel.execute(IGNORES_INTERRUPTS, timeout=60, on_output=watch))
        await asyncio.wait_for(started.wait(), 10)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The caller is not kept waiting through the interrupt grace ...
        assert time.monotonic() - cancelled_at < 0.5
        heard = len(seen)
        # ... but the next cell is: it runs in a kernel that is free again,
        # and is told why its variables are gone, not blamed for it.
        out = await kernel.execute("'kept' in globals()", timeout=5)
        assert out.status == "ok"
        assert out.parts == (OutputPart("result", "False"),)
        assert out.restarted
        assert out.note == (
            "the previous cell was cancelled but did not stop when interrupted, so the kernel "
            "was restarted before this cell ran; variables from earlier cells are gone"
        )
        assert kernel.restarts == 1
        assert kernel.pid != pid
        assert len(seen) == heard  # the cancelled caller heard nothing more
        after = await kernel.execute("1", timeout=5)
        assert (after.note, after.restarted) == ("", False)


async def test_shutdown_ends_the_stopping_of_a_cancelled_cell(
    make_kernel: Callable[..., Kernel],
) -> None:
    kernel = make_kernel(interrupt_grace=60.0)
    await kernel.start()
    started = asyncio.Event()
    task = asyncio.create_task(
        kernel.execute(IGNORES_INTERRUPTS, timeout=60, on_output=lambda part: started.set())
    )
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    began = time.monotonic()
    await asyncio.wait_for(kernel.shutdown(), 10)
    assert time.monotonic() - began < 5  # not the 60 s grace
    assert not kernel.is_alive()
    assert asyncio.all_tasks() == {asyncio.current_task()}  # the kernel left no task behind


# -- death and restarts -------------------------------------------------------------------


async def test_kill_9_during_a_cell_is_noticed_within_two_seconds(kernel: Kernel) -> None:
    await kernel.execute("lost = 1", timeout=10)
    started = asyncio.Event()
    task = asyncio.create_task(
        kernel.execute(
            "import time\nprint('go', flush=True)\ntime.sleep(30)",
            timeout=60,
            on_output=lambda part: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 10)
    old_pid = kernel.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    out = await asyncio.wait_for(task, 10)
    assert time.monotonic() - killed_at < 2.0
    assert out.status == "kernel_died"
    assert out.note == (
        "the kernel process died while the cell ran (killed by SIGKILL), "
        "so it was restarted; all variables are gone"
    )
    assert out.parts == (OutputPart("stdout", "go\n"),)
    assert out.restarted
    assert kernel.restarts == 1
    assert kernel.pid not in (None, old_pid)
    after = await kernel.execute("'lost' in globals()", timeout=10)
    assert after.status == "ok"
    assert after.parts == (OutputPart("result", "False"),)


async def test_exit_from_inside_a_cell_is_a_death(kernel: Kernel) -> None:
    out = await kernel.execute("import os\nos._exit(1)", timeout=10)
    assert out.status == "kernel_died"
    assert "(exit code 1)" in out.note
    assert out.restarted
    assert (await kernel.execute("1 + 1", timeout=10)).parts == (OutputPart("result", "2"),)


async def test_a_kernel_found_dead_is_restarted_before_the_cell(kernel: Kernel) -> None:
    pid = kernel.pid
    assert pid is not None
    watch = pidfd(pid)
    os.kill(pid, signal.SIGKILL)
    await exited(watch)
    assert not kernel.is_alive()
    out = await kernel.execute("'fresh'", timeout=10)
    assert out.status == "ok"
    assert out.parts == (OutputPart("result", "'fresh'"),)
    assert out.note == (
        "the kernel process had died since the last cell (killed by SIGKILL), so it was restarted "
        "before this cell ran; variables from earlier cells are gone"
    )
    assert out.restarted
    assert kernel.restarts == 1


async def test_restart_and_idempotent_shutdown(
    make_kernel: Callable[..., Kernel], workdir: Path
) -> None:
    kernel = make_kernel()
    await kernel.start()
    await kernel.execute("v = 1", timeout=10)
    pid = kernel.pid
    connection_file = kernel.connection_file
    assert connection_file.exists()
    await kernel.restart()
    assert kernel.is_alive()
    assert kernel.pid != pid
    assert kernel.restarts == 1
    out = await kernel.execute("import os\n'v' in globals(), os.getcwd()", timeout=10)
    assert out.parts == (OutputPart("result", f"(False, {str(workdir)!r})"),)
    assert connection_file.exists()  # the same file serves the new process
    await kernel.shutdown()
    await kernel.shutdown()
    assert kernel.pid is None
    assert not kernel.is_alive()
    assert not connection_file.exists()
    assert list(connection_file.parent.iterdir()) == []
    with pytest.raises(KernelError):
        await kernel.execute("1", timeout=10)


async def test_chdir_moves_the_kernel_and_its_restarts(kernel: Kernel, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    await kernel.chdir(other)
    assert kernel.cwd == other
    assert (await kernel.execute("import os; os.getcwd()", timeout=10)).parts == (
        OutputPart("result", repr(str(other))),
    )
    with pytest.raises(KernelError):
        await kernel.chdir(tmp_path / "missing")
    await kernel.restart()
    assert (await kernel.execute("import os; os.getcwd()", timeout=10)).parts == (
        OutputPart("result", repr(str(other))),
    )


async def test_a_kernel_that_cannot_start_raises_and_leaves_nothing(
    make_kernel: Callable[..., Kernel], tmp_path: Path
) -> None:
    with pytest.raises(KernelError, match="exited while starting"):
        await make_kernel(python="/bin/false").start()
    with pytest.raises(KernelError, match="could not start"):
        await make_kernel(python=str(tmp_path / "no-python")).start()
    leftovers = [p.name for p in (tmp_path / "rt").iterdir()]
    assert leftovers == []


async def test_a_deep_runtime_dir_still_gets_short_socket_paths(
    config: Config, workdir: Path, tmp_path: Path
) -> None:
    runtime = tmp_path / ("deep" * 15) / "kernels"
    async with Kernel(workdir, config.kernel.env, runtime_dir=runtime) as kernel:
        assert kernel.connection_file.parent == runtime
        prefix = json.loads(kernel.connection_file.read_text())["ip"]
        sockets = list(Path(prefix).parent.glob(Path(prefix).name + "-*"))
        assert sockets
        assert all(len(str(s)) < 104 for s in sockets)
        assert (await kernel.execute("1 + 1", timeout=10)).parts == (OutputPart("result", "2"),)
    assert not any(s.exists() for s in sockets)
    assert list(runtime.iterdir()) == []


async def test_start_time_is_recorded(kernel: Kernel) -> None:
    assert kernel.startup_time is not None
    assert 0 < kernel.startup_time < 30


# -- environment --------------------------------------------------------------------------


async def test_provider_keys_never_reach_the_kernel(
    monkeypatch: pytest.MonkeyPatch, home: Path, workdir: Path, tmp_path: Path
) -> None:
    canaries = {
        "OPENAI_API_KEY": "sk-canary-openai-5d1f",
        "ANTHROPIC_API_KEY": "sk-ant-canary-77a2",
        "ACME_LLM_KEY": "acme-canary-93c0",
    }
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RECURSA_DAEMON_ONLY", "not for kernels")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[providers.acme]\nkind = "openai"\napi_key_env = "ACME_LLM_KEY"\n'
        '[kernel]\nenv_allow = ["ACME_LLM_KEY"]\n',
        encoding="utf-8",
    )
    env = load_config().kernel.env
    async with Kernel(workdir, env, runtime_dir=tmp_path / "rt") as kernel:
        probe = (
            "import os, json\n"
            f"names, values = {sorted(canaries)!r}, {sorted(canaries.values())!r}\n"
            "print(json.dumps({\n"
            "    'names': [n for n in names if n in os.environ],\n"
            "    'values': [k for k, v in os.environ.items() if any(c in v for c in values)],\n"
            "    'daemon_only': 'RECURSA_DAEMON_ONLY' in os.environ,\n"
            "    'forced_color': [n for n in ('FORCE_COLOR', 'CLICOLOR_FORCE') if n in os.environ],\n"
            "}))\n"
        )
        out = await kernel.execute(probe, timeout=10)
        assert out.status == "ok", out.text()
        assert json.loads(out.text()) == {
            "names": [],
            "values": [],
            "daemon_only": False,
            "forced_color": [],
        }
        pid = kernel.pid
        assert pid is not None
        if sys.platform.startswith("linux"):
            # The environment the process was started with, read from outside.
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            started_with = dict(item.decode().split("=", 1) for item in raw if item)
            # Not even JPY_PARENT_PID: the kernel must not exit with its parent.
            assert set(started_with) - set(env) == set()
            assert {k: started_with[k] for k in env} == dict(env)


async def test_interleaved_streams_and_displays_keep_their_order(kernel: Kernel) -> None:
    code = (
        "import sys\n"
        "from IPython.display import display\n"
        "for i in range(12):\n"
        "    print(f'o{i}', flush=True)\n"
        "    print(f'e{i}', file=sys.stderr, flush=True)\n"
        "    if i % 5 == 0:\n"
        "        display(i)\n"
    )
    expected: list[OutputPart] = []
    for i in range(12):
        expected += [OutputPart("stdout", f"o{i}\n"), OutputPart("stderr", f"e{i}\n")]
        if i % 5 == 0:
            expected.append(OutputPart("display", str(i)))
    for _ in range(10):
        out = await kernel.execute(code, timeout=10)
        assert list(out.parts) == expected


def stream_text(out: CellOutput, kind: str) -> str:
    return "".join(p.text for p in out.parts if p.kind == kind)


async def test_output_below_python_is_captured_and_not_logged(
    kernel: Kernel, tmp_path: Path
) -> None:
    # What a cell writes to the descriptors (a subprocess, C code) reaches the
    # kernel through a pipe per stream. All of it belongs to the cell that
    # wrote it, in order, however late the thread reading the pipe runs: a
    # line written just before the cell ends, and more than a pipe holds.
    small = "import os\nos.system('echo from-a-subprocess')\nNone"
    for _ in range(50):
        out = await kernel.execute(small, timeout=10)
        assert out.parts == (OutputPart("stdout", "from-a-subprocess\n"),)
    large = (
        "import os\n"
        "os.system('seq -f out-%g 1 20000; seq -f err-%g 1 2000 >&2')\n"
        "os.write(1, b'last\\n')\n"
        "None"
    )
    want_out = "".join(f"out-{i}\n" for i in range(1, 20001)) + "last\n"
    want_err = "".join(f"err-{i}\n" for i in range(1, 2001))
    for _ in range(10):
        out = await kernel.execute(large, timeout=10)
        assert out.status == "ok"
        assert set(kinds(out)) == {"stdout", "stderr"}
        assert stream_text(out, "stdout") == want_out
        assert stream_text(out, "stderr") == want_err
    # Were ipykernel's own watcher threads reading the pipes again (after a
    # change in its internals), this test would turn flaky instead of failing.
    probe = "import threading\nsorted(t.name for t in threading.enumerate() if 'pump' in t.name)"
    out = await kernel.execute(probe, timeout=10)
    assert out.parts == (OutputPart("result", "['recursa-stderr-pump', 'recursa-stdout-pump']"),)
    logs = list((tmp_path / "rt").glob("*.log"))
    assert len(logs) == 1
    assert b"from-a-subprocess" not in logs[0].read_bytes()


async def test_output_below_python_comes_before_the_result_or_the_traceback(
    kernel: Kernel,
) -> None:
    for _ in range(25):
        out = await kernel.execute("import os\nos.system('echo first')\n'then'", timeout=10)
        assert out.parts == (OutputPart("stdout", "first\n"), OutputPart("result", "'then'"))
        out = await kernel.execute("import os\nos.system('echo first')\n1 / 0", timeout=10)
        assert kinds(out) == ["stdout", "error"]
        assert out.parts[0] == OutputPart("stdout", "first\n")


async def test_writes_to_the_streams_descriptors_are_captured(
    kernel: Kernel, tmp_path: Path
) -> None:
    # sys.stdout.fileno() is what subprocess (and faulthandler, and C code
    # handed a stream) writes to.
    code = (
        "import subprocess, sys\n"
        "subprocess.run(['echo', 'x'], stdout=sys.stdout)\n"
        "subprocess.run(['sh', '-c', 'echo y >&2'], stderr=sys.stderr)\n"
        "sys.stdout.fileno(), sys.stderr.fileno()"
    )
    out = await kernel.execute(code, timeout=10)
    assert out.status == "ok"
    assert stream_text(out, "stdout") == "x\n"
    assert stream_text(out, "stderr") == "y\n"
    assert out.parts[-1] == OutputPart("result", "(1, 2)")
    logs = list((tmp_path / "rt").glob("*.log"))
    assert len(logs) == 1
    assert logs[0].read_bytes() == b""


async def test_a_progress_bar_reaches_the_model_as_its_last_state(kernel: Kernel) -> None:
    # Drawn from Python, each redraw flushed on its own (as tqdm does) ...
    code = (
        "import sys\n"
        "for i in range(0, 101, 10):\n"
        "    print(f'\\r{i:3d}%|{\"#\" * (i // 10):<10}|', end='', file=sys.stderr, flush=True)\n"
        "print(file=sys.stderr, flush=True)\n"
        "print('done')\n"
    )
    out = await kernel.execute(code, timeout=10)
    assert out.text() == "100%|##########|\ndone\n"
    # ... and by a program below Python (pip, curl, apt).
    out = await kernel.execute(
        "%%bash\nfor i in 1 2 3; do printf '\\rstep %s/3' $i; done; printf '\\r\\nok\\n'\n",
        timeout=10,
    )
    assert out.text() == "step 3/3\nok\n"


def peak_rss_reset() -> None:
    """Start measuring this process's peak memory from now (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")


def rss(which: str, pid: int | str = "self") -> int:
    """``VmRSS`` (now) or ``VmHWM`` (the peak) of a process, in bytes (Linux)."""
    found = re.search(rf"{which}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert found is not None
    return int(found.group(1)) * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_a_flood_of_output_is_bounded_in_memory_and_counted(
    make_kernel: Callable[..., Kernel],
) -> None:
    # `yes` writes hundreds of megabytes a second. What is kept is capped;
    # the rest is counted; and neither the harness nor the kernel holds the
    # flood in memory on its way (ipykernel would send it in messages of
    # tens of megabytes, and IPython would keep it all for %notebook).
    async with make_kernel(max_output_chars=1_000_000) as kernel:
        await kernel.execute("1", timeout=10)
        assert kernel.pid is not None
        base = rss("VmRSS")
        peak_rss_reset()
        out = await kernel.execute("import os\nstatus = os.system('yes')", timeout=2)
        grown = rss("VmHWM") - base
        kernel_peak = rss("VmHWM", kernel.pid)
        assert out.status == "timeout"
        assert out.parts[0] == OutputPart("stdout", "y\n" * 500_000)
        dropped = re.search(r"([\d,]+) more characters were dropped", out.note)
        assert dropped is not None
        assert int(dropped.group(1).replace(",", "")) > 10_000_000
        assert grown < 64 << 20, f"the harness grew by {grown >> 20} MB"
        assert kernel_peak < 160 << 20, f"the kernel peaked at {kernel_peak >> 20} MB"
        # A flood's text does not stay behind in the kernel either.
        after = await kernel.execute("1", timeout=10)
        assert after.status == "ok"
        assert rss("VmRSS", kernel.pid) < 128 << 20


async def test_a_flood_waits_for_a_busy_harness_and_loses_nothing(
    make_kernel: Callable[..., Kernel],
) -> None:
    # The iopub receive queue is bounded: a kernel that outruns the harness
    # must wait for room, not drop messages.
    async with make_kernel() as kernel:
        busy: list[OutputPart] = []

        def on_output(part: OutputPart) -> None:
            if not busy:
                busy.append(part)
                # The event loop is busy elsewhere for a while (not a wait
                # for anything: the flood goes on meanwhile).
                time.sleep(1.0)

        out = await kernel.execute(
            "import os\nstatus = os.system('seq 1 1500000; echo end >&2')\n'finished'",
            timeout=60,
            on_output=on_output,
        )
        assert out.status == "ok"
        assert stream_text(out, "stdout") == "".join(f"{i}\n" for i in range(1, 1_500_001))
        assert stream_text(out, "stderr") == "end\n"
        assert out.parts[-1] == OutputPart("result", "'finished'")
        assert out.note == ""


async def test_a_character_split_between_pipe_reads_stays_whole(kernel: Kernel) -> None:
    # Three-byte characters: the pipe is read in pieces whose size is not a
    # multiple of three.
    code = "import os\nwritten = os.write(1, ('€' * 5000 + '\\n').encode())"
    out = await kernel.execute(code, timeout=10)
    assert out.parts == (OutputPart("stdout", "€" * 5000 + "\n"),)


async def test_background_thread_output_between_cells_is_dropped(kernel: Kernel) -> None:
    # ipykernel tags a thread's output with the request running when it is
    # printed: a cell may show some, but never what was printed between cells
    # (tagged with an older request), and every cell still ends cleanly.
    start = (
        "import threading, time\n"
        "def chatter():\n"
        "    for _ in range(100):\n"
        "        print('bg', flush=True)\n"
        "        time.sleep(0.002)\n"
        "worker = threading.Thread(target=chatter)\n"
        "worker.start()\n"
    )
    assert (await kernel.execute(start, timeout=10)).status == "ok"
    seen = 0
    for _ in range(5):
        out = await kernel.execute("import time; time.sleep(0.01); 'mine'", timeout=10)
        assert out.status == "ok"
        assert [p for p in out.parts if p.kind != "stdout"] == [OutputPart("result", "'mine'")]
        for part in out.parts:
            if part.kind == "stdout":
                # print() writes "bg" and "\n" separately; a cell boundary
                # can fall between them.
                assert set(part.text.split()) <= {"bg"}
                seen += part.text.count("bg")
    out = await kernel.execute("worker.join()\n'joined'", timeout=10)
    assert [p for p in out.parts if p.kind != "stdout"] == [OutputPart("result", "'joined'")]
    assert seen < 100


async def test_restart_or_shutdown_during_a_cell_ends_the_cell(
    make_kernel: Callable[..., Kernel],
) -> None:
    code = "import time\nprint('go', flush=True)\ntime.sleep(30)"
    async with make_kernel() as kernel:
        started = asyncio.Event()
        task = asyncio.create_task(
            kernel.execute(code, timeout=60, on_output=lambda part: started.set())
        )
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(kernel.restart(), 10)
        out = await task
        assert out.status == "interrupted"
        assert (
            out.note
            == "the kernel was restarted on request while the cell ran; all variables are gone"
        )
        assert out.restarted
        assert kernel.restarts == 1
        assert kernel.is_alive()

        started.clear()
        task = asyncio.create_task(
            kernel.execute(code, timeout=60, on_output=lambda part: started.set())
        )
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(kernel.shutdown(), 10)
        out = await task
        assert out.status == "interrupted"
        assert out.note == "the kernel was shut down while the cell ran"
        assert not out.restarted
        assert not kernel.is_alive()

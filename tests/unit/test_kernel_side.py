"""The kernel-side modules of recursa.api, outside a kernel: restore hooks, the
harness's commands (a snapshot and restore through a stand-in shell), the
stream helpers and the pump on real pipes, and the extension's settings as
the kernel's command line gives them. tests/integration/test_kernel*.py run
the same code in real kernels."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from recursa.api import commands, hooks, pump, streams
from recursa.api.extension import RecursaKernel
from recursa.kernel.commands import (
    command_request,
    command_result,
    inline_command,
    restore_report,
    restore_request,
    snapshot_report,
    snapshot_request,
)
from recursa.kernel.launch import OUTPUT_CHUNK_CHARS, extension_flags
from recursa.kernel.wire import IOPUB_QUEUE_MESSAGES

# -- on_restore ---------------------------------------------------------------------------


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> list[hooks.Hook]:
    fresh: list[hooks.Hook] = []
    monkeypatch.setattr(hooks, "restore_hooks", fresh)
    return fresh


def test_on_restore_registers_in_order_and_replaces_by_name(registry: list[hooks.Hook]) -> None:
    def reopen() -> None:
        pass

    def reconnect() -> None:
        pass

    assert hooks.on_restore(reopen) is reopen
    hooks.on_restore(reconnect)

    def reopen_again() -> None:
        pass

    reopen_again.__qualname__ = reopen.__qualname__  # the same cell run again
    hooks.on_restore(reopen_again)
    assert registry == [reopen_again, reconnect]


def test_on_restore_keeps_every_lambda_and_refuses_what_is_not_callable(
    registry: list[hooks.Hook],
) -> None:
    first, second = (lambda: 1), (lambda: 2)
    hooks.on_restore(first)
    hooks.on_restore(second)
    hooks.on_restore(first)
    assert registry == [first, second]
    with pytest.raises(TypeError, match="takes a function"):
        hooks.on_restore(42)  # type: ignore[type-var]


# -- the harness's commands ---------------------------------------------------------------


class Shell:
    """What the kernel-side code uses of IPython's shell."""

    def __init__(self) -> None:
        self.user_module = types.ModuleType("__main__")
        self.user_ns = self.user_module.__dict__
        self.user_ns_hidden: dict[str, object] = {}
        self.payloads: list[dict[str, object]] = []
        self.payload_manager = self

    def write_payload(self, payload: dict[str, object]) -> None:
        self.payloads.append(payload)

    def reply(self) -> dict[str, object]:
        return {"status": "ok", "payload": self.payloads[-1:]}


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, registry: list[hooks.Hook]) -> Shell:
    import IPython

    made = Shell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: made)
    return made


RESTORED: list[str] = []


def note_restore() -> None:
    RESTORED.append("restored")


def test_a_snapshot_and_a_restore_round_trip_through_the_commands(
    shell: Shell, tmp_path: Path
) -> None:
    path = tmp_path / "ns.dill"
    shell.user_ns.update(numbers=[1, 2, 3], name="x", on_restore=hooks.on_restore)
    hooks.on_restore(note_restore)

    commands.call(snapshot_request(path, 10_000_000))
    report = snapshot_report(shell.reply(), path)
    assert report.names == ("numbers", "name")  # on_restore is the harness's
    assert report.size == path.stat().st_size

    shell.user_ns["numbers"] = "changed"
    shell.user_ns["later"] = 1
    RESTORED.clear()
    commands.call(restore_request(path))
    restored = restore_report(shell.reply(), path)
    assert restored.names == ("numbers", "name")
    assert shell.user_ns["numbers"] == [1, 2, 3]
    assert "later" not in shell.user_ns
    assert RESTORED == ["restored"]
    assert restored.hook_errors == ()


def test_a_failed_command_is_one_line_for_the_harness(shell: Shell, tmp_path: Path) -> None:
    commands.call(restore_request(tmp_path / "missing.dill"))
    with pytest.raises(Exception, match=r"could not restore .* unusable \(missing\)"):
        restore_report(shell.reply(), tmp_path / "missing.dill")
    assert commands.call(json.dumps({"op": "format_disk", "args": {}})) == {
        "error": "KeyError: 'format_disk'"
    }
    assert "error" in commands.call("not json")


def test_set_output_keeps_text_whole_even_when_the_model_replaced_out(shell: Shell) -> None:
    shell.user_ns["_out"] = "the model's own"
    text = "✓ lone \udcff"
    result = commands.call(command_request("set_output", cell=3, text=text))
    assert result == {}
    assert shell.user_ns["_out"] == {3: text}


def test_export_env_refuses_what_is_not_a_string(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECURSA_PROBE", "before")
    refused = commands.call(command_request("export_env", env={"RECURSA_PROBE": 5}))
    assert refused == {"error": "TypeError: environment names and values must be strings"}
    assert os.environ["RECURSA_PROBE"] == "before"
    assert commands.call(command_request("export_env", env={"RECURSA_PROBE": "after"})) == {}
    assert os.environ["RECURSA_PROBE"] == "after"


def test_inline_commands_carry_their_request_as_a_literal(shell: Shell) -> None:
    code = inline_command("bind_skills", skills=[], paths=["x'''\"y"])
    exec(compile(code, "<command>", "exec"), {})
    assert command_result(shell.reply(), "binding failed") == {"errors": {}}


def test_what_a_kernel_sends_back_is_checked() -> None:
    hostile: list[dict[str, object]] = [
        {"payload": "not a list"},
        {"payload": [{"source": "recursa", "result": ["not", "a", "dict"]}]},
        {"payload": [{"source": "someone else", "result": {}}]},
    ]
    for reply in hostile:
        with pytest.raises(Exception, match="the kernel sent no report"):
            command_result(reply, "no")
    odd = {"payload": [{"source": "recursa", "result": {"names": 5, "size": "big"}}]}
    report = snapshot_report(odd, Path("p"))
    assert (report.names, report.size, report.skipped) == ((), 0, {})


# -- streams and the pump -----------------------------------------------------------------


class Stream:
    """Enough of ipykernel's OutStream for the helpers: held text, a flush."""

    name = "stdout"

    def __init__(self, fid: int | None = None, fd: int | None = None) -> None:
        self._buffer_lock = threading.Lock()
        self._buffers: dict[object, io.StringIO] = {}
        self._fid = fid
        self._original_stdstream_fd = fd
        self._should_watch = True
        self.flushes = 0
        self.text: list[str] = []

    def write(self, text: str) -> int:
        self.text.append(text)
        self._buffers.setdefault(None, io.StringIO()).write(text)
        return len(text)

    def flush(self) -> None:
        self.flushes += 1
        self._buffers.clear()


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_feeds_pipe_answers_the_descriptor_of_the_streams_own_pipe(
    pipe: tuple[int, int], tmp_path: Path
) -> None:
    read_end, write_end = pipe
    assert streams.feeds_pipe(Stream(read_end, write_end)) == write_end
    with (tmp_path / "f").open("w") as other:
        assert streams.feeds_pipe(Stream(read_end, other.fileno())) is None
    assert streams.feeds_pipe(object()) is None


def test_a_bounded_writer_sends_what_it_holds_past_the_chunk() -> None:
    stream = Stream()
    write = streams.bounded(stream, stream.write, chunk_chars=10)
    write("12345")
    assert (streams.held(stream), stream.flushes) == (5, 0)
    write("678901")
    assert (streams.held(stream), stream.flushes) == (0, 1)
    assert streams.held(object()) == 0


class SendsFirst:
    """A stream's lock that the IOPub thread gets just before the caller: it
    swaps in new buffers and closes the old ones, as ipykernel's flush does."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.inner = threading.Lock()

    def __enter__(self) -> None:
        old, self.stream._buffers = self.stream._buffers, {}
        for buffer in old.values():
            buffer.close()
        self.inner.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.inner.release()


def test_held_reads_the_buffers_the_iopub_thread_left() -> None:
    # A flooding cell died of "I/O operation on closed file" when a flush came
    # between reading the buffers and taking the lock.
    stream = Stream()
    stream.write("12345")
    stream._buffer_lock = SendsFirst(stream)  # type: ignore[assignment]
    assert streams.held(stream) == 0


def test_a_drain_forwards_what_the_pipe_holds_and_keeps_characters_whole(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    stream = Stream(read_end, write_end)
    pumped = pump.Pump(stream, read_end, chunk_chars=1000)
    euro = "€".encode()
    os.write(write_end, b"a" + euro[:1])
    pumped.drain(final=False)
    os.write(write_end, euro[1:] + b"b")
    pumped.drain(final=False)
    os.write(write_end, euro[:2])
    pumped.drain(final=True)  # the end of a request cuts a character short
    assert "".join(stream.text) == "a€b\ufffd"


def test_a_pump_forwards_until_the_pipe_closes(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    stream = Stream(read_end, write_end)
    pumped = pump.Pump(stream, read_end, chunk_chars=4)
    thread = threading.Thread(target=pumped.run)
    thread.start()
    os.write(write_end, b"hello, world")
    os.close(write_end)
    thread.join(10)
    assert not thread.is_alive()
    assert "".join(stream.text) == "hello, world"
    assert stream.flushes >= 1  # more than chunk_chars held: sent at once


# -- the extension's settings -------------------------------------------------------------


def test_the_extension_reads_its_settings_from_the_kernels_command_line() -> None:
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp()
    app.parse_command_line(list(extension_flags()))
    settings = RecursaKernel(config=app.config)
    assert settings.output_chunk_chars == OUTPUT_CHUNK_CHARS
    assert settings.iopub_send_queue == IOPUB_QUEUE_MESSAGES


def test_only_the_kernels_the_harness_launches_leave_out_the_busy_status() -> None:
    from ipykernel.kernelapp import IPKernelApp

    from recursa.api.kernelapp import HarnessKernel
    from recursa.kernel.launch import KERNEL_FLAGS

    # On by default (a Jupyter server reads busy); off on the harness's command line.
    trait = HarnessKernel.class_traits()["publish_busy"]
    assert trait.default_value is True
    app = IPKernelApp()
    app.parse_command_line(list(KERNEL_FLAGS))
    assert app.config.HarnessKernel.publish_busy.get_value(trait) is False


def test_the_api_transport_is_a_setting_of_the_extension() -> None:
    from ipykernel.kernelapp import IPKernelApp
    from traitlets import TraitError

    assert RecursaKernel().api_transport == "socket"
    app = IPKernelApp()
    app.parse_command_line(["--RecursaKernel.api_transport=comm"])
    assert RecursaKernel(config=app.config).api_transport == "comm"
    app = IPKernelApp()
    app.parse_command_line(["--RecursaKernel.api_transport=pigeon"])
    with pytest.raises(TraitError):
        RecursaKernel(config=app.config)

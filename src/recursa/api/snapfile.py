"""Runs inside the kernel: the snapshot file, written and read with dill.

:mod:`recursa.api.namespace` decides what goes in it. It imports only the
standard library, :mod:`recursa.errors` and :mod:`recursa.files` (which import
nothing else); dill is handed in by the caller.

The file: :data:`MAGIC`, one record per value, a trailer. A record is a
header (kind, name length, data length, the pickle memo's size after it, the
SHA-256 of its data), the name, and the data: one complete pickle. The
trailer holds the record count, the length of the file before it and the
SHA-256 of all headers, and ends with :data:`TRAILER`. A file that is torn
or damaged anywhere is refused whole (:class:`Corrupt`).

All records of a file share one pickle memo: an object reached from two
variables is one object again after a restore, and an instance still
belongs to the class restored beside it. A value that fails to pickle takes
its bytes and its memo entries with it, so no later record refers to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import struct
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from recursa.errors import one_line
from recursa.files import fsync_dir

MAGIC = b"RECURSA-NAMESPACE-1\n"
TRAILER = b"RECURSA-END\n"
VARIABLE, HOOKS = 0, 1
"""Record kinds: one variable; the list of restore hooks."""
PROTOCOL = 5
_HEADER = struct.Struct("<BIQQ32s")
_TAIL = struct.Struct("<QQ32s")
_READ_CHUNK = 1 << 20
REASON_CHARS = 200
"""The longest reason a failed value or hook is given."""

Memo = dict[int, tuple[int, object]]


class Corrupt(Exception):
    """The file is torn or damaged: none of it is used."""


class TooBig(BaseException):
    """One value's pickle outgrew the cap. Not an :class:`Exception`, so that no
    handler inside dill takes it for a failure of its own."""


# -- writing -----------------------------------------------------------------------------


class Writer:
    """Writes one snapshot file at ``path``: :meth:`add` each value, then :meth:`close`.

    ``main`` is the user's module (IPython's ``__main__``): functions defined
    in cells keep only a reference to its namespace. No value's pickle may
    exceed ``limit`` bytes (:class:`TooBig`).
    """

    def __init__(self, path: str, *, dill: Any, main: ModuleType, limit: int) -> None:
        self.dill = dill
        self.main = main
        self.limit = limit
        self.dispatch = _dispatch_table(dill)
        self.memo: Memo = {}
        self.headers = hashlib.sha256()
        self.count = 0
        # Private: a namespace can hold anything the session saw.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.out: BinaryIO = os.fdopen(fd, "wb")
        self.out.write(MAGIC)

    def add(self, kind: int, name: str, value: object) -> int:
        """Append a record of ``value``; return its data size. If it cannot be
        pickled, the file is as before and the exception propagates."""
        out = self.out
        start = out.tell()
        raw_name = name.encode("utf-8", "surrogatepass")
        out.write(_HEADER.pack(kind, len(raw_name), 0, 0, bytes(32)))
        out.write(raw_name)
        sink = _Sink(out, self.limit)
        mark = len(self.memo)
        try:
            self._pickler(sink, self.memo).dump(value)
        except BaseException:
            for key in [key for key, (index, _) in self.memo.items() if index >= mark]:
                del self.memo[key]
            out.seek(start)
            out.truncate()
            raise
        end = out.tell()
        header = _HEADER.pack(kind, len(raw_name), sink.size, len(self.memo), sink.hash.digest())
        self.headers.update(header)
        out.seek(start)
        out.write(header)
        out.seek(end)
        self.count += 1
        return sink.size

    def check(self, value: object) -> None:
        """Raise what :meth:`add` would for ``value`` alone; write nothing."""
        self._pickler(_Sink(None, self.limit), {}).dump(value)

    def close(self) -> int:
        """Write the trailer, sync, close; return the file's size."""
        out = self.out
        out.write(_TAIL.pack(self.count, out.tell(), self.headers.digest()) + TRAILER)
        out.flush()
        os.fsync(out.fileno())
        size = out.tell()
        out.close()
        return size

    def abort(self) -> None:
        self.out.close()

    def _pickler(self, sink: _Sink, memo: Memo) -> Any:
        pickler = self.dill.Pickler(sink, protocol=PROTOCOL)
        pickler.memo = memo
        pickler._main = self.main
        pickler.dispatch = self.dispatch
        return pickler


class _Sink:
    """Where one record's pickle goes: counted, hashed, capped."""

    def __init__(self, out: BinaryIO | None, limit: int) -> None:
        self.out = out
        self.limit = limit
        self.size = 0
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise TooBig
        if self.out is not None:
            self.hash.update(data)
            self.out.write(data)
        return len(data)


def _dispatch_table(dill: Any) -> Any:
    """dill's table, with modules kept by reference only and files refused.

    dill would keep a module from outside Python and site-packages with all
    its attributes, and put that state back over the module it imports; and
    it would reopen a file by name, which for one open for writing can
    truncate it. The table is per pickler: the user's own dill is unchanged.
    """
    table = dill._dill.MetaCatchingDict(dill.Pickler.dispatch)
    table[ModuleType] = _save_module
    for file_type in (
        io.TextIOWrapper,
        io.BufferedReader,
        io.BufferedWriter,
        io.BufferedRandom,
        io.FileIO,
    ):
        table[file_type] = _refuse_file
    return table


def _save_module(pickler: Any, module: ModuleType) -> None:
    import importlib

    pickler.save_reduce(importlib.import_module, (module.__name__,), obj=module)


def _refuse_file(pickler: Any, file: Any) -> None:
    state = "a closed" if getattr(file, "closed", False) else "an open"
    raise pickle.PicklingError(f"cannot pickle {state} file")


def commit(temporary: str, target: str) -> None:
    """Put the written file in place, keeping the last good one as ``.prev``.

    At every moment ``target`` is a whole snapshot, the old one and then the
    new one: the old is linked to ``.prev`` before the new is renamed over
    it. A ``target`` that is torn does not replace a good ``.prev``.
    """
    previous = f"{target}.prev"
    if os.path.exists(target) and _looks_whole(target):
        link = f"{previous}.{os.getpid()}.tmp"
        try:
            os.link(target, link)
        except OSError:  # a filesystem without hard links
            import shutil

            shutil.copy(target, link)
        os.replace(link, previous)
    os.replace(temporary, target)
    fsync_dir(Path(target).parent)


def temporary_name(target: str) -> str:
    """Where a snapshot of ``target`` is written before it is renamed into place."""
    return f"{target}.{os.getpid()}.tmp"


def sweep(target: str) -> None:
    """Remove what snapshot writers that died (a kernel killed mid-snapshot)
    left beside ``target``: a temporary file can be as big as the cap."""
    import glob

    for pattern in (f"{glob.escape(target)}.*.tmp", f"{glob.escape(target)}.prev.*.tmp"):
        for path in glob.glob(pattern):
            pid = path.rsplit(".", 2)[-2]
            if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _running(pid: int) -> bool:
    # Not recursa.kernel.pids.is_alive: the kernel-side API may not import
    # recursa.kernel (pyproject's contract). A zombie counts as running here,
    # which only leaves its temporary file for a later sweep.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _looks_whole(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            _trailer(f)
    except (OSError, Corrupt):
        return False
    return True


# -- reading -----------------------------------------------------------------------------


def read(path: str, *, dill: Any, main: ModuleType) -> list[tuple[int, str, bool, object]]:
    """Every record of the file as ``(kind, name, ok, value)``, where a record
    that fails to unpickle has ``ok`` false and its reason as ``value``. The
    whole file is checked before anything is unpickled: :class:`Corrupt` (or
    :class:`OSError`) means nothing was."""
    with open(path, "rb") as f:
        index = _index(f)
        loader = _Loader(dill, main)
        records: list[tuple[int, str, bool, object]] = []
        for kind, name, offset, length, memo_end in index:
            f.seek(offset)
            try:
                value = loader.load(f.read(length), memo_end)
            except Exception as exc:
                why = reason(exc)
                if why.startswith("UnpicklingError: Memo value not found"):
                    why = "it refers to a value that could not be restored"
                records.append((kind, name, False, why))
            else:
                records.append((kind, name, True, value))
    return records


def _index(f: BinaryIO) -> list[tuple[int, str, int, int, int]]:
    """(kind, name, data offset, data length, memo end) of every record, once
    the structure and every checksum are found right."""
    if f.read(len(MAGIC)) != MAGIC:
        raise Corrupt("not a recursa snapshot")
    count, body = _trailer(f)
    f.seek(len(MAGIC))
    headers = hashlib.sha256()
    index = []
    while f.tell() < body:
        header = f.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise Corrupt("a torn record")
        headers.update(header)
        kind, name_length, length, memo_end, digest = _HEADER.unpack(header)
        name = f.read(name_length).decode("utf-8", "surrogatepass")
        offset = f.tell()
        if offset + length > body:
            raise Corrupt("a torn record")
        data_hash = hashlib.sha256()
        left = length
        while left:
            chunk = f.read(min(left, _READ_CHUNK))
            if not chunk:
                raise Corrupt("a torn record")
            data_hash.update(chunk)
            left -= len(chunk)
        if data_hash.digest() != digest:
            raise Corrupt(f"the record of {name!r} is damaged")
        index.append((kind, name, offset, length, memo_end))
    f.seek(body)
    if len(index) != count or _TAIL.unpack(f.read(_TAIL.size))[2] != headers.digest():
        raise Corrupt("its index is damaged")
    return index


def _trailer(f: BinaryIO) -> tuple[int, int]:
    """The record count and the body length the trailer declares."""
    size = os.fstat(f.fileno()).st_size
    end = size - _TAIL.size - len(TRAILER)
    if end < len(MAGIC):
        raise Corrupt("torn: too short")
    f.seek(end)
    tail = f.read()
    if not tail.endswith(TRAILER):
        raise Corrupt("torn: it has no end")
    count, body, _ = _TAIL.unpack(tail[: _TAIL.size])
    if body != end:
        raise Corrupt("torn: its length is wrong")
    return int(count), int(body)


class _Loader:
    """Unpickles the records of one file in order, sharing one memo.

    dill's (C) unpickler keeps its memo from one ``load`` to the next, which
    is what the records need; but it cannot be handed a memo, least of all
    one with a gap, which a record that fails leaves. So after a failure the
    remaining records are read by the Python unpickler, whose memo is a dict
    without the failed record's entries: a record that refers to them fails
    too, instead of getting something half built.
    """

    def __init__(self, dill: Any, main: ModuleType) -> None:
        self.feed = _Feed()
        self.main = main
        self.fast = dill.Unpickler(self.feed, ignore=True)
        self.fast._main = main
        self.slow: _PyUnpickler | None = None
        self.memo_end = 0

    def load(self, data: bytes, memo_end: int) -> object:
        self.feed.current = io.BytesIO(data)
        start, self.memo_end = self.memo_end, memo_end
        if self.slow is None:
            try:
                return self.fast.load()
            except Exception:
                memo = _Memo(self.fast.memo.copy())
                memo.drop(start, memo_end)
                self.slow = _PyUnpickler(self.feed, memo, self.main)
                raise
        memo = self.slow.memo
        try:
            return self.slow.load()
        except Exception:
            memo.drop(start, memo_end)
            raise
        finally:
            memo.next = memo_end


class _Feed:
    """The unpicklers' file: the data of the record being read."""

    def __init__(self) -> None:
        self.current = io.BytesIO()

    def read(self, size: int = -1) -> bytes:
        return self.current.read(size)

    def readline(self) -> bytes:
        return self.current.readline()

    def readinto(self, buffer: bytearray | memoryview) -> int:
        return self.current.readinto(buffer)


class _Memo(dict[int, object]):
    """The Python unpickler's memo. Its length is the next index the pickler
    used, even past a gap a failed record left (pickle numbers memo entries
    by the memo's length)."""

    def __init__(self, entries: dict[int, object]) -> None:
        super().__init__(entries)
        self.next = max(entries, default=-1) + 1

    def __len__(self) -> int:
        return self.next

    def __setitem__(self, key: int, value: object) -> None:
        super().__setitem__(key, value)
        self.next = max(self.next, key + 1)

    def drop(self, start: int, end: int) -> None:
        for key in range(start, end):
            self.pop(key, None)
        self.next = end


class _PyUnpickler(pickle._Unpickler):
    """The Python unpickler, finding names as dill's does."""

    memo: _Memo

    def __init__(self, feed: _Feed, memo: _Memo, main: ModuleType) -> None:
        super().__init__(feed)
        self.memo = memo
        self.main = main

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("__builtin__", "__main__"):
            return self.main.__dict__
        if (module, name) == ("__builtin__", "NoneType"):
            return type(None)
        if module == "dill.dill":
            module = "dill._dill"
        return super().find_class(module, name)


# -- reasons -----------------------------------------------------------------------------


def reason(exc: BaseException) -> str:
    """Why something failed: ``Type: message`` on one line, at most
    :data:`REASON_CHARS` characters."""
    return one_line(exc, typed=True, limit=REASON_CHARS)


def message(exc: BaseException) -> str:
    """Why a value could not be pickled, on one line: the message alone (a
    pickling error's type says nothing), or the type if there is no message."""
    return one_line(exc, limit=REASON_CHARS)


__all__ = [
    "HOOKS",
    "MAGIC",
    "TRAILER",
    "VARIABLE",
    "Corrupt",
    "TooBig",
    "Writer",
    "commit",
    "message",
    "read",
    "reason",
    "sweep",
    "temporary_name",
]

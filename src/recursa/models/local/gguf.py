"""Read the metadata header of a GGUF file without loading the model.

A user may point recursa at their own ``.gguf`` file. Before anything is
loaded, :meth:`LocalProvider.info` needs its trained context length and
chat template; llama.cpp can tell, but only by loading the vocabulary (and
logging to stderr). This reader walks the header in pure Python instead.

GGUF layout (little-endian, versions 2 and 3): magic ``GGUF``, ``uint32``
version, ``uint64`` tensor count, ``uint64`` key/value count, then the pairs:
a string key, a ``uint32`` type, the value. Strings are a ``uint64`` length
and UTF-8 bytes; arrays are an element type, a ``uint64`` count and the
elements. Arrays (the vocabulary, the merges) are skipped, not kept: only
scalar values are returned.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

Scalar = str | int | float | bool

_MAGIC = b"GGUF"
_STRING = 8
_ARRAY = 9
_FIXED: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_MAX_STRING = 1 << 26
"""A longer string is not plausible metadata; refusing it bounds memory on garbage input."""


class GGUFError(ValueError):
    """The file is not a GGUF file this reader understands."""


@dataclass(frozen=True, slots=True)
class GGUFFacts:
    """The facts recursa needs from a GGUF header."""

    architecture: str | None
    context_length: int | None
    chat_template: str | None
    name: str | None


def read_metadata(path: Path) -> dict[str, Scalar]:
    """Every scalar key/value of the header at ``path``; arrays are skipped.

    Raises :class:`GGUFError` for a file that is not GGUF v2/v3 or is cut short,
    and :class:`OSError` when it cannot be read.
    """
    with path.open("rb") as stream:
        if stream.read(4) != _MAGIC:
            raise GGUFError(f"{path} is not a GGUF file")
        version = _unpack(stream, "<I")
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version} is not supported")
        _unpack(stream, "<Q")  # tensor count
        count = _unpack(stream, "<Q")
        out: dict[str, Scalar] = {}
        for _ in range(count):
            key = _string(stream)
            kind = _unpack(stream, "<I")
            if kind == _ARRAY:
                _skip_array(stream)
            else:
                out[key] = _value(stream, kind)
        return out


def facts(path: Path) -> GGUFFacts:
    """The architecture, trained context length, chat template and name of ``path``."""
    meta = read_metadata(path)
    arch = meta.get("general.architecture")
    arch_name = arch if isinstance(arch, str) else None
    length = meta.get(f"{arch_name}.context_length") if arch_name else None
    template = meta.get("tokenizer.chat_template")
    name = meta.get("general.name")
    return GGUFFacts(
        architecture=arch_name,
        context_length=length if isinstance(length, int) and not isinstance(length, bool) else None,
        chat_template=template if isinstance(template, str) else None,
        name=name if isinstance(name, str) else None,
    )


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise GGUFError("the GGUF header is cut short")
    return data


def _unpack(stream: BinaryIO, fmt: str) -> int:
    value: int = struct.unpack(fmt, _read(stream, struct.calcsize(fmt)))[0]
    return value


def _string(stream: BinaryIO) -> str:
    size = _unpack(stream, "<Q")
    if size > _MAX_STRING:
        raise GGUFError("a GGUF string is implausibly long")
    return _read(stream, size).decode("utf-8", errors="replace")


def _value(stream: BinaryIO, kind: int) -> Scalar:
    if kind == _STRING:
        return _string(stream)
    fmt = _FIXED.get(kind)
    if fmt is None:
        raise GGUFError(f"unknown GGUF value type {kind}")
    value: Scalar = struct.unpack(fmt, _read(stream, struct.calcsize(fmt)))[0]
    return value


def _skip_array(stream: BinaryIO) -> None:
    kind = _unpack(stream, "<I")
    count = _unpack(stream, "<Q")
    if kind == _STRING:
        for _ in range(count):
            size = _unpack(stream, "<Q")
            stream.seek(size, 1)
    elif kind == _ARRAY:
        for _ in range(count):
            _skip_array(stream)
    else:
        fmt = _FIXED.get(kind)
        if fmt is None:
            raise GGUFError(f"unknown GGUF array element type {kind}")
        stream.seek(struct.calcsize(fmt) * count, 1)


__all__ = ["GGUFError", "GGUFFacts", "Scalar", "facts", "read_metadata"]

"""Files replaced whole: a reader, or a restart after a crash, sees the old file or the new one.

The one way recursa writes a file that must never be seen half-written (the
daemon's state file, an assembled model file and its marker): the content
goes to a fresh temporary file beside the target, which is flushed and
fsynced, given its mode, renamed over the target, and then the directory is
fsynced so the rename itself survives a power loss. Until the rename nothing
at the target changes; if the writer fails (or the caller's check raises in
the block), the temporary file is removed and the target is untouched.

This module imports nothing from recursa: every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

TEMP_SUFFIX = ".tmp"
"""The temporary file is ``.<target name>.<random>.tmp`` in the target's directory."""


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into; it replaces ``path``
    (with permission bits ``mode``) when the block ends, and never if it raises.

    The temporary file is created 0600 and only then given ``mode``, so a
    private file is never readable by others, not even for a moment. Its
    name is ``out.name``, for messages about what was written. Raises the
    ``OSError`` of whatever step fails; the temporary file is gone by then.
    """
    out = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed below, kept on success)
        prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent, delete=False
    )
    temp = Path(out.name)
    try:
        with out:
            yield out
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data`` (permission bits ``mode``) as :func:`atomic_file` does."""
    with atomic_file(path, mode=mode) as out:
        out.write(data)


def fsync_dir(directory: Path) -> None:
    """Make the names in ``directory`` durable (a rename or a new link in it)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["TEMP_SUFFIX", "atomic_file", "fsync_dir", "write_atomic"]

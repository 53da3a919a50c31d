"""``--context-file PATH`` (``recursa run``, ``recursa send``): files whose
text the session puts in its kernel as variables (``context``, or
``context_1``, ``context_2``, ... for several) before the model's first call;
the task stays the model's message, with a short description of each file
after it (:mod:`recursa.session.inputs`).

The CLI reads the files, not the daemon: they are the user's, named from
the user's directory, and the daemon may run as another sandboxed process.
Their text travels in the request, so the whole of it must fit one request
(:data:`MAX_TOTAL_BYTES`). Every problem is one line and exit 2, before
anything is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from recursa.errors import UsageError
from recursa.protocol.fields import MAX_ITEMS, MAX_TEXT_CHARS
from recursa.protocol.wire import ContextFile

MAX_TOTAL_BYTES = 12 << 20
"""The files' bytes together: a request carries them as JSON strings, which
escaping can make longer, under the daemon's cap on a request's body (16 MiB)."""

OPTION = "--context-file"

ContextFileOpt = Annotated[
    list[Path] | None,
    typer.Option(
        OPTION,
        help="A file whose text the agent gets in its kernel as the variable `context` "
        "(context_1, context_2, ... for several); repeatable.",
    ),
]


def read_context_files(paths: list[Path] | None) -> tuple[ContextFile, ...]:
    """The text of each file in ``paths``, in order, labelled with the path as
    given. Raises :class:`UsageError` (one line naming the file) for a file
    that is missing, not a regular file, unreadable, not UTF-8 text, or too
    big for one request."""
    if not paths:
        return ()
    if len(paths) > MAX_ITEMS:
        raise UsageError(f"{OPTION}: at most {MAX_ITEMS} files")
    files: list[ContextFile] = []
    total = 0
    for path in paths:
        text = _read(path, MAX_TOTAL_BYTES - total)
        total += len(text.encode("utf-8"))
        files.append(ContextFile(label=str(path), text=text))
    return tuple(files)


def _read(path: Path, room: int) -> str:
    where = f"{OPTION} {path}"
    try:
        if not path.is_file():
            why = "not a regular file" if path.exists() else "no such file"
            raise UsageError(f"{where}: {why}")
        size = path.stat().st_size
        if size > room:
            raise UsageError(
                f"{where}: too big ({size:,} bytes; the files together may have "
                f"{MAX_TOTAL_BYTES:,}): put it in the workspace and let the agent read it"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not UTF-8 text (byte {exc.start:,} is not)") from None
    if len(text) > MAX_TEXT_CHARS:
        raise UsageError(f"{where}: more than {MAX_TEXT_CHARS:,} characters")
    return text


__all__ = ["MAX_TOTAL_BYTES", "ContextFileOpt", "read_context_files"]

"""Snapshot files passed between a sandboxed kernel and the harness, through
the kernel's own directory.

A sandboxed kernel may write only its workspace and its own directory; a
session's snapshot lives in the session's directory under ``RECURSA_HOME``,
which no kernel sees (another session's snapshot there would be code run in
that session's kernel at its next restore). So the kernel writes a snapshot
into its own directory and the harness moves it into place
(:func:`install`); to restore, the harness puts the snapshot (and the one
before it) into the kernel's directory (:func:`stage`) and removes it after.

Everything in the kernel's directory is the kernel's, so it is hostile: a
file is taken only as the regular file it was when opened without following
links, never through a link the kernel put there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from recursa.errors import KernelError

SNAPSHOT_NAME = "snapshot.dill"
"""What a sandboxed kernel writes its snapshot as, in its directory."""
RESTORE_NAME = "restore.dill"
"""What a sandboxed kernel restores from, in its directory (``.prev`` beside it)."""


def outbox(kernel_dir: Path) -> Path:
    """Where the kernel writes its next snapshot, with nothing left there
    from an earlier one (or from the kernel)."""
    target = kernel_dir / SNAPSHOT_NAME
    _remove(target, Path(f"{target}.prev"))
    return target


def install(written: Path, target: Path) -> None:
    """Move the snapshot the kernel wrote at ``written`` to ``target``,
    atomically, keeping the file it replaces as ``<target>.prev`` (as the
    kernel does when it writes in place). Raises :class:`KernelError` if
    ``written`` is not a regular file (the kernel replaced it by a link)."""
    incoming = target.with_name(f"{target.name}.{os.getpid()}.in.tmp")
    try:
        fd = os.open(written, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise KernelError(f"the kernel's snapshot {written} cannot be read: {exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KernelError(f"the kernel's snapshot {written} is not a regular file")
        try:
            os.rename(written, incoming)
            moved = os.lstat(incoming)
            if (moved.st_dev, moved.st_ino) != (info.st_dev, info.st_ino):
                raise KernelError(f"the kernel's snapshot {written} changed while it was moved")
        except OSError:
            # Another filesystem (a kernel directory under /tmp): copy what was opened.
            _copy_fd(fd, incoming)
    except BaseException:
        with contextlib.suppress(OSError):
            incoming.unlink()
        raise
    finally:
        os.close(fd)
    _replace_keeping_previous(incoming, target)


def stage(snapshot: Path, kernel_dir: Path) -> Path:
    """Put ``snapshot`` and ``<snapshot>.prev`` (those that exist) into the
    kernel's directory; returns where the kernel reads the first. Links when
    it can, copies otherwise; :func:`unstage` removes them."""
    staged = kernel_dir / RESTORE_NAME
    unstage(kernel_dir)
    for source, copy in ((snapshot, staged), (Path(f"{snapshot}.prev"), Path(f"{staged}.prev"))):
        try:
            os.link(source, copy, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            try:
                shutil.copyfile(source, copy, follow_symlinks=False)
            except OSError as exc:
                raise KernelError(
                    f"cannot hand the snapshot {source} to the kernel: {exc}"
                ) from None
    return staged


def unstage(kernel_dir: Path) -> None:
    """Remove what :func:`stage` put in the kernel's directory."""
    staged = kernel_dir / RESTORE_NAME
    _remove(staged, Path(f"{staged}.prev"))


def _replace_keeping_previous(incoming: Path, target: Path) -> None:
    previous = Path(f"{target}.prev")
    link = Path(f"{previous}.{os.getpid()}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            os.link(target, link, follow_symlinks=False)
            os.replace(link, previous)
        os.replace(incoming, target)
    except OSError as exc:
        _remove(incoming, link)
        raise KernelError(f"cannot put the kernel's snapshot in place at {target}: {exc}") from None


def _copy_fd(fd: int, destination: Path) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    with open(fd, "rb", closefd=False) as source, destination.open("xb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def _remove(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


__all__ = ["RESTORE_NAME", "SNAPSHOT_NAME", "install", "outbox", "stage", "unstage"]

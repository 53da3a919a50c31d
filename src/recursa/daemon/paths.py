"""Where a daemon's files live under ``RECURSA_HOME``, and how each is written.

::

    $RECURSA_HOME/            0700 when the daemon makes it; an existing home keeps its mode
      daemon.sock             the people's socket (0600): the client token only
      kernel-api/             0700, holds nothing but kernel.sock (sandboxes mount it)
        kernel.sock           the kernels' socket (0600): kernel tokens only
      daemon.json             state: pid, socket, started_at, version, protocol (atomic)
      daemon.token            the client token (0600), made once, never rewritten
      daemon.lock             flock()ed by the running daemon for its whole life
      daemon.log              the daemon's stderr

The daemon serves two sockets, one per channel (:mod:`recursa.daemon.auth`).
Kernels get the kernel socket as ``RECURSA_API_SOCKET``; a kernel sandbox
bind-mounts its directory (:attr:`DaemonPaths.kernel_socket`'s parent)
read-only, so that directory holds the socket and nothing else, and a
daemon started after a crash binds a new socket at the same path inside it
(the directory itself is never replaced, so mounts made earlier still see
the new socket).

An ``AF_UNIX`` path holds at most :data:`MAX_SOCKET_PATH` bytes. When
``$RECURSA_HOME/daemon.sock`` is longer, the socket lives in a private
per-user directory, ``/tmp/recursa-<uid>/<hash of RECURSA_HOME>.sock``,
which must be ours and 0700; a kernel socket too long the same way lives
at ``/tmp/recursa-<uid>/<hash>.kernel/kernel.sock``. The paths are a pure
function of the home, so client and daemon agree on them without reading
anything; the state file records the people's socket too.

A home the daemon creates is 0700. An existing home is used as it is (its
mode is the owner's choice), except that a world-writable one is refused:
anyone could replace the files in it.

The lock decides whether a daemon runs, never the files: a socket or state
file left by a crashed daemon is stale as soon as the lock is free, and the
next daemon replaces both. A torn or corrupt state file reads as absent.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from recursa.errors import ConfigError, DaemonError
from recursa.files import write_atomic

SOCKET_NAME = "daemon.sock"
KERNEL_DIR_NAME = "kernel-api"
KERNEL_SOCKET_NAME = "kernel.sock"
STATE_NAME = "daemon.json"
TOKEN_NAME = "daemon.token"
LOCK_NAME = "daemon.lock"
LOG_NAME = "daemon.log"

MAX_SOCKET_PATH = 107
"""Bytes in a unix socket path (``sun_path`` is 108 with its NUL on Linux)."""

SHORT_SOCKET_ROOT = Path("/tmp")
LOCK_WAIT = 1.0
"""How long a starting daemon retries a held lock: clients probe the lock
(:meth:`DaemonLock.probe`) for microseconds, so a lock held this long belongs
to another daemon."""

EXIT_ALREADY_RUNNING = 75
"""The daemon's exit status when another daemon holds the lock for its home."""


@dataclass(frozen=True, slots=True)
class DaemonPaths:
    """The files of the daemon for one ``RECURSA_HOME`` (an absolute, resolved path)."""

    home: Path

    @classmethod
    def for_home(cls, home: Path | str) -> DaemonPaths:
        return cls(Path(home).expanduser().resolve())

    @property
    def socket(self) -> Path:
        """``home/daemon.sock``, or the short fallback when that is too long for AF_UNIX."""
        path = self.home / SOCKET_NAME
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
            return path
        digest = hashlib.sha256(os.fsencode(self.home)).hexdigest()[:20]
        return short_socket_dir() / f"{digest}.sock"

    @property
    def kernel_socket(self) -> Path:
        """``home/kernel-api/kernel.sock``, or the short fallback when that is too
        long for AF_UNIX. Its directory is the kernels' alone: nothing else is put there."""
        path = self.home / KERNEL_DIR_NAME / KERNEL_SOCKET_NAME
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
            return path
        digest = hashlib.sha256(os.fsencode(self.home)).hexdigest()[:20]
        return short_socket_dir() / f"{digest}.kernel" / KERNEL_SOCKET_NAME

    @property
    def state(self) -> Path:
        return self.home / STATE_NAME

    @property
    def token(self) -> Path:
        return self.home / TOKEN_NAME

    @property
    def lock(self) -> Path:
        return self.home / LOCK_NAME

    @property
    def log(self) -> Path:
        return self.home / LOG_NAME


def short_socket_dir() -> Path:
    """The private per-user directory for sockets whose natural path is too
    long (check it with :func:`private_dir` before use)."""
    return SHORT_SOCKET_ROOT / f"recursa-{os.getuid()}"


def prepare_home(paths: DaemonPaths) -> bool:
    """Create the home (0700) if it is missing, and the people's socket
    directory when it lives outside the home. An existing home keeps its mode.
    Returns whether the home was made now.

    Raises :class:`~recursa.errors.ConfigError` (one line) for a
    world-writable home, and :class:`DaemonError` (one line) when a directory
    cannot be made or is not private."""
    try:
        paths.home.mkdir(mode=0o700, parents=True)
        made = True
    except FileExistsError:
        made = False
    except OSError as exc:
        raise DaemonError(f"cannot prepare RECURSA_HOME {paths.home}: {exc.strerror}") from exc
    if made:
        os.chmod(paths.home, 0o700)  # mkdir's mode passes through the umask
    else:
        check_home(paths.home)
    if paths.socket.parent != paths.home:
        private_dir(paths.socket.parent)
    return made


def check_home(home: Path) -> None:
    """Refuse a home that is not a directory, or that others may write to."""
    try:
        info = os.stat(home)
    except OSError as exc:
        raise DaemonError(f"cannot use RECURSA_HOME {home}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise DaemonError(f"RECURSA_HOME {home} is not a directory")
    if info.st_mode & stat.S_IWOTH:
        raise ConfigError(
            f"RECURSA_HOME {home} is writable by every user (mode "
            f"{stat.S_IMODE(info.st_mode):o}); use a directory of your own"
        )


def kernel_socket_dir(paths: DaemonPaths) -> Path:
    """The kernel socket's directory, made (0700) or checked (:func:`socket_only_dir`)."""
    directory = paths.kernel_socket.parent
    if directory.parent != paths.home:
        private_dir(directory.parent)  # the short fallback's per-user root
    socket_only_dir(directory)
    return directory


def socket_only_dir(path: Path) -> None:
    """Make ``path`` (0700), or accept it only if it is a real directory, ours,
    private, and holds nothing but :data:`KERNEL_SOCKET_NAME`: it is mounted
    into every kernel sandbox, so whatever sits in it is shown to the model's code."""
    private_dir(path)
    strays = sorted(entry.name for entry in path.iterdir() if entry.name != KERNEL_SOCKET_NAME)
    if strays:
        raise DaemonError(
            f"the kernel socket directory {path} must hold only {KERNEL_SOCKET_NAME}; "
            f"remove {', '.join(strays[:3])}"
        )


def private_dir(path: Path) -> None:
    """Make ``path`` (a directory in a shared place such as /tmp), or accept it
    only if it is a real directory, ours, and 0700: anything else could be
    another user's trap."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise DaemonError(f"cannot use socket directory {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise DaemonError(f"socket directory {path} is not a directory owned by you; remove it")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise DaemonError(f"socket directory {path} is accessible to others; remove it")


# -- the state file -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DaemonState:
    """What a running daemon wrote about itself in ``daemon.json``."""

    pid: int
    socket: str
    started_at: float
    version: str
    protocol: int


def read_state(paths: DaemonPaths) -> DaemonState | None:
    """The state file, or None when it is missing, torn or not what we wrote."""
    try:
        data = json.loads(paths.state.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        state = DaemonState(
            pid=data["pid"],
            socket=data["socket"],
            started_at=data["started_at"],
            version=data["version"],
            protocol=data["protocol"],
        )
    except (KeyError, TypeError):
        return None
    valid = (
        _is_int(state.pid)
        and state.pid > 0
        and isinstance(state.socket, str)
        and isinstance(state.version, str)
        and _is_int(state.protocol)
        and isinstance(state.started_at, int | float)
        and not isinstance(state.started_at, bool)
    )
    return state if valid else None


def write_state(paths: DaemonPaths, state: DaemonState) -> None:
    """Replace the state file atomically: a reader sees the old file or the new one."""
    write_atomic(paths.state, json.dumps(asdict(state)).encode(), mode=0o600)


def clear_stale(paths: DaemonPaths) -> bool:
    """Remove the socket and state file a dead daemon left, if no daemon holds
    the lock (checked under the lock, so a starting daemon is never robbed of
    its fresh files). Returns whether the lock was free. A world-writable home
    is refused (:func:`check_home`)."""
    if not paths.home.is_dir():
        return True  # no daemon ever ran here
    check_home(paths.home)  # before the lock file is made in a home that is refused
    lock = DaemonLock(paths)
    if not lock.acquire():
        return False
    try:
        remove_quietly(paths.socket)
        remove_quietly(paths.state)
    finally:
        lock.release()
    return True


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- the token ------------------------------------------------------------------------------


def ensure_token(paths: DaemonPaths) -> str:
    """The client token, made on first use: 32 random bytes, urlsafe, 0600.

    Made under a temporary name and linked into place, so a concurrent reader
    never sees a half-written token and two makers agree on one."""
    token = read_token(paths)
    if token is not None:
        return token
    fresh = secrets.token_urlsafe(32)
    tmp = paths.token.with_name(f".{TOKEN_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, fresh.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, paths.token)
    except FileExistsError:
        pass
    finally:
        remove_quietly(tmp)
    token = read_token(paths)
    if token is None:
        raise DaemonError(f"cannot read the daemon token {paths.token}")
    return token


def read_token(paths: DaemonPaths) -> str | None:
    """The client token, or None when there is none yet."""
    try:
        text = paths.token.read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    except OSError as exc:
        raise DaemonError(f"cannot read the daemon token {paths.token}: {exc.strerror}") from exc
    return text or None


# -- the lock -------------------------------------------------------------------------------


class DaemonLock:
    """``flock`` on ``daemon.lock``: held by the running daemon until it exits.

    The kernel drops the lock when the holder dies, however it dies, so a free
    lock means no daemon, whatever the other files say. The descriptor is not
    inherited by child processes (kernels), so the lock dies with the daemon.
    """

    def __init__(self, paths: DaemonPaths) -> None:
        self._path = paths.lock
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, wait: float = 0.0) -> bool:
        """Take the lock, retrying for up to ``wait`` seconds; False if another holds it."""
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        delay = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(delay)  # a short, bounded retry before the event loop exists
                delay = min(delay * 2, 0.1)
                continue
            self._fd = fd
            return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    @staticmethod
    def probe(paths: DaemonPaths) -> bool:
        """Whether some process (a daemon) holds the lock now. Takes and drops it
        at once when free; :data:`LOCK_WAIT` covers a daemon starting meanwhile."""
        if not paths.lock.exists():
            return False
        lock = DaemonLock(paths)
        if lock.acquire():
            lock.release()
            return False
        return True


__all__ = [
    "EXIT_ALREADY_RUNNING",
    "KERNEL_SOCKET_NAME",
    "LOCK_WAIT",
    "MAX_SOCKET_PATH",
    "DaemonLock",
    "DaemonPaths",
    "DaemonState",
    "check_home",
    "clear_stale",
    "ensure_token",
    "kernel_socket_dir",
    "prepare_home",
    "private_dir",
    "read_state",
    "read_token",
    "remove_quietly",
    "short_socket_dir",
    "socket_only_dir",
    "write_state",
]

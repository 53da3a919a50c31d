"""The kernel sandbox: what a kernel process sees, as a bubblewrap command line.

Model code runs in the kernel, so everything the kernel can reach is within
the model's reach. With ``[kernel] sandbox = "bwrap"`` (the default on
Linux) each kernel runs under bubblewrap and sees:

- the whole filesystem read-only, a fresh ``/dev`` and ``/proc``, and a
  private, empty ``/tmp``;
- its workspace (the directory it was launched in) read-write;
- the policy's writable directories (the managed kernel environment, which
  lies in the hidden home: :mod:`recursa.kernel.venv`) read-write, so that
  ``pip install`` in one kernel serves the later kernels of the same home;
- nothing of the hidden directories (``RECURSA_HOME`` and the kernels'
  runtime directory: an empty tmpfs lies over each) but its own directory
  (read-write: its ZeroMQ sockets and the files it exchanges with the
  harness) and the directory of the kernel-API socket (read-only:
  connecting to a socket needs no write); its connection file is in its
  private ``/tmp`` (read-only);
- its own PID, IPC and UTS namespaces: what it starts dies with it, however
  it detaches (a new session, a double fork), because the kernel is the
  namespace's init; and, with ``[kernel] network = false``, its own empty
  network namespace.

Mounts are applied parents first, so any nesting works: a workspace inside
the home or the home inside a workspace, either under ``/tmp``. The
sandbox never uses ``--die-with-parent`` nor ``--new-session``: a kernel
outlives a daemon that crashed (and is reattached), and the kernel shares the
process group of the outer ``bwrap`` process, so a signal to the group
(SIGINT for an interrupt, SIGKILL for a stop) reaches it. The outer
``bwrap`` would die of that SIGINT (and the kernel would look dead), so it
runs with SIGINT ignored, and the kernel with it restored (coreutils'
``env --ignore-signal`` / ``--default-signal``). The kernel dies with the
outer ``bwrap`` (``setpriv --pdeathsig KILL``): killing the pid the harness
records, by itself, ends the whole sandbox.

Where bubblewrap is missing or cannot create namespaces, a kernel does not
start: :func:`check_sandbox` raises :class:`KernelError` in one line naming
the cause, the package and the opt-out. There is no silent downgrade.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from recursa.config import DEFAULT_KERNEL_SANDBOX, SandboxKind
from recursa.errors import KernelError
from recursa.kernel.limits import KernelLimits, limit_argv
from recursa.kernel.venv import managed_paths

SANDBOX_KINDS: tuple[SandboxKind, ...] = get_args(SandboxKind)
DEFAULT_SANDBOX: SandboxKind = DEFAULT_KERNEL_SANDBOX
PACKAGE = "bubblewrap"
OPT_OUT = '[kernel] sandbox = "none"'
PROBE_TIMEOUT = 10.0
"""Seconds the one probe of bubblewrap may take."""

INSIDE = Path("/tmp/.recursa")
"""Where a sandboxed kernel finds what the harness gives it (its connection file)."""

PRIVATE_ENV: Mapping[str, str] = {
    # The home directory is read-only inside: IPython, matplotlib and pip
    # write their state and caches under /tmp instead of warning at start.
    "IPYTHONDIR": "/tmp/.ipython",
    "MPLCONFIGDIR": "/tmp/.matplotlib",
    "XDG_CACHE_HOME": "/tmp/.cache",
}
"""Set in a sandboxed kernel's environment unless the environment sets them."""

_NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--as-pid-1")
"""The kernel is its PID namespace's init (``--as-pid-1``): bubblewrap's own
init would wait for every process in the namespace before it exits, so a
process a cell detached would keep the namespace alive after the kernel
stopped. With the kernel as init, its exit kills every process in the
namespace. The kernel receives the signals it handles (SIGINT) and SIGKILL;
an orphan that exits stays a zombie until the kernel exits."""


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How the kernels of one runtime are confined (from ``[kernel]``).

    ``hidden`` are directories no kernel sees (``RECURSA_HOME``); each
    kernel's runtime directory is hidden as well. ``writable`` are bound
    read-write in every kernel, even inside a hidden one (the managed
    kernel environment): what one kernel writes there, every later kernel
    of the runtime runs. ``bwrap`` is the program,
    by name (looked up on ``PATH``) or path. ``limits`` go in front of the
    sandbox (:func:`recursa.kernel.limits.limit_argv`), in either kind.
    """

    kind: SandboxKind = "none"
    network: bool = True
    hidden: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    limits: KernelLimits = field(default_factory=KernelLimits)
    bwrap: str = "bwrap"

    @property
    def enabled(self) -> bool:
        return self.kind == "bwrap"


NO_SANDBOX = SandboxPolicy()
"""Kernels run unconfined (what a bare :class:`~recursa.kernel.Kernel` gets)."""


@dataclass(frozen=True, slots=True)
class KernelView:
    """What one kernel process is bound to when it is launched; fixed for its life.

    ``workspace`` is read-write and is where it starts; ``kernel_dir`` is its
    own directory (read-write); ``connection_file`` is read-only; the
    directory of ``api_socket`` (the kernel API's socket, None when there is
    none) is read-only, or the socket alone where that directory is hidden.
    """

    workspace: Path
    kernel_dir: Path
    connection_file: Path
    api_socket: Path | None = None
    interpreter: tuple[Path, ...] = ()
    """What the kernel's Python reads (:func:`interpreter_paths`): bound
    read-only where the private ``/tmp`` or a hidden directory would cover it
    (a checkout and its venv under /tmp, a venv kept in the home)."""


def launch_prefix(policy: SandboxPolicy, view: KernelView, name: str) -> list[str]:
    """The argv that goes in front of the kernel's own command line: the
    limits' prefix, then (when sandboxed) bubblewrap's. Raises
    :class:`KernelError` in one line if the sandbox cannot work here or the
    view cannot be confined (a workspace that would show a hidden directory)."""
    prefix = limit_argv(policy.limits, name)
    if policy.enabled:
        env, bwrap, setpriv = check_sandbox(policy.bwrap, network=policy.network)
        prefix += [env, "--ignore-signal=INT", bwrap, *bwrap_args(policy, view)]
        prefix += [env, "--default-signal=INT", setpriv, "--pdeathsig", "KILL"]
    return prefix


def connection_argument(policy: SandboxPolicy, connection_file: Path) -> str:
    """Where the kernel reads its connection file: a sandboxed kernel at
    :func:`connection_inside`, else jupyter_client's placeholder for the file."""
    return str(connection_inside(connection_file)) if policy.enabled else "{connection_file}"


def connection_inside(connection_file: Path) -> Path:
    """The path at which a sandboxed kernel reads its connection file: in its
    private /tmp, so that nothing under the kernels' directory (its own file
    included) is there to read."""
    return INSIDE / connection_file.name


def sandbox_env(policy: SandboxPolicy, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with :data:`PRIVATE_ENV` added where it sets nothing, when sandboxed."""
    out = dict(env)
    if policy.enabled:
        for key, value in PRIVATE_ENV.items():
            out.setdefault(key, value)
    return out


def bwrap_args(policy: SandboxPolicy, view: KernelView) -> list[str]:
    """bubblewrap's options for ``view`` (without the program), ending in ``--``."""
    workspace = _real(view.workspace)
    hidden = {_real(p) for p in (*policy.hidden, view.connection_file.parent)}
    for path in hidden:
        if _within(path, workspace):
            raise KernelError(
                f"cannot sandbox a kernel in {view.workspace}: it lies in {path}, which "
                "kernels must not see; start the session in another directory"
            )
    # (path, order at equal depth, options): a tmpfs is laid before what is
    # bound inside the same directory.
    mounts: list[tuple[Path, int, list[str]]] = [(Path("/tmp"), 0, ["--tmpfs", "/tmp"])]
    mounts += [(p, 0, ["--tmpfs", str(p)]) for p in sorted(hidden)]
    mounts.append((workspace, 1, ["--bind", str(workspace), str(workspace)]))
    kernel_dir = _real(view.kernel_dir)
    mounts.append((kernel_dir, 1, ["--bind", str(kernel_dir), str(kernel_dir)]))
    writable = tuple(sorted({_real(p) for p in policy.writable}))
    for path in writable:
        if any(h == path or path in h.parents for h in hidden):
            raise KernelError(f"cannot bind {path} into a kernel: it would show a hidden directory")
        mounts.append((path, 1, ["--bind", str(path), str(path)]))
    # The source as the harness names it: the launch line then names the
    # file, which is how the process is recognized later (adoption, orphans).
    inside = connection_inside(view.connection_file)
    connection = str(view.connection_file)
    mounts.append((inside, 1, ["--ro-bind", connection, str(inside)]))
    covered = (Path("/tmp"), *hidden)
    for path in _shown_again(view.interpreter, covered, (workspace, *writable)):
        mounts.append((path, 1, ["--ro-bind", str(path), str(path)]))
    if view.api_socket is not None:
        # Its directory, so that a socket the daemon makes again after a
        # crash is seen; the socket alone where the directory is a hidden one.
        shown = _real(view.api_socket.parent)
        if shown in hidden:
            shown = _real(view.api_socket)
        mounts.append((shown, 1, ["--ro-bind", str(shown), str(shown)]))
    mounts.sort(key=lambda m: (len(m[0].parts), m[1], str(m[0])))
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for _, _, options in mounts:
        args += options
    args += list(_NAMESPACES)
    if not policy.network:
        args.append("--unshare-net")
    args += ["--chdir", str(view.workspace), "--"]
    return args


def _shown_again(
    paths: tuple[Path, ...], covered: tuple[Path, ...], bound: tuple[Path, ...]
) -> list[Path]:
    """Of ``paths``, those that a covering mount would hide, outermost only.
    A path that holds a covered directory (``/tmp`` itself, or a parent of the
    home) is never shown: it would show what the cover hides. One in a
    directory bound read-write (the workspace, the kernel environment) is
    seen there already, writable, and must stay so."""
    wanted: list[Path] = []
    for path in sorted({_real(p) for p in paths}, key=lambda p: len(p.parts)):
        if not any(c == path or c in path.parents for c in covered):
            continue  # not covered: already seen through the read-only root
        if any(path == b or b in path.parents for b in bound):
            continue
        if any(c == path or path in c.parents for c in covered):
            continue  # it would uncover a hidden directory
        if any(w in path.parents for w in wanted):
            continue
        wanted.append(path)
    return wanted


_TOOL_NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent")
"""A tool's sandbox (:func:`tool_prefix`) dies with the command that ran it."""


def tool_prefix(
    policy: SandboxPolicy, *, writable: Sequence[Path], readable: Sequence[Path], cwd: Path
) -> list[str]:
    """The argv that runs a tool of the harness (pip in the managed kernel
    environment, on a person's request) under the kernels' confinement: the
    filesystem read-only but ``writable``, a private ``/tmp``, the hidden
    directories covered; ``cwd`` and ``readable`` (the files a person named)
    shown read-only where a cover would hide them, unless that would show a
    hidden directory; [] when kernels are not sandboxed. Raises
    :class:`KernelError` in one line where the sandbox cannot work."""
    if not policy.enabled:
        return []
    _, bwrap, _ = check_sandbox(policy.bwrap, network=policy.network)
    hidden = {_real(p) for p in policy.hidden}
    bound = tuple(sorted({_real(p) for p in writable}))
    covered = (Path("/tmp"), *hidden)
    mounts: list[tuple[Path, int, list[str]]] = [(Path("/tmp"), 0, ["--tmpfs", "/tmp"])]
    mounts += [(p, 0, ["--tmpfs", str(p)]) for p in sorted(hidden)]
    mounts += [(p, 1, ["--bind", str(p), str(p)]) for p in bound]
    python = [p for p in bound if (p / "bin" / "python").exists()]
    seen = tuple(managed_paths(str(python[0] / "bin" / "python")) or ()) if python else ()
    here = _real(cwd)
    visible = not any(h == here or h in here.parents for h in hidden)
    named = tuple(
        p for p in map(_real, readable) if not any(h == p or h in p.parents for h in hidden)
    )
    shown = (*seen, *named, here) if visible else (*seen, *named)
    again = _shown_again(shown, covered, bound)
    for path in again:
        mounts.append((path, 1, ["--ro-bind", str(path), str(path)]))
    # The working directory where it is seen, else "/" (the arguments naming
    # files are absolute: KernelEnv makes them so).
    seen_here = not any(c == here or c in here.parents for c in covered) or any(
        p == here or p in here.parents for p in (*again, *bound)
    )
    mounts.sort(key=lambda m: (len(m[0].parts), m[1], str(m[0])))
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for _, _, options in mounts:
        args += options
    args += list(_TOOL_NAMESPACES)
    if not policy.network:
        args.append("--unshare-net")
    args += ["--chdir", str(here) if seen_here else "/", "--"]
    return args


_INTERPRETER_PROBE = (
    "import importlib.util, json, os, sys\n"
    "spec = importlib.util.find_spec('recursa')\n"
    "paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.realpath(sys.executable)]\n"
    "paths += [p for p in sys.path if os.path.isabs(p)]\n"
    "if spec is not None and spec.origin:\n"
    "    paths.append(os.path.dirname(os.path.dirname(spec.origin)))\n"
    "print(json.dumps(paths))\n"
)


@functools.cache
def interpreter_paths(python: str) -> tuple[Path, ...]:
    """The directories ``python`` reads when it runs a kernel: its prefixes,
    its ``sys.path`` and where recursa comes from (an editable checkout).
    Asked of the interpreter once per process (tens of milliseconds); an
    interpreter that cannot say gives nothing, and then fails to start the
    kernel with its own message. A managed kernel environment's interpreter
    is never run here, outside the sandbox: kernels write that env, so its
    ``.pth`` files and even its ``bin/python`` may be theirs. Its paths are
    this process's own, since the env is made from this interpreter
    (:func:`recursa.kernel.venv.managed_paths`)."""
    managed = managed_paths(python)
    if managed is not None:
        return managed
    try:
        done = subprocess.run(
            [python, "-c", _INTERPRETER_PROBE],
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        found = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return ()
    if not isinstance(found, list):
        return ()
    return tuple(Path(p) for p in found if isinstance(p, str) and os.path.isabs(p))


def check_sandbox(bwrap: str, *, network: bool) -> tuple[str, str, str]:
    """The paths of ``env``, of a bubblewrap that can build a kernel's
    sandbox here and of ``setpriv``, or :class:`KernelError` in one line
    naming the cause, the package and the opt-out. Probed once per process
    (for each program and network choice): a few milliseconds."""
    found, problem = _probe(bwrap, network)
    if problem is not None:
        raise KernelError(f"{problem}; install the package {PACKAGE}, or set {OPT_OUT}")
    return found


@functools.cache
def _probe(bwrap: str, network: bool) -> tuple[tuple[str, str, str], str | None]:
    env = shutil.which("env") or "/usr/bin/env"
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    found = shutil.which(bwrap)
    if found is None:
        return ("", "", ""), f"cannot sandbox kernels: {bwrap} (bubblewrap) is not installed"
    found = os.path.abspath(found)
    programs = (env, found, setpriv)
    argv = [env, "--ignore-signal=INT", found, "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += _NAMESPACES
    if not network:
        argv.append("--unshare-net")
    argv += ["--", env, "--default-signal=INT", setpriv, "--pdeathsig", "KILL", "true"]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=PROBE_TIMEOUT, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return programs, f"cannot sandbox kernels: {found} could not be run ({exc})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return programs, (
            f"cannot sandbox kernels: {found} cannot create a sandbox here ({why}; "
            "user namespaces may be disabled, or env or setpriv is too old: coreutils 8.31 "
            "and util-linux 2.33 are needed)"
        )
    return programs, None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _within(hidden: Path, workspace: Path) -> bool:
    """Whether binding ``workspace`` read-write would show what lies in
    ``hidden``: it is that directory or inside it (in the home, another
    session's snapshot is code that session runs at its next restore). A
    hidden directory inside the workspace stays hidden: it is laid over it."""
    return workspace == hidden or hidden in workspace.parents


__all__ = [
    "DEFAULT_SANDBOX",
    "NO_SANDBOX",
    "OPT_OUT",
    "PACKAGE",
    "PRIVATE_ENV",
    "SANDBOX_KINDS",
    "KernelView",
    "SandboxKind",
    "SandboxPolicy",
    "bwrap_args",
    "check_sandbox",
    "connection_argument",
    "connection_inside",
    "interpreter_paths",
    "launch_prefix",
    "sandbox_env",
    "tool_prefix",
]

"""The managed kernel environment: a venv recursa owns, which kernels run in.

``[kernel] python = "managed"`` (the default) runs every kernel of a home in
``$RECURSA_HOME/kernel-env``, a venv made from recursa's own interpreter:

- ``python -m venv --without-pip`` (a quarter of a second, no network), then
  a ``.pth`` file in its site-packages that adds the project's site-packages
  (and recursa's source, for a checkout) *after* the env's own: ipykernel,
  pip and recursa come from the project, and what is installed in the env
  wins over them;
- ``bin/pip`` (and ``pip3``, ``pip3.X``) run ``python -m pip`` with the env's
  interpreter, so ``pip install`` writes into the env, whichever pip runs
  (the project's, until the agent installs one of its own); an interpreter
  without pip anywhere gets one from ``ensurepip``;
- the data stack (:data:`DATA_STACK`), installed by pip when asked (``recursa
  kernel-env prepare`` or ``reset``; the quickstart). What the project has
  already (numpy, with the embedded model) is used from there, not copied. Without a network the env still
  works; :meth:`KernelEnv.create` and :meth:`KernelEnv.prepare` return what
  is missing, for one warning.

A marker file is written last: an env without it (a creation cut short) is
made again. Creation, reset and installs by the CLI hold a lock file beside
the env, so that two processes never build it at once.

Inside a kernel (:meth:`KernelEnv.kernel_environment`) the env's ``bin/`` is
first on ``PATH`` and ``VIRTUAL_ENV`` names it, so ``pip``, ``python``,
``%pip`` and the same in ``%%bash`` reach the env's interpreter; and
``PIP_REQUIRE_VIRTUALENV`` makes any other pip refuse to install, so a kernel
never installs into the system Python. What the agent installs stays in the
env, for later sessions. The sandbox binds the env read-write
(:attr:`recursa.kernel.sandbox.SandboxPolicy.writable`).

A kernel may have written any of the env (its ``.pth`` files, even
``bin/python``), so the harness never runs the env's interpreter outside a
sandbox on its own: listing it (:meth:`KernelEnv.packages`), checking the
data stack (:meth:`KernelEnv.missing`) and the sandbox's view of it
(:func:`managed_paths`) read files and run none of its code. What the CLI
runs in it on a person's request (pip, for ``add`` and ``prepare``) runs
behind ``confine``: the kernels' sandbox, when they have one.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from email.parser import HeaderParser
from importlib.machinery import PathFinder
from pathlib import Path

from recursa.config import Config
from recursa.errors import KernelError

log = logging.getLogger(__name__)

ENV_DIR_NAME = "kernel-env"
MARKER = ".recursa-env"
"""Written last into a finished env: its creator's interpreter, as JSON."""
PTH_NAME = "_recursa_project.pth"

DATA_STACK: tuple[tuple[str, str], ...] = (
    ("numpy", "numpy"),
    ("pandas", "pandas"),
    ("matplotlib", "matplotlib"),
    ("requests", "requests"),
    ("pyyaml", "yaml"),
)
"""(distribution, module) pairs installed when an env is made with its data stack."""

CREATE_TIMEOUT = 120.0
"""Seconds ``venv`` and ``ensurepip`` may take."""
PIP_TIMEOUT = 1800.0
"""Seconds one ``pip install`` may take (the data stack is about 190 MB, 30 s online)."""

_PIP_FLAGS = ("--disable-pip-version-check", "--retries", "1", "--timeout", "15")

_PIP_WRAPPER = '#!/bin/sh\n# recursa: pip for this env, run by its interpreter.\nexec "$(dirname "$0")/python" -m pip "$@"\n'

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Package:
    """One distribution in the env's own site-packages; ``size`` in bytes (its files)."""

    name: str
    version: str
    size: int


@dataclass(frozen=True, slots=True)
class KernelEnv:
    """The managed env at ``path``, made from ``base_python`` (recursa's interpreter)."""

    path: Path
    base_python: str = sys.executable
    confine: Callable[[Sequence[Path]], list[str]] | None = None
    """The argv prefix that runs pip in the env (:meth:`install`,
    :meth:`prepare`) under the kernels' sandbox, given the files pip must
    read; None: unconfined."""

    @classmethod
    def of_home(cls, home: Path) -> KernelEnv:
        return cls(Path(os.path.abspath(home)) / ENV_DIR_NAME)

    @classmethod
    def for_config(cls, config: Config) -> KernelEnv:
        """The env of ``config.home`` as a person's command uses it: its pip
        runs in the sandbox ``[kernel]`` gives kernels, since what it runs
        (the env's interpreter and ``.pth`` files) may be a kernel's."""
        from recursa.kernel.sandbox import SandboxPolicy, tool_prefix

        policy = SandboxPolicy(
            kind=config.kernel.sandbox,
            network=config.kernel.network,
            hidden=(config.home, *config.kernel.hide),
        )
        env = cls.of_home(config.home)
        return replace(
            env,
            confine=lambda readable: tool_prefix(
                policy, writable=(env.path,), readable=readable, cwd=Path.cwd()
            ),
        )

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def site_packages(self) -> Path:
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.path / "lib" / version / "site-packages"

    def ready(self) -> bool:
        """The env was finished, by an interpreter of this Python version."""
        try:
            made = json.loads((self.path / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return (
            isinstance(made, dict)
            and made.get("version") == list(sys.version_info[:2])
            and self.python.exists()
        )

    # -- making it ------------------------------------------------------------------

    def ensure(self, progress: Progress = log.info) -> list[str]:
        """Make the env without its data stack if it is not ready (a quarter
        of a second, offline); what of :data:`DATA_STACK` it lacks, for a
        warning. Raises :class:`KernelError` in one line if it cannot be made."""
        with self._locked():
            if not self.ready():
                self._build(progress)
        return self.missing()

    def create(self, *, data_stack: bool = True, progress: Progress = log.info) -> list[str]:
        """Make the env afresh (what was installed in it is gone), with the
        data stack when asked; what of :data:`DATA_STACK` it lacks after (pip
        could not reach an index, say)."""
        with self._locked():
            self._build(progress)
            if data_stack:
                self._pip(["install", *(dist for dist, _ in DATA_STACK)], progress, quiet=True)
        return self.missing()

    def prepare(self, progress: Progress = log.info) -> list[str]:
        """Make the env if it is not ready and install what of the data stack
        it lacks, keeping what is in it (the quickstart); what it still lacks."""
        self.ensure(progress)
        missing = self.missing()
        if missing:
            with self._locked():
                self._pip(["install", *missing], progress, quiet=True)
        return self.missing()

    def install(self, packages: Sequence[str], progress: Progress = log.info) -> None:
        """``pip install packages`` into the env (made first if needed); raises
        :class:`KernelError` in one line when pip fails (its own output went
        to ``progress``)."""
        with self._locked():
            if not self.ready():
                self._build(progress)
            if not self._pip(["install", *packages], progress, quiet=False):
                named = " ".join(p for p in packages if not p.startswith("-"))
                raise KernelError(f"pip could not install {named} into {self.path} (see above)")

    def missing(self) -> list[str]:
        """The distributions of :data:`DATA_STACK` whose module a kernel would
        not find: looked up in the env's site-packages and then this
        interpreter's path, as the env's ``.pth`` orders them, without
        running the env's interpreter ([] for an env not made)."""
        if not self.python.exists():
            return []
        path = [str(self.site_packages), *(p for p in sys.path if os.path.isabs(p))]
        return [dist for dist, module in DATA_STACK if PathFinder.find_spec(module, path) is None]

    def _build(self, progress: Progress) -> None:
        if self.path.exists() or self.path.is_symlink():
            progress(f"removing {self.path}")
            _remove(self.path)
        progress(f"creating the kernel environment {self.path}")
        self._run([self.base_python, "-m", "venv", "--without-pip", str(self.path)], "venv")
        self.site_packages.mkdir(parents=True, exist_ok=True)
        (self.site_packages / PTH_NAME).write_text(_pth_lines(), encoding="utf-8")
        if not self._has_pip():
            progress("the project has no pip: installing one into the env with ensurepip")
            self._run([str(self.python), "-m", "ensurepip", "--default-pip"], "ensurepip")
        for name in ("pip", "pip3", f"pip{sys.version_info.major}.{sys.version_info.minor}"):
            script = self.bin / name
            if not script.exists():
                script.write_text(_PIP_WRAPPER, encoding="utf-8")
                script.chmod(0o755)
        marker = {"version": list(sys.version_info[:2]), "base": self.base_python}
        (self.path / MARKER).write_text(json.dumps(marker), encoding="utf-8")

    def _has_pip(self) -> bool:
        probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            done = subprocess.run(
                [str(self.python), "-c", probe],
                capture_output=True,
                timeout=CREATE_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            return done.returncode == 0
        return False

    def _run(self, argv: list[str], what: str) -> None:
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=CREATE_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KernelError(f"cannot make the kernel environment {self.path}: {exc}") from exc
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            why = said[-1] if said else f"exit code {done.returncode}"
            raise KernelError(f"cannot make the kernel environment {self.path}: {what}: {why}")

    def _pip(self, args: list[str], progress: Progress, *, quiet: bool) -> bool:
        """Run the env's pip; its output lines go to ``progress``. True when it succeeded."""
        args = _absolute(args)
        argv = [str(self.python), "-m", "pip", *args, *_PIP_FLAGS]
        if quiet:
            argv.append("--quiet")
        progress("$ " + " ".join(argv))
        env = {**os.environ, "PIP_REQUIRE_VIRTUALENV": "1", "VIRTUAL_ENV": str(self.path)}
        prefix = self.confine(_named_paths(args)) if self.confine is not None else []
        if prefix:
            argv = [*prefix, *argv]
            # The home directory is read-only inside: pip's cache goes to the private /tmp.
            env["XDG_CACHE_HOME"] = "/tmp/.cache"
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            progress(f"cannot run pip: {exc}")
            return False
        assert proc.stdout is not None
        with proc:
            for raw in proc.stdout:
                progress(raw.decode("utf-8", "replace").rstrip())
            try:
                code = proc.wait(timeout=PIP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                return False
        return code == 0

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        _private_dirs(self.path.parent)
        lock = self.path.parent / f"{self.path.name}.lock"
        with lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- using it -------------------------------------------------------------------

    def kernel_environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` (a kernel's) with the env's ``bin/`` first on ``PATH``,
        ``VIRTUAL_ENV`` naming it, and pip bound to virtual environments."""
        out = dict(env)
        path = out.get("PATH") or os.defpath
        out["PATH"] = os.pathsep.join([str(self.bin), *(p for p in path.split(os.pathsep) if p)])
        out["VIRTUAL_ENV"] = str(self.path)
        out["PIP_REQUIRE_VIRTUALENV"] = "1"
        out["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        out.pop("PYTHONHOME", None)
        return out

    def packages(self) -> list[Package]:
        """The distributions in the env's own site-packages, by name, read from
        their metadata (none of the env's code runs)."""
        found: list[Package] = []
        if not self.site_packages.is_dir():
            return found
        for info in sorted(self.site_packages.glob("*.dist-info")):
            try:
                meta = HeaderParser().parsestr(
                    (info / "METADATA").read_text(encoding="utf-8", errors="replace")
                )
            except OSError:
                continue
            name, version = meta.get("Name"), meta.get("Version")
            if not name:
                continue
            found.append(Package(name, version or "?", _record_size(info)))
        return sorted(found, key=lambda p: p.name.lower())

    def size(self) -> int:
        """Bytes of the env's files (symlinks counted as links)."""
        return _tree_size(self.path)


def resolve_kernel_python(setting: str, home: Path) -> tuple[str, KernelEnv | None]:
    """The kernels' interpreter for ``[kernel] python``, and the managed env
    when that is the choice (made here if it is not ready, without its data
    stack: what it lacks is logged in one warning)."""
    if setting == "project":
        return sys.executable, None
    if setting != "managed":
        return setting, None
    env = KernelEnv.of_home(home)
    missing = env.ensure()
    if missing:
        log.warning(
            "the kernel environment %s lacks %s; install them with: recursa kernel-env prepare",
            env.path,
            ", ".join(missing),
        )
    return str(env.python), env


def managed_paths(python: str) -> tuple[Path, ...] | None:
    """What a managed env's interpreter ``python`` reads, worked out here
    without running it (None when ``python`` is not a managed env's): the
    env, the base interpreter's prefixes, and this interpreter's ``sys.path``
    (its standard library, and the project's site-packages and recursa's
    source, which the env's ``.pth`` adds)."""
    env = Path(python).parent.parent
    if Path(python).name != "python" or not (env / MARKER).is_file():
        return None
    paths = [str(env), sys.base_prefix, sys.base_exec_prefix, os.path.realpath(sys.executable)]
    paths += [p for p in sys.path if os.path.isabs(p)]
    spec = importlib.util.find_spec("recursa")
    if spec is not None and spec.origin:
        paths.append(os.path.dirname(os.path.dirname(spec.origin)))
    return tuple(Path(p) for p in dict.fromkeys(paths))


def _pth_lines() -> str:
    """The env's ``.pth``: the project's site directories (each with its own
    ``.pth`` files: an editable install's finder) and recursa's source when
    it is found elsewhere, added after the env's own site-packages."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:  # recursa installed with pip install --user
        dirs.append(site.getusersitepackages())
    dirs = [p for p in dirs if os.path.isdir(p)]
    spec = importlib.util.find_spec("recursa")
    if spec is not None and spec.origin:
        source = os.path.dirname(os.path.dirname(spec.origin))
        if not any(source == d for d in dirs):
            dirs.append(source)
    return "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n"


def _path_in(arg: str) -> tuple[str, str]:
    """``arg`` split into an option's ``--name=`` part and the value that may name a file."""
    if arg.startswith("--") and "=" in arg:
        option, value = arg.split("=", 1)
        return f"{option}=", value
    return "", arg


def _absolute(args: Sequence[str]) -> list[str]:
    """pip's arguments with every existing file or directory named absolutely
    (pip may run in a sandbox whose working directory is elsewhere)."""
    out = []
    for arg in args:
        option, value = _path_in(arg)
        out.append(option + os.path.abspath(value) if value and os.path.exists(value) else arg)
    return out


def _named_paths(args: Sequence[str]) -> list[Path]:
    """The existing files and directories among pip's arguments (``--opt=PATH`` too)."""
    values = (_path_in(arg)[1] for arg in args)
    return [Path(os.path.abspath(v)) for v in values if v and os.path.exists(v)]


def _record_size(info: Path) -> int:
    """The size of a distribution's files, from its RECORD (0 when it has none)."""
    try:
        lines = (info / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return 0
    total = 0
    for line in lines:
        size = line.rsplit(",", 1)[-1]
        if size.isdigit():
            total += int(size)
    return total


def _tree_size(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _private_dirs(directory: Path) -> None:
    """Make ``directory`` (the home) and its missing parents, mode 0700; what
    exists is left as it is."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            os.chmod(path, 0o700)  # mkdir's mode passes through the umask


def _remove(path: Path) -> None:
    """Remove the env: its links are removed, never followed."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    shutil.rmtree(path)


__all__ = [
    "DATA_STACK",
    "ENV_DIR_NAME",
    "KernelEnv",
    "Package",
    "managed_paths",
    "resolve_kernel_python",
]

"""The managed kernel environment in the sandbox's command line: bound
read-write inside the hidden home, after the home's cover, and never shown
read-only again through the interpreter's own paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.errors import KernelError
from recursa.kernel.sandbox import KernelView, SandboxPolicy, bwrap_args


def mounts(args: list[str]) -> list[tuple[str, str]]:
    found = []
    for index, arg in enumerate(args):
        if arg in ("--tmpfs", "--dev", "--proc"):
            found.append((arg, args[index + 1]))
        elif arg in ("--bind", "--ro-bind"):
            found.append((arg, args[index + 2]))
    return found


def view(home: Path, workspace: Path, interpreter: tuple[Path, ...] = ()) -> KernelView:
    kernels = home / "kernels"
    return KernelView(
        workspace=workspace,
        kernel_dir=kernels / "kernel-1-ab",
        connection_file=kernels / "kernel-1-ab.json",
        interpreter=interpreter,
    )


def test_the_env_is_bound_read_write_after_the_home_is_hidden(tmp_path: Path) -> None:
    home, env = tmp_path / "home", tmp_path / "home" / "kernel-env"
    site = env / "lib" / "python3.11" / "site-packages"
    project = tmp_path / "project" / ".venv" / "lib" / "python3.11" / "site-packages"
    policy = SandboxPolicy(kind="bwrap", hidden=(home,), writable=(env,))
    order = mounts(bwrap_args(policy, view(home, tmp_path / "w", (env, site, project))))
    position = {m: i for i, m in enumerate(order)}
    assert position[("--tmpfs", str(home))] < position[("--bind", str(env))]
    # Its own paths stay writable (a read-only bind over them would undo that);
    # the project's, under the covered /tmp, are shown read-only.
    assert ("--ro-bind", str(env)) not in position
    assert ("--ro-bind", str(site)) not in position
    assert ("--ro-bind", str(tmp_path / "project" / ".venv")) not in position
    assert ("--ro-bind", str(project)) in position
    assert ("--bind", str(home)) not in position


def test_a_writable_directory_that_would_show_the_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    policy = SandboxPolicy(kind="bwrap", hidden=(home,), writable=(tmp_path,))
    with pytest.raises(KernelError, match="would show a hidden directory"):
        bwrap_args(policy, view(home, tmp_path / "w"))


def test_no_writable_directory_binds_nothing_more(tmp_path: Path) -> None:
    home = tmp_path / "home"
    plain = bwrap_args(SandboxPolicy(kind="bwrap", hidden=(home,)), view(home, tmp_path / "w"))
    binds = [m for m in mounts(plain) if m[0] == "--bind"]
    assert binds == [
        ("--bind", str(tmp_path / "w")),
        ("--bind", str(home / "kernels" / "kernel-1-ab")),
    ]

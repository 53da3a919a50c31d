"""The managed kernel environment in the sandbox's command line: bound
read-write inside the hidden home, after the home's cover, and never shown
read-only again through the interpreter's own paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.errors import KernelError
from recursa.kernel.sandbox import KernelView, SandboxPolicy, bwrap_args, check_sandbox, tool_prefix


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


def _bwrap_works() -> bool:
    try:
        check_sandbox("bwrap", network=True)
    except KernelError:
        return False
    return True


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap cannot run here")
def test_the_clis_pip_sees_the_env_writable_and_the_named_files_read_only(
    tmp_path: Path,
) -> None:
    home, env = tmp_path / "home", tmp_path / "home" / "kernel-env"
    wheel = tmp_path / "pkg-0.1-py3-none-any.whl"
    wheel.write_bytes(b"")
    policy = SandboxPolicy(kind="bwrap", hidden=(home,))
    args = tool_prefix(policy, writable=(env,), readable=(wheel, home / "x"), cwd=tmp_path)
    order = mounts(args)
    position = {m: i for i, m in enumerate(order)}
    assert position[("--tmpfs", str(home))] < position[("--bind", str(env))]
    assert ("--ro-bind", str(wheel)) in position
    # The working directory holds the home: it is not shown, nor what lies in the home.
    assert ("--ro-bind", str(tmp_path)) not in position
    assert ("--ro-bind", str(home / "x")) not in position
    assert args[-3:] == ["--chdir", "/", "--"]  # pip is given absolute paths
    assert "--die-with-parent" in args
    assert tool_prefix(SandboxPolicy(kind="none"), writable=(env,), readable=(), cwd=tmp_path) == []

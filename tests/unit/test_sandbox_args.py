"""The sandbox's command line, as data: what is hidden, what is bound, in
which order, and what is refused. (tests/integration/test_sandbox.py runs it.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.errors import KernelError
from recursa.kernel.sandbox import KernelView, SandboxPolicy, bwrap_args, sandbox_env


def mounts(args: list[str]) -> list[tuple[str, str]]:
    """(option, destination) for every mount, in order."""
    found = []
    for index, arg in enumerate(args):
        if arg in ("--tmpfs", "--dev", "--proc"):
            found.append((arg, args[index + 1]))
        elif arg in ("--bind", "--ro-bind"):
            found.append((arg, args[index + 2]))
    return found


def view(root: Path, workspace: Path, api: Path | None = None) -> KernelView:
    kernels = root / "home" / "kernels"
    return KernelView(
        workspace=workspace,
        kernel_dir=kernels / "kernel-1-ab",
        connection_file=kernels / "kernel-1-ab.json",
        api_socket=api,
    )


def test_a_workspace_holding_the_home_is_bound_before_the_home_is_hidden(tmp_path: Path) -> None:
    home = tmp_path / "home"
    args = bwrap_args(SandboxPolicy(kind="bwrap", hidden=(home,)), view(tmp_path, tmp_path))
    order = mounts(args)
    assert order[:3] == [("--ro-bind", "/"), ("--dev", "/dev"), ("--proc", "/proc")]
    position = {m: i for i, m in enumerate(order)}
    assert position[("--tmpfs", "/tmp")] < position[("--bind", str(tmp_path))]
    assert position[("--bind", str(tmp_path))] < position[("--tmpfs", str(home))]
    assert position[("--tmpfs", str(home))] < position[("--tmpfs", str(home / "kernels"))]
    kernel_dir = home / "kernels" / "kernel-1-ab"
    assert position[("--tmpfs", str(home / "kernels"))] < position[("--bind", str(kernel_dir))]
    # Its connection file: in its private /tmp, not where the others are.
    assert ("--ro-bind", "/tmp/.recursa/kernel-1-ab.json") in position
    assert ("--ro-bind", str(home / "kernels" / "kernel-1-ab.json")) not in position
    assert "--unshare-pid" in args
    assert "--unshare-net" not in args
    assert "--die-with-parent" not in args
    assert "--new-session" not in args
    assert args[-3:] == ["--chdir", str(tmp_path), "--"]


def test_the_api_sockets_directory_is_bound_read_only_unless_it_is_hidden(tmp_path: Path) -> None:
    home = tmp_path / "home"
    policy = SandboxPolicy(kind="bwrap", hidden=(home,))
    own_dir = home / "kernel-api" / "kernel.sock"
    order = mounts(bwrap_args(policy, view(tmp_path, tmp_path / "w", own_dir)))
    assert ("--ro-bind", str(home / "kernel-api")) in order
    # A socket right in the home: the socket alone, never the home.
    beside = home / "daemon.sock"
    order = mounts(bwrap_args(policy, view(tmp_path, tmp_path / "w", beside)))
    assert ("--ro-bind", str(beside)) in order
    assert ("--ro-bind", str(home)) not in order


def test_network_false_unshares_the_network(tmp_path: Path) -> None:
    policy = SandboxPolicy(kind="bwrap", network=False, hidden=(tmp_path / "home",))
    assert "--unshare-net" in bwrap_args(policy, view(tmp_path, tmp_path / "w"))


@pytest.mark.parametrize("where", [".", "kernels/sub", "sessions/s-1"])
def test_a_workspace_that_would_show_a_hidden_directory_is_refused(
    tmp_path: Path, where: str
) -> None:
    """The home itself, or anything in it (another session's snapshot is code
    that session's kernel runs when it is restored)."""
    home = tmp_path / "home"
    workspace = home / where
    with pytest.raises(KernelError, match="must not see"):
        bwrap_args(SandboxPolicy(kind="bwrap", hidden=(home,)), view(tmp_path, workspace))


def test_a_sandboxed_environment_gets_writable_state_dirs_unless_it_sets_them() -> None:
    env = sandbox_env(SandboxPolicy(kind="bwrap"), {"IPYTHONDIR": "/mine"})
    assert env["IPYTHONDIR"] == "/mine"
    assert env["MPLCONFIGDIR"].startswith("/tmp/")
    assert sandbox_env(SandboxPolicy(kind="none"), {}) == {}


def test_the_interpreter_is_shown_read_only_where_a_cover_would_hide_it(tmp_path: Path) -> None:
    """A checkout and its venv under /tmp (as in CI) stay importable; a path
    that holds the home, or /tmp itself, is never bound; one in the workspace
    is left to the workspace's own (writable) bind."""
    home = tmp_path / "home"
    checkout = tmp_path / "checkout"
    workspace = tmp_path / "w"
    for path in (checkout / ".venv" / "lib", checkout / "src", workspace / "lib", home):
        path.mkdir(parents=True)
    interpreter = (
        checkout / ".venv",
        checkout / ".venv" / "lib",  # inside the one above: not bound again
        checkout / "src",
        Path("/usr/lib"),  # not covered: seen through the read-only root
        Path("/tmp"),  # would uncover the private /tmp
        tmp_path,  # would uncover the home
        workspace / "lib",  # in the workspace
    )
    base = view(tmp_path, workspace)
    shown = KernelView(
        workspace=base.workspace,
        kernel_dir=base.kernel_dir,
        connection_file=base.connection_file,
        interpreter=interpreter,
    )
    order = mounts(bwrap_args(SandboxPolicy(kind="bwrap", hidden=(home,)), shown))
    binds = [dest for option, dest in order if option == "--ro-bind" and dest.startswith("/")]
    assert str(checkout / ".venv") in binds
    assert str(checkout / "src") in binds
    for absent in (checkout / ".venv" / "lib", "/usr/lib", "/tmp", tmp_path, workspace / "lib"):
        assert str(absent) not in binds
    position = {m: i for i, m in enumerate(order)}
    assert position[("--tmpfs", "/tmp")] < position[("--ro-bind", str(checkout / ".venv"))]

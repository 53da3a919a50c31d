"""Fixtures every test gets: an isolated RECURSA_HOME, no provider keys, and
checks that the test left no child process (kernels, daemons, servers) and no
asyncio task behind."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest

from jupyter_gateways import Gateway, Kind, missing, start_gateway
from recursa.config import Config, load_config

_SCRUBBED = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "RECURSA_MODEL",
    "RECURSA_CONFIG",
)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "recursa-home"
    monkeypatch.setenv("RECURSA_HOME", str(home))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    # Kernels run on the project's interpreter: a managed env per test home
    # would be made for each test (tests/integration/test_kernel_env.py covers it).
    monkeypatch.setenv("RECURSA_KERNEL_PYTHON", "project")
    for name in _SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children(recursive=True)}
    yield
    leaked = [p for p in me.children(recursive=True) if p.pid not in before]
    # Processes told to stop may take a moment to exit: wait on them, do not sleep.
    _gone, alive = psutil.wait_procs(leaked, timeout=10)
    for proc in alive:
        proc.kill()
    if alive:
        names = ", ".join(f"{p.pid}" for p in alive)
        pytest.fail(f"the test left child processes running: {names}")


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Every task a test starts has ended once its fixtures are torn down (this
    one is torn down after them): a task still pending then is owned by nobody.
    It is cancelled, and the test fails naming it."""
    before = asyncio.all_tasks()
    yield
    me = asyncio.current_task()
    leaked = [
        t
        for t in asyncio.all_tasks()
        if t is not me and t not in before and not t.done() and not _loops_own(t)
    ]
    if not leaked:
        return
    for task in leaked:
        task.cancel()
    await asyncio.gather(*leaked, return_exceptions=True)
    names = ", ".join(sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in leaked))
    pytest.fail(f"the test left asyncio tasks running: {names}")


def _loops_own(task: asyncio.Task[object]) -> bool:
    """The loop's own finalizer of an async generator dropped unfinished (it
    schedules ``aclose()`` as a task when the generator is collected)."""
    return type(task.get_coro()).__name__ == "async_generator_athrow"


@pytest.fixture(autouse=True)
def _no_leftover_daemon(_isolated_home: Path) -> Iterator[None]:
    """A daemon (and its kernels) started by a test is detached from it, so the
    child-process check cannot see it: fail the test that leaves one running."""
    yield
    from recursa.daemon.paths import DaemonPaths, read_state

    state_file = _isolated_home / "daemon.json"
    if not state_file.exists():
        return
    state = read_state(DaemonPaths.for_home(_isolated_home))
    if state is None or not psutil.pid_exists(state.pid):
        return
    daemon = psutil.Process(state.pid)
    family = [daemon, *daemon.children(recursive=True)]
    for proc in family:
        proc.kill()
    psutil.wait_procs(family, timeout=10)
    pytest.fail(f"the test left a daemon running (pid {state.pid})")


@pytest.fixture
def home(_isolated_home: Path) -> Path:
    return _isolated_home


@pytest.fixture
def config(home: Path) -> Config:
    """A configuration rooted in the test's RECURSA_HOME, with short limits."""
    return load_config()


def _serve_gateway(kind: Kind, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    reason = missing(kind)
    if reason is not None:
        pytest.skip(reason)
    with start_gateway(kind, tmp_path_factory.mktemp(f"gateway-{kind}")) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def kernel_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A real Jupyter Kernel Gateway on loopback for the module (tests/jupyter_gateways.py);
    skipped, naming scripts/gateways, when its venv is not installed."""
    yield from _serve_gateway("kg", tmp_path_factory)


@pytest.fixture(scope="module", params=["kg", "eg"])
def jupyter_gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """Each real gateway in turn (Kernel Gateway, then Enterprise Gateway), for
    the module: a test that takes it runs against both."""
    yield from _serve_gateway(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def enterprise_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A real Jupyter Enterprise Gateway on loopback for the module, as above."""
    yield from _serve_gateway("eg", tmp_path_factory)

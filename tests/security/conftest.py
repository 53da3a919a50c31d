"""Fixtures for the attack tests: the loopback model server, and a daemon
environment pointed at it whose processes are killed afterwards (as in the
integration tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon_kit import daemon_env, kill_everything
from recursa.testing import FakeModelServer


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer.in_thread() as fake:
        yield fake


@pytest.fixture
def env(home: Path, server: FakeModelServer) -> Iterator[dict[str, str]]:
    yield daemon_env(home, server)
    kill_everything(home)

"""What the command line loads before it runs a command: ``--help`` does not
load the daemon's client (nor its HTTP stack), and every command runs after
the process is hardened."""

from __future__ import annotations

import subprocess
import sys

import pytest

import recursa.daemon.client
from recursa.cli import main

PROBE = """
import sys
from recursa.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx2', 'recursa')), file=sys.stderr)
"""


def loaded_by(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return result.stderr


def test_help_does_not_load_the_daemon_client() -> None:
    loaded = loaded_by("--help")
    assert "'recursa.cli.sessions'" in loaded  # the commands were registered
    assert "recursa.daemon.client" not in loaded and "httpx2" not in loaded


def test_a_command_runs_in_a_hardened_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(recursa.daemon.client, "harden_process", lambda: calls.append("hard"))
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0 and calls == []
    with pytest.raises(SystemExit) as run_exit:
        main(["models", "--json"])
    assert run_exit.value.code == 0 and calls == ["hard"]

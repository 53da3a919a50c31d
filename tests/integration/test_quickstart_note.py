"""The quickstart leaves the daemon running (its sessions live there) and says
so at its end, with how to stop it: ``scripts/daemon-note`` against a real
daemon."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from daemon_kit import daemon_pid, recursa
from recursa.testing import FakeModelServer, Reply

ROOT = Path(__file__).resolve().parents[2]
NOTE = ROOT / "scripts" / "daemon-note"
CLI = str(Path(sys.executable).with_name("recursa"))


def note(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NOTE)],
        env={**env, "RECURSA": CLI},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_note_names_the_running_daemon_its_memory_and_how_to_stop_it(
    server: FakeModelServer, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    server.push(Reply(text="hello"))
    ran = recursa(["run", "--model", "openai/m", "hi"], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    said = note(env)
    assert said.returncode == 0, said.stderr
    [line] = said.stdout.splitlines()
    pid = daemon_pid(home)
    assert re.fullmatch(
        rf"== the daemon \(pid {pid}, \d+\.\d GB of memory\) keeps running with the session; "
        rf"stop it with: {re.escape(CLI)} daemon stop",
        line,
    ), line
    # It only says so: the daemon still runs.
    status = recursa(["daemon", "status"], env, tmp_path)
    assert status.returncode == 0, status.stderr


def test_the_note_is_silent_when_no_daemon_runs(env: dict[str, str]) -> None:
    said = note(env)
    assert said.returncode == 0, said.stderr
    assert said.stdout == ""


def test_the_quickstart_ends_with_the_note_and_keeps_the_runs_exit_code() -> None:
    script = (ROOT / "scripts" / "quickstart").read_text(encoding="utf-8")
    assert "exec .venv/bin/recursa run" not in script
    run, note_at = (
        script.index(".venv/bin/recursa run --model"),
        script.index("scripts/daemon-note"),
    )
    assert run < note_at
    assert script.rstrip().endswith('exit "$code"')
    assert os.access(NOTE, os.X_OK)


def test_the_readme_quickstart_says_the_daemon_keeps_running() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = text[text.index("## Two commands") : text.index("To run the test suite")]
    assert "keeps running with the session" in quickstart
    assert "`.venv/bin/recursa daemon stop` stops it" in quickstart

"""What the command line loads before it runs a command: ``--help`` loads no
command's module (nor the daemon's client, nor its HTTP stack) yet lists every
command; the index of commands (``recursa.cli.commands.COMMANDS``) matches
what the modules register; and every command runs after the process is
hardened."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import recursa.daemon.client
from recursa.cli import main
from recursa.cli.commands import COMMANDS, first_paragraph

PROBE = """
import sys
from recursa.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx2', 'recursa', 'rich')), file=sys.stderr)
"""

# Imports each command module in turn, in a fresh process, and prints which
# top-level commands each one registered, with the first paragraph of their help.
REGISTRATIONS = """
import importlib, json
import typer.main
from recursa.cli.root import app
from recursa.cli.commands import COMMANDS

seen, out = set(), {}
for module in dict.fromkeys(e.module for e in COMMANDS.values()):
    importlib.import_module(module)
    group = typer.main.get_group(app)
    for name, command in group.commands.items():
        if name not in seen:
            seen.add(name)
            first = " ".join((command.help or "").split("\\n\\n")[0].split())
            out[name] = [module, first, command.hidden]
print(json.dumps(out))
"""


def loaded_by(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return result.stderr


def test_help_loads_no_command_module_nor_the_daemon_client() -> None:
    loaded = loaded_by("--help")
    assert "'recursa.cli.commands'" in loaded  # the index was read
    for module in {entry.module for entry in COMMANDS.values()}:
        assert f"'{module}'" not in loaded
    assert "recursa.daemon.client" not in loaded and "httpx2" not in loaded
    assert "recursa.cli.quick" not in loaded  # loaded only for the calls it may answer
    # Plain help: typer's rich formatter loads rich's markdown and traceback
    # modules, most of the time --help took.
    assert "'typer.rich_utils'" not in loaded and "'rich.markdown'" not in loaded


def test_a_command_loads_its_own_module_only() -> None:
    loaded = loaded_by("usage", "--help")
    assert "'recursa.cli.sessions'" in loaded
    others = {entry.module for entry in COMMANDS.values()} - {"recursa.cli.sessions"}
    assert not [module for module in others if f"'{module}'" in loaded]


def test_the_index_is_what_the_modules_register() -> None:
    result = subprocess.run(
        [sys.executable, "-c", REGISTRATIONS], capture_output=True, text=True, check=True
    )
    registered = json.loads(result.stdout)
    assert set(registered) == set(COMMANDS)
    for name, (module, paragraph, hidden) in registered.items():
        assert (COMMANDS[name].module, COMMANDS[name].help) == (module, paragraph), name
        assert not hidden, name


def test_help_lists_every_command_with_its_help() -> None:
    # Each command's whole first sentence, wrapped (not cut) on a narrow terminal.
    env = {**os.environ, "COLUMNS": "60"}
    result = subprocess.run(
        [sys.executable, "-m", "recursa", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    rows: list[str] = []
    for line in result.stdout.split("Commands:")[1].split("\n\n")[0].splitlines():
        if line.startswith("   ") and rows:  # a row's help, wrapped onto the next line
            rows[-1] += " " + line.strip()
        elif line.strip():
            rows.append(line.strip())
    rows = [" ".join(row.split()).replace("- ", "-") for row in rows]
    for name, entry in COMMANDS.items():
        assert f"{name} {entry.help.replace('- ', '-')}" in rows, name


def test_a_group_without_arguments_prints_its_help_on_stdout() -> None:
    # Pipeable (`recursa daemon | less`), exit 2 as before; and each listed
    # command keeps the whole first paragraph of its help, not one sentence.
    result = subprocess.run(
        [sys.executable, "-m", "recursa", "daemon"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2 and result.stderr == ""
    assert "Commands:" in result.stdout
    assert "Exit 1 when none runs." in result.stdout


def test_a_listed_help_is_its_first_paragraph_as_click_reads_it() -> None:
    text = "\b\nFirst line,\n  wrapped.\n\nSecond paragraph.\f hidden"
    assert first_paragraph(text) == "First line, wrapped."
    assert first_paragraph("Shown.\fHidden.") == "Shown."


def test_a_mistyped_command_is_told_the_near_ones() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "recursa", "agnets"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "Did you mean 'agents'" in result.stderr


def test_a_command_runs_in_a_hardened_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(recursa.daemon.client, "harden_process", lambda: calls.append("hard"))
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0 and calls == []
    with pytest.raises(SystemExit) as run_exit:
        main(["models", "--json"])
    assert run_exit.value.code == 0 and calls == ["hard"]

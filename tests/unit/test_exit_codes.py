"""Every exit code the CLI uses is documented: in ``recursa.cli.exits``, in
``recursa --help`` and in the README's table. And the README says what Ctrl-C
does as the CLI does it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import recursa.cli.exits as exits
from recursa.cli.autonomous import EXIT_BY_REASON
from recursa.errors import RecursaError

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLI = ROOT / "src" / "recursa" / "cli"


def _subclasses(cls: type[RecursaError]) -> list[type[RecursaError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def _literal_exits() -> set[int]:
    """Int literals the CLI's code exits with: ``typer.Exit(N)``, ``sys.exit(N)``."""
    codes: set[int] = set()
    for path in CLI.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = ast.unparse(node.func)
            arg = node.args[0]
            if name in ("typer.Exit", "Exit", "sys.exit", "exit") and isinstance(arg, ast.Constant):
                assert isinstance(arg.value, int), (path, ast.unparse(node))
                codes.add(arg.value)
    return codes


def used_codes() -> set[int]:
    """Every exit code the CLI's code defines: the error classes', the turn end
    reasons', the named ones in recursa.cli.exits, and any literal."""
    named = {
        value
        for key, value in vars(exits).items()
        if key.startswith("EXIT_") and isinstance(value, int)
    }
    errors = {cls.exit_code for cls in _subclasses(RecursaError)}
    return named | errors | set(EXIT_BY_REASON.values()) | _literal_exits()


def readme_table() -> dict[int, str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("**Exit codes**") :]
    rows = re.findall(r"^\| *(\d+) *\| *(.+?) *\|$", section, re.M)
    return {int(code): meaning for code, meaning in rows}


def test_the_table_in_the_code_covers_every_code_the_cli_uses() -> None:
    used = used_codes()
    assert {0, 1, 2, 8, 9, 130} <= used  # the scan finds what it must
    assert set(exits.EXIT_CODES) == used


def test_the_readme_table_lists_every_exit_code() -> None:
    table = readme_table()
    assert set(table) == used_codes()
    assert all(table.values())


def test_recursa_help_lists_every_exit_code() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    shown = subprocess.run(
        [sys.executable, "-m", "recursa", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    assert "Exit codes:" in shown
    for code, meaning in exits.EXIT_CODES.items():
        assert re.search(rf"^ *{code}  {re.escape(meaning)}", shown, re.M), code


def test_the_readme_says_a_second_ctrl_c_detaches_as_the_cli_does() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "a second Ctrl-C quits" not in text
    assert "Ctrl-C interrupts the running turn (the session stays, idle); a second Ctrl-C" in text
    assert "detaches: the command exits 130 and the session goes on in the daemon" in text
    # What the CLI says, in recursa run's help and while it interrupts a turn.
    run_doc = " ".join((CLI / "run.py").read_text(encoding="utf-8").split())
    assert "a second Ctrl-C detaches" in run_doc
    assert "press Ctrl-C again to detach" in (CLI / "follow.py").read_text(encoding="utf-8")

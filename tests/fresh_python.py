"""Code run in a new Python interpreter, for tests of what a process imports."""

from __future__ import annotations

import subprocess
import sys


def fresh_python(code: str) -> str:
    """The standard output of ``code`` run by a new interpreter (this one's
    executable, so the same environment); a failure raises with its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"the probe failed ({done.returncode}):\n{done.stderr}")
    return done.stdout

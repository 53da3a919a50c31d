"""Runs in the kernel's process first: ipykernel's launcher, without its debugger.

ipykernel imports debugpy at start for the Jupyter debugger (``debug_request``
on the control channel), which recursa never sends: about 15 MB of every
kernel's memory and a tenth of its start. An import of it that fails makes
ipykernel run without the debugger, so this launcher makes it fail, then does
what ``python -m ipykernel_launcher`` does, with recursa's application
(:mod:`recursa.api.kernelapp`: no shell channel thread).
"""

from __future__ import annotations

import sys
from pathlib import Path


def without_debugger() -> None:
    """Make ``import debugpy`` fail in this process (ipykernel then has no
    debugger); a debugpy already imported stays."""
    sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]


def main() -> None:
    # As ipykernel_launcher: the kernel's directory leaves sys.path while
    # ipykernel loads (InteractiveShellApp.init_path puts it back).
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    without_debugger()
    from recursa.api.kernelapp import KernelApp

    KernelApp.launch_instance()


if __name__ == "__main__":
    main()

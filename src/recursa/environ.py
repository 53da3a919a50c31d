"""What a process of recursa reads from its environment before, or without,
the configuration file: where the home is (``RECURSA_HOME``), whether to show
tracebacks (``RECURSA_DEBUG``) and colors (``NO_COLOR``, ``TERM``), and
whether a proxy applies to a plain-HTTP URL (``http_proxy``, ``all_proxy``,
``no_proxy``).

Apart from :mod:`recursa.config` (which re-exports the first four) so that a client of
a running daemon, such as ``recursa agents``, needs neither pydantic's
configuration schema nor the time to build it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

DEFAULT_HOME = Path("~/.recursa")


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """``RECURSA_HOME`` (default ``~/.recursa``) as :func:`recursa.config.load_config`
    resolves it, without reading the configuration file: all a client of a
    running daemon needs (the CLI's calls to it)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    return Path(environ.get("RECURSA_HOME") or DEFAULT_HOME).expanduser()


def environment() -> dict[str, str]:
    """A copy of this process's environment, to start a child process (the daemon)
    with; the caller decides what to leave out."""
    return dict(os.environ)


def debug_enabled() -> bool:
    """``RECURSA_DEBUG=1``: show tracebacks of internal errors."""
    return os.environ.get("RECURSA_DEBUG", "") not in ("", "0")


def color_enabled(stream: TextIO) -> bool:
    """Whether to color output on ``stream``: a terminal, and NO_COLOR unset."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def http_proxied(host: str) -> bool:
    """Whether a plain-HTTP request to ``host`` may go through a proxy: an
    ``http`` or ``all`` proxy is set (the environment's ``http_proxy`` or
    ``all_proxy`` in any case, and on macOS and Windows the system's, as
    httpx reads them), unless ``no_proxy`` names ``host`` exactly or is
    ``*``. Where httpx's own matching of ``no_proxy`` might differ (a domain,
    a network), this says proxied: the caller then leaves the request to httpx."""
    import urllib.request  # once per provider, in the process that runs it

    proxies = urllib.request.getproxies()
    if "http" not in proxies and "all" not in proxies:
        return False
    exempt = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
    names = {name.strip().lower() for name in exempt.split(",")}
    return not ("*" in names or host.lower() in names)


__all__ = [
    "DEFAULT_HOME",
    "color_enabled",
    "debug_enabled",
    "environment",
    "home_dir",
    "http_proxied",
]

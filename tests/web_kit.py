"""Helpers for tests of ``recursa web``: run the real command in a subprocess
against a daemon's environment, read the URL it prints, and talk to it over
real HTTP (the API with the token in a header, as a script would)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from playwright.sync_api import Page, sync_playwright

from daemon_kit import daemon_env, kill_everything
from recursa.testing import FakeModelServer

PREFIX = "recursa web: "
SHOTS = "RECURSA_SHOTS"
CHROMIUM = Path("/usr/bin/chromium")


def shots_dir(default: Path) -> Path:
    """Where screenshots go: ``$RECURSA_SHOTS``, else ``default`` (a test's tmp dir)."""
    where = Path(os.environ.get(SHOTS) or default)
    where.mkdir(parents=True, exist_ok=True)
    return where


@dataclass(frozen=True)
class WebServer:
    url: str  # what the command printed: http://127.0.0.1:PORT/#token=TOKEN[&session=S]
    process: subprocess.Popen[str]

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.url).fragment)["token"][0]

    def client(self, *, token: str | None = None) -> httpx2.Client:
        """A client of the API with the token (``token`` overrides it) in a header."""
        headers = {"authorization": f"token {token or self.token}"}
        return httpx2.Client(base_url=self.base, headers=headers, timeout=30)

    def op(self, name: str, body: Mapping[str, Any] | None = None) -> Any:
        """Call one operation through the proxy; it must succeed. Its JSON reply."""
        with self.client() as http:
            response = http.post(f"/api/op/{name}", json=dict(body or {}))
        assert response.status_code == 200, (name, response.status_code, response.text)
        return response.json()


@contextlib.contextmanager
def web_server(
    env: Mapping[str, str], cwd: Path, args: Sequence[str] = (), *, browser: bool = False
) -> Iterator[WebServer]:
    """``recursa web --no-browser [ARGS]`` running (it starts the daemon of
    ``env``'s home when none runs); stopped with Ctrl-C (SIGINT) at the end.
    ``browser``: without ``--no-browser`` (``env`` names the browser)."""
    flags = [] if browser else ["--no-browser"]
    process = subprocess.Popen(
        [sys.executable, "-m", "recursa", "web", *flags, *args],
        env=dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # ends at the URL, or at exit (EOF)
        if not line.startswith(PREFIX):
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"recursa web printed {line!r}; stderr: {err}")
        yield WebServer(line[len(PREFIX) :].strip(), process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def web_on_a_fresh_home(tmp_path: Path) -> Iterator[WebServer]:
    """``recursa web`` on a new home whose daemon's model is a fake server with
    no script; everything the home started is killed afterwards."""
    home = tmp_path / "home"
    with FakeModelServer.in_thread() as fake:
        try:
            with web_server(daemon_env(home, fake), tmp_path) as server:
                yield server
        finally:
            kill_everything(home)


@contextlib.contextmanager
def browser_page() -> Iterator[tuple[Page, list[str]]]:
    """A page of a headless chromium, and the page's script errors as they happen."""
    if not CHROMIUM.exists():
        pytest.fail(
            "the browser test needs Debian's chromium: apt-get install chromium (CI installs it)",
            pytrace=False,
        )
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(30_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            yield page, errors
        finally:
            browser.close()

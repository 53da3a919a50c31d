"""Real Jupyter gateways on loopback, for the gateway kernel backend's tests
and benchmarks: Jupyter Kernel Gateway (``kg``) and Jupyter Enterprise Gateway
(``eg``), each run from its own venv that ``scripts/gateways`` installs under
``.venv-gateways/`` (Enterprise Gateway's pins cannot share the project's venv).

:func:`start_gateway` starts one and yields a :class:`Gateway`; leaving it
deletes every kernel through REST, stops the server, and fails if a kernel
process outlives it. :class:`Channels` speaks the kernel channels WebSocket
(tornado's client, as a backend would) for tests that drive a kernel by hand.

How a gateway is started, and why:

- its kernelspec ``recursa`` lives in a temporary ``JUPYTER_PATH`` and runs
  ipykernel on *this* interpreter (the project's venv), so the kernels a
  gateway starts are the project's kernels, whatever the gateway's venv holds;
- ``JUPYTER_RUNTIME_DIR``, ``JUPYTER_DATA_DIR``, ``JUPYTER_CONFIG_DIR`` and
  ``IPYTHONDIR`` are temporary directories: a gateway writes a cookie secret
  and connection files, a kernel IPython's history, and none of it may land
  in the user's home;
- the port is 0 (the kernel picks a free one; the gateway's listening socket
  tells which, read through psutil), so parallel runs never race for a port;
- the token (``Authorization: token T``) is random and passed by environment
  (``KG_AUTH_TOKEN`` / ``EG_AUTH_TOKEN``), not argv; listing kernels is on,
  which teardown needs and Enterprise Gateway turns off by default;
- Enterprise Gateway refuses to start a kernel for a ``KERNEL_USERNAME`` in
  ``unauthorized_users`` (default ``root``; without the variable it is the
  gateway's own user): the list is set to a name nobody has, so the tests run
  as root in CI containers too.

What a kernel's environment is (both checked by the tests):

- Kernel Gateway: a POST with ``env`` gives the kernel ``PATH``, the
  gateway's own variables named in ``env_process_whitelist``
  (``KG_ENV_PROCESS_WHITELIST``) and the request's ``KERNEL_*`` variables
  plus those named in ``env_whitelist`` (``KG_ENV_WHITELIST``); a POST
  without ``env`` gives it the gateway's whole environment.
- Enterprise Gateway: the gateway's variables named in ``inherited_envs``
  (``EG_INHERITED_ENVS``; ``env_process_whitelist`` is its deprecated name)
  and the request's ``KERNEL_*`` variables plus those named in
  ``client_envs`` (``EG_CLIENT_ENVS``; ``*`` allows any). Not even ``PATH``
  is added; a POST without ``env`` gives the whole environment, as above.

Neither passes its own token variable on. :func:`start_gateway` takes the
names a POST may set besides ``KERNEL_*`` (``client_envs``).

Both whitelist ``IPYTHONDIR`` here, so a kernel keeps to the temporary one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx2
import psutil

Kind = Literal["kg", "eg"]
KINDS: tuple[Kind, ...] = ("kg", "eg")
KERNEL_NAME = "recursa"
ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venv-gateways"
STAMP = ".recursa-gateway-stamp"
"""Written by scripts/gateways after a venv's install succeeded."""
START_DEADLINE = 60.0
"""Seconds a gateway has to answer ``GET /api`` (it takes about 1 s)."""
STOP_DEADLINE = 15.0
INSTALL = "scripts/gateways"

_TITLE = {"kg": "Jupyter Kernel Gateway", "eg": "Jupyter Enterprise Gateway"}
_MODULE = {"kg": "kernel_gateway", "eg": "enterprise_gateway"}
_APP = {"kg": "KernelGatewayApp", "eg": "EnterpriseGatewayApp"}
_TOKEN_VAR = {"kg": "KG_AUTH_TOKEN", "eg": "EG_AUTH_TOKEN"}
_KERNEL_VARS = ("IPYTHONDIR",)
"""The gateway's own variables a kernel inherits (see the module docstring)."""


def gateway_python(kind: Kind) -> Path | None:
    """The interpreter of ``kind``'s venv, or None when it is not installed."""
    venv = VENVS / kind
    python = venv / "bin" / "python"
    return python if (venv / STAMP).exists() and python.exists() else None


def missing(kind: Kind) -> str | None:
    """Why ``kind`` cannot be started (one line naming the command), or None."""
    if gateway_python(kind) is not None:
        return None
    return f"{_TITLE[kind]} is not installed in {VENVS / kind}: run {INSTALL}"


def argv(
    kind: Kind, python: Path, kernel_name: str = KERNEL_NAME, client_envs: Sequence[str] = ()
) -> list[str]:
    """The command line that serves ``kind`` on a free loopback port; a POST's
    ``env`` may set ``client_envs`` besides ``KERNEL_*``."""
    app = _APP[kind]
    args = [
        str(python),
        "-m",
        _MODULE[kind],
        f"--{app}.ip=127.0.0.1",
        f"--{app}.port=0",
        f"--{app}.port_retries=0",
        f"--{app}.default_kernel_name={kernel_name}",
    ]
    if kind == "kg":
        args += [
            "--JupyterWebsocketPersonality.list_kernels=True",
            *(f"--KernelGatewayApp.env_process_whitelist={name}" for name in _KERNEL_VARS),
            *(f"--KernelGatewayApp.env_whitelist={name}" for name in client_envs),
        ]
    else:
        args += [
            "--EnterpriseGatewayApp.list_kernels=True",
            "--EnterpriseGatewayApp.unauthorized_users=recursa-nobody",
            *(f"--EnterpriseGatewayApp.inherited_envs={name}" for name in _KERNEL_VARS),
            *(f"--EnterpriseGatewayApp.client_envs={name}" for name in client_envs),
        ]
    return args


def write_kernelspec(
    jupyter_path: Path,
    name: str = KERNEL_NAME,
    launcher: Sequence[str] = ("-m", "ipykernel_launcher"),
) -> Path:
    """``<jupyter_path>/kernels/<name>/kernel.json``: ipykernel on this
    interpreter (or this interpreter running ``launcher``, then ``-f FILE``)."""
    spec = jupyter_path / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    kernel = {
        "argv": [sys.executable, *launcher, "-f", "{connection_file}"],
        "display_name": name,
        "language": "python",
    }
    (spec / "kernel.json").write_text(json.dumps(kernel))
    return spec


@dataclass
class Gateway:
    """A running gateway: its base ``url`` (``http://127.0.0.1:PORT``), its
    ``token``, which ``kind`` it is, and the kernelspec it starts by default."""

    kind: Kind
    url: str
    token: str
    kernel_name: str
    process: subprocess.Popen[bytes]
    log: Path
    where: Path
    _http: httpx2.Client = field(repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http")

    def request(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        """One REST call with the token (``path`` from ``/api``)."""
        return self._http.request(method, self.url + path, headers=self.headers, **kwargs)

    def kernels(self) -> list[dict[str, Any]]:
        response = self.request("GET", "/api/kernels")
        response.raise_for_status()
        kernels: list[dict[str, Any]] = response.json()
        return kernels

    def start_kernel(self, env: dict[str, str] | None = None) -> str:
        """POST ``/api/kernels`` for the default kernelspec: the new kernel's id."""
        body: dict[str, Any] = {"name": self.kernel_name}
        if env is not None:
            body["env"] = env
        response = self.request("POST", "/api/kernels", json=body)
        response.raise_for_status()
        kernel_id: str = response.json()["id"]
        return kernel_id

    def delete_kernel(self, kernel_id: str) -> int:
        """DELETE the kernel: the HTTP status (204 when it was shut down)."""
        return self.request("DELETE", f"/api/kernels/{kernel_id}").status_code

    def kernel_processes(self) -> list[psutil.Process]:
        """The processes the gateway started (its descendants): its kernels."""
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def log_tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def gateway_env(where: Path, token_var: str, token: str) -> dict[str, str]:
    """The server's environment: this one, with every Jupyter and IPython
    directory under ``where`` and the token."""
    dirs = {
        "JUPYTER_PATH": where / "jupyter-path",
        "JUPYTER_RUNTIME_DIR": where / "runtime",
        "JUPYTER_DATA_DIR": where / "data",
        "JUPYTER_CONFIG_DIR": where / "config",
        "IPYTHONDIR": where / "ipython",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KG_", "EG_", "JUPYTER"))}
    env.update({name: str(path) for name, path in dirs.items()})
    env[token_var] = token
    return env


@contextlib.contextmanager
def start_gateway(
    kind: Kind, where: Path, kernel_name: str = KERNEL_NAME, client_envs: Sequence[str] = ()
) -> Iterator[Gateway]:
    """Serve ``kind`` on loopback until the block ends, files under ``where``;
    a POST's ``env`` passes ``client_envs`` to the kernel besides ``KERNEL_*``.

    Ready means ``GET /api`` answered 200 with the token, within
    :data:`START_DEADLINE`; a server that exits or misses it raises
    ``RuntimeError`` with its log's tail. On leaving: every kernel is deleted
    through REST, the server is terminated and waited for, and a kernel
    process still alive then is killed and raises ``AssertionError``.
    """
    python = gateway_python(kind)
    if python is None:
        raise RuntimeError(missing(kind))
    where.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    env = gateway_env(where, _TOKEN_VAR[kind], token)
    write_kernelspec(Path(env["JUPYTER_PATH"]), kernel_name)
    log = where / f"{kind}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv(kind, python, kernel_name, client_envs),
            env=env,
            cwd=where,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    http = httpx2.Client(timeout=10)
    gateway = Gateway(kind, "", token, kernel_name, process, log, where, http)
    try:
        gateway.url = f"http://127.0.0.1:{_wait_ready(gateway)}"
        yield gateway
    finally:
        try:
            _stop(gateway)
        finally:
            http.close()


def _wait_ready(gateway: Gateway) -> int:
    """The port ``gateway`` listens on, once ``GET /api`` answers with its token."""
    deadline = time.monotonic() + START_DEADLINE
    port: int | None = None
    while time.monotonic() < deadline:
        if port is None:
            port = _listening_port(gateway.process.pid)
        if port is not None:
            with contextlib.suppress(httpx2.TransportError):
                response = gateway._http.get(
                    f"http://127.0.0.1:{port}/api", headers=gateway.headers
                )
                if response.status_code == 200:
                    return port
        # Paces the polling on the one event that ends it early: the server's exit.
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = gateway.process.wait(timeout=0.05)
            raise RuntimeError(
                f"{_TITLE[gateway.kind]} exited ({code}) before it served:\n{gateway.log_tail()}"
            )
    raise RuntimeError(
        f"{_TITLE[gateway.kind]} did not answer GET /api within {START_DEADLINE:.0f} s:\n"
        f"{gateway.log_tail()}"
    )


def _listening_port(pid: int) -> int | None:
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return None
    ports = [c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN]
    return ports[0] if ports else None


def _stop(gateway: Gateway) -> None:
    """Delete every kernel, stop the server; no kernel process may outlive it."""
    if gateway.process.poll() is None and gateway.url:
        with contextlib.suppress(httpx2.HTTPError):
            for kernel in gateway.kernels():
                gateway.delete_kernel(kernel["id"])
    # Kernels are reparented when the server exits: take them first.
    kernels = gateway.kernel_processes()
    gateway.process.terminate()
    try:
        gateway.process.wait(timeout=STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        gateway.process.kill()
        gateway.process.wait(timeout=STOP_DEADLINE)
    _gone, alive = psutil.wait_procs(kernels, timeout=STOP_DEADLINE)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    if alive:
        pids = ", ".join(str(p.pid) for p in alive)
        raise AssertionError(f"{_TITLE[gateway.kind]} left kernel processes: {pids}")


# ------------------------------------------------------------------ channels


@dataclass
class Executed:
    """What one ``execute_request`` produced."""

    status: str
    stdout: str = ""
    result: str | None = None
    """The ``text/plain`` of its ``execute_result``."""
    error: str | None = None


class Channels:
    """The kernel channels WebSocket (``/api/kernels/<id>/channels``): Jupyter
    messages as JSON with a ``channel`` key, over tornado's client."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self.session = uuid.uuid4().hex

    @classmethod
    async def connect(cls, gateway: Gateway, kernel_id: str) -> Channels:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        url = f"{gateway.ws_url}/api/kernels/{kernel_id}/channels"
        ws = await websocket_connect(HTTPRequest(url, headers=gateway.headers))
        return cls(ws)

    def close(self) -> None:
        self._ws.close()

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        """Send one message; its ``msg_id``."""
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "username": "recursa-test",
            "session": self.session,
            "version": "5.3",
            "date": "",
        }
        message = {
            "header": header,
            "parent_header": {},
            "metadata": {},
            "content": content,
            "channel": channel,
            "buffers": [],
        }
        self._ws.write_message(json.dumps(message))
        return msg_id

    async def receive(self, timeout: float) -> dict[str, Any]:
        raw = await asyncio.wait_for(self._ws.read_message(), timeout)
        if raw is None:
            raise ConnectionError("the channels WebSocket closed")
        message: dict[str, Any] = json.loads(raw)
        return message

    async def execute(
        self,
        code: str,
        timeout: float = 30,
        on_stream: Callable[[str], None] | None = None,
    ) -> Executed:
        """Run ``code``; wait for its reply and its kernel's idle status.
        ``on_stream`` sees each stdout chunk as it arrives."""
        content = {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        msg_id = self.send("shell", "execute_request", content)
        done = asyncio.get_running_loop().time() + timeout
        executed = Executed(status="")
        idle = False
        while not (executed.status and idle):
            message = await self.receive(done - asyncio.get_running_loop().time())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, body = message["msg_type"], message["content"]
            if kind == "stream" and body["name"] == "stdout":
                executed.stdout += body["text"]
                if on_stream is not None:
                    on_stream(body["text"])
            elif kind == "execute_result":
                executed.result = body["data"].get("text/plain")
            elif kind == "error":
                executed.error = f"{body['ename']}: {body['evalue']}"
            elif kind == "execute_reply":
                executed.status = body["status"]
            elif kind == "status" and body["execution_state"] == "idle":
                idle = True
        return executed

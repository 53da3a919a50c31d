"""Kernel tokens end with their session's kernel: a session unloaded or
stopped has its tokens revoked at once, and a kernel's request in flight
when its token is revoked (its session was stopped while the request's body
was still arriving) starts nothing: the route asks again, right before the
host starts work, and answers 401."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from fake_kernel_host import FakeKernelHost
from recursa.daemon.embedded import serve_embedded
from recursa.models.faux import per_session, register_script, reply
from recursa.protocol.person_ops import SessionRef
from recursa.runtime.host import RuntimeHost
from recursa.testing.runtime import make_runtime

WAIT = 10.0


async def test_a_request_whose_token_is_revoked_mid_body_starts_nothing(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = FakeKernelHost()
    root, _ = host.add_root("root")
    token = host.token_of(root)
    admitted = asyncio.Event()
    lookup = host.session_of_token

    def session_of_token(presented: str) -> str | None:
        admitted.set()  # the request passed the door; its body is still to come
        return lookup(presented)

    monkeypatch.setattr(host, "session_of_token", session_of_token)

    async def body() -> AsyncIterator[bytes]:
        yield b'{"task": '
        await asyncio.wait_for(admitted.wait(), WAIT)
        host.tokens.pop(token)  # the session stops: its token is revoked
        yield b'"spawn a helper"}'

    directory: Path = tmp_path_factory.mktemp("api")
    async with (
        serve_embedded(host, directory=directory) as sockets,
        httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=str(sockets.kernel)),
            base_url="http://recursa",
            headers={"authorization": f"Bearer {token}"},
        ) as http,
    ):
        reply = await http.post(
            "/v1/kernel/rlm", content=body(), headers={"content-type": "application/json"}
        )
    assert reply.status_code == 401, reply.text
    assert reply.json()["error"]["kind"] == "auth"
    assert host.kernel_calls == []


async def test_unloading_or_stopping_a_session_revokes_its_kernel_tokens(
    home: Path, tmp_path: Path
) -> None:
    register_script("idle", [], fallback=per_session(reply("done")))
    async with make_runtime(home) as runtime:
        host = RuntimeHost(runtime)
        for let_go in ("unload", "stop"):
            session = await runtime.create_session(model="faux/idle", cwd=tmp_path)
            token = runtime.boundaries.kernel_env(session.id)["RECURSA_KERNEL_TOKEN"]
            assert host.kernels.session_of_token(token) == session.id
            if let_go == "unload":
                await runtime.get(session.id).unload()
            else:
                await host.people.stop(SessionRef(session.id), None)
            assert host.kernels.session_of_token(token) is None, let_go

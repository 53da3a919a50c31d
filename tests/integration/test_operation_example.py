"""The worked example of adding a daemon operation: ``subagents_of`` (``GET
/v1/sessions/{session}/subagents``), one row in :mod:`recursa.protocol.person_ops`,
one method of :class:`~recursa.runtime.people_api.PeopleApi`, and this test.
Route, client call, host check, fakes and OpenAPI entry are derived. Real
runtime, real socket, real HTTP; the model is a faux script."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from recursa.daemon.client import DaemonClient
from recursa.daemon.embedded import serve_embedded
from recursa.errors import NotFound
from recursa.models.faux import per_session, register_script, reply
from recursa.protocol.person_ops import SUBAGENTS_OF, SessionRef
from recursa.protocol.wire import Spawn
from recursa.runtime.host import RuntimeHost
from recursa.testing import make_runtime

TIMEOUT = 120


async def test_a_sessions_subagents_are_listed_over_the_table(home: Path, tmp_path: Path) -> None:
    register_script("quick", [], fallback=per_session(reply("done")))
    token = secrets.token_urlsafe(16)
    async with (
        make_runtime(home) as runtime,
        serve_embedded(RuntimeHost(runtime), directory=tmp_path / "people", token=token) as sockets,
        DaemonClient(home, socket=sockets.people, token=token) as client,
    ):
        root = await runtime.create_session(model="faux/quick", cwd=tmp_path, name="root")
        other = await runtime.create_session(model="faux/quick", cwd=tmp_path)
        kid = runtime.tree.spawn(root.id, Spawn("say done", name="kid"))

        found = await client.call(SUBAGENTS_OF, SessionRef("root"))  # by name
        assert [(info.id, info.name, info.parent_id) for info in found] == [
            (kid.id, "kid", root.id)
        ]
        assert await client.call(SUBAGENTS_OF, SessionRef(other.id)) == []
        with pytest.raises(NotFound, match="ghost"):
            await client.call(SUBAGENTS_OF, SessionRef("ghost"))
        assert await asyncio.wait_for(runtime.tree.wait_quiet(root.id, None), TIMEOUT)

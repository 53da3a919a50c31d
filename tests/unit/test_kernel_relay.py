"""The relay of the kernel API over a kernel's channels (:mod:`recursa.kernel.relay`),
with channels that record what is sent and an injected call the test controls."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from recursa.kernel import relay as relay_module
from recursa.kernel.relay import MAX_IN_FLIGHT, Relay
from recursa.kernel.wire import JSONDict, Message
from recursa.protocol.wire import KERNEL_COMM_ID

WAIT = 5.0


class FakeChannels:
    """What the relay uses of :class:`Channels`: ``on_comm`` and ``send``."""

    def __init__(self) -> None:
        self.on_comm: Any = None
        self.sent: list[JSONDict] = []
        self.arrived = asyncio.Event()

    def send(
        self, msg_type: str, content: JSONDict, *, control: bool = False, block: bool = True
    ) -> str:
        assert (msg_type, control, content["comm_id"]) == ("comm_msg", True, KERNEL_COMM_ID)
        assert not block, "a reply must never wait on the kernel"
        self.sent.append(content["data"])
        self.arrived.set()
        return "m"

    def comm(self, data: object) -> None:
        self.on_comm(Message("comm_msg", None, {"comm_id": KERNEL_COMM_ID, "data": data}))

    async def reply(self) -> JSONDict:
        await asyncio.wait_for(self.arrived.wait(), WAIT)
        self.arrived.clear()
        return self.sent[-1]


class Gate:
    """An injected call that records its requests and answers when told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, object, object]] = []
        self.entered = asyncio.Event()
        self.cancelled = 0
        self.release = asyncio.Event()

    async def __call__(
        self, method: str, path: str, body: JSONDict | None, timeout: float | None
    ) -> tuple[int, Any]:
        self.calls.append((method, path, body, timeout))
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return 200, {"ok": path}


def request(request_id: str, path: str = "/kernel/rlm", **extra: object) -> JSONDict:
    return {"id": request_id, "method": "POST", "path": path, "body": {}, "timeout": 10, **extra}


@pytest.fixture
def channels() -> FakeChannels:
    return FakeChannels()


@pytest.fixture
async def relay(channels: FakeChannels) -> Any:
    relay = Relay()
    relay.attach(channels)
    yield relay
    await relay.aclose()


async def test_a_request_is_answered_on_control_with_its_id(
    relay: Relay, channels: FakeChannels
) -> None:
    gate = Gate()
    gate.release.set()
    relay.call = gate
    channels.comm(request("a1", body={"task": "t"}))
    assert await channels.reply() == {"id": "a1", "status": 200, "body": {"ok": "/kernel/rlm"}}
    assert gate.calls == [("POST", "/kernel/rlm", {"task": "t"}, 10.0)]


@pytest.mark.parametrize(
    "data",
    [None, "x", [1], {}, {"id": 7}, {"id": ""}, {"id": "x" * 65}, {"id": "c", "cancel": True}],
)
async def test_a_message_without_a_usable_id_is_ignored(
    relay: Relay, channels: FakeChannels, data: object
) -> None:
    relay.call = Gate()
    channels.comm(data)
    assert channels.sent == [] and relay.in_flight == 0


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"method": "TRACE"}, "method must be"),
        ({"path": "/sessions"}, "kernel route"),
        ({"path": "/kernel/a b"}, "kernel route"),
        ({"path": "/kernel/../sessions"}, ". or .."),
        ({"body": [1]}, "object or null"),
        ({"timeout": "soon"}, "number of seconds"),
        ({"timeout": True}, "number of seconds"),
        ({"timeout": -1}, "from 0"),
        ({"timeout": float("inf")}, "from 0"),
    ],
)
async def test_a_malformed_request_is_refused_in_one_line(
    relay: Relay, channels: FakeChannels, extra: JSONDict, fragment: str
) -> None:
    gate = Gate()
    relay.call = gate
    channels.comm(request("bad", **extra))
    reply = await channels.reply()
    assert (reply["id"], reply["status"], reply["body"]["error"]["kind"]) == ("bad", 400, "invalid")
    assert fragment in reply["body"]["error"]["message"]
    assert gate.calls == []


async def test_a_cancellation_ends_the_request_and_nothing_is_answered(
    relay: Relay, channels: FakeChannels
) -> None:
    gate = Gate()
    relay.call = gate
    channels.comm(request("w"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    channels.comm({"id": "w", "cancel": True})
    assert relay.in_flight == 0
    await asyncio.sleep(0)  # the task's cancellation runs
    assert gate.cancelled == 1 and channels.sent == []


async def test_a_duplicate_id_and_one_past_the_limit_are_refused(
    relay: Relay, channels: FakeChannels
) -> None:
    gate = Gate()
    relay.call = gate
    for n in range(MAX_IN_FLIGHT):
        channels.comm(request(f"r{n}"))
    channels.comm(request("r0"))
    assert "already in flight" in (await channels.reply())["body"]["error"]["message"]
    channels.comm(request("one-more"))
    reply = await channels.reply()
    assert reply["id"] == "one-more" and "too many" in reply["body"]["error"]["message"]
    gate.release.set()
    while relay.in_flight:
        await channels.reply()
    assert len(channels.sent) == MAX_IN_FLIGHT + 2


async def test_replies_to_a_replaced_process_are_dropped(
    relay: Relay, channels: FakeChannels
) -> None:
    gate = Gate()
    relay.call = gate
    channels.comm(request("old"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    fresh = FakeChannels()
    relay.attach(fresh)  # a restart: new channels
    assert channels.on_comm is None and relay.in_flight == 0
    await asyncio.sleep(0)
    assert gate.cancelled == 1
    assert channels.sent == [] and fresh.sent == []
    gate.release.set()
    fresh.comm(request("new"))
    assert (await fresh.reply())["id"] == "new"
    assert channels.sent == []


async def test_without_a_call_a_request_is_answered_unavailable(
    relay: Relay, channels: FakeChannels
) -> None:
    channels.comm(request("n"))
    reply = await channels.reply()
    assert reply["status"] == 503
    assert reply["body"]["error"]["message"] == "the recursa API is not served to this kernel"


async def test_a_failing_call_is_an_internal_error(relay: Relay, channels: FakeChannels) -> None:
    async def broken(*args: object) -> tuple[int, Any]:
        raise RuntimeError("bug")

    relay.call = broken
    channels.comm(request("f"))
    reply = await channels.reply()
    assert (reply["status"], reply["body"]["error"]["kind"]) == (500, "internal")


async def test_a_request_past_its_wait_and_grace_is_given_up_unanswered(
    relay: Relay, channels: FakeChannels, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay_module, "REPLY_GRACE", 0.0)
    gate = Gate()
    relay.call = gate
    channels.comm(request("slow", timeout=0))
    for _ in range(100):  # the timeout is due at once: a few loop turns
        if not relay.in_flight:
            break
        await asyncio.sleep(0)
    assert relay.in_flight == 0 and channels.sent == []


async def test_aclose_waits_for_requests_cancelled_before(
    relay: Relay, channels: FakeChannels
) -> None:
    gate = Gate()
    relay.call = gate
    channels.comm(request("a"))
    channels.comm(request("b"))
    await asyncio.wait_for(gate.entered.wait(), WAIT)
    relay.detach()  # cancelled, not yet ended
    await relay.aclose()
    assert gate.cancelled == 2

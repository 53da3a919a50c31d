"""The durable inbox and the daemon's ledgers (schema v2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.errors import NotFound
from recursa.protocol.events import UserInput
from recursa.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "recursa.db")
    yield s  # type: ignore[misc]
    s.close()


def session(store: Store) -> str:
    return store.create_session(model="faux/x", cwd="/", workspace="/").id


def test_messages_queue_in_order_and_are_delivered_once(store: Store) -> None:
    sid = session(store)
    first = store.inbox.enqueue(sid, "one")
    second = store.inbox.enqueue(sid, "two", source="parent", sender="s-parent", mode="follow_up")
    assert [m.text for m in store.inbox.pending(sid)] == ["one", "two"]
    assert first.id < second.id
    records = store.inbox.deliver(store.inbox.pending(sid))
    assert [r.event for r in records] == [
        UserInput(text="one"),
        UserInput(text="two", source="parent", sender="s-parent"),
    ]
    assert store.inbox.pending(sid) == []
    delivered = store.inbox.get(second.id)
    assert delivered is not None
    assert (delivered.status, delivered.delivered_seq) == ("delivered", records[1].seq)
    # Delivering again (a retry after a crash) appends nothing.
    assert store.inbox.deliver([first, second]) == []
    assert [r.event.type for r in store.events(sid)] == ["user_input", "user_input"]


def test_a_queued_message_survives_a_reopen(tmp_path: Path) -> None:
    with Store.open(tmp_path / "r.db") as s:
        sid = session(s)
        s.inbox.enqueue(sid, "wait for me", mode="steer")
    with Store.open(tmp_path / "r.db") as s:
        [message] = s.inbox.pending(sid)
        assert (message.text, message.mode) == ("wait for me", "steer")
        assert s.inbox.sessions_with_pending() == [sid]


def test_delivery_and_its_event_are_one_transaction(store: Store) -> None:
    sid = session(store)
    message = store.inbox.enqueue(sid, "atomic")

    class Boom(Exception):
        pass

    def deliver_then_fail() -> None:
        with store.transaction():
            store.inbox.deliver([message])
            raise Boom

    with pytest.raises(Boom):
        deliver_then_fail()
    assert [m.id for m in store.inbox.pending(sid)] == [message.id]
    assert store.events(sid) == []


def test_a_message_to_an_unknown_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.inbox.enqueue("s-nobody", "hello")


def test_dropping_a_sessions_queue(store: Store) -> None:
    sid, other = session(store), session(store)
    store.inbox.enqueue(sid, "a")
    store.inbox.enqueue(sid, "b")
    store.inbox.enqueue(other, "c")
    assert store.inbox.pending_counts() == {sid: 2, other: 1}
    assert store.inbox.drop(sid) == 2
    assert store.inbox.pending_count(sid) == 0
    assert store.inbox.pending_counts() == {other: 1}


def test_commands_are_idempotent_and_pending_ones_uncertain(store: Store) -> None:
    assert store.commands.begin("cli-1", "c-1", "send") is None
    again = store.commands.begin("cli-1", "c-1", "send")
    assert again is not None
    assert again.status == "pending"  # begun, never finished: uncertain
    store.commands.finish("cli-1", "c-1", {"message_id": 7})
    done = store.commands.begin("cli-1", "c-1", "send")
    assert done is not None
    assert (done.status, done.result) == ("done", {"message_id": 7})
    assert store.commands.begin("cli-2", "c-1", "send") is None  # another client's id space


def test_a_command_and_its_effect_commit_together(store: Store) -> None:
    sid = session(store)

    def begin_then_crash() -> None:
        with store.transaction():
            store.commands.begin("cli", "c", "send")
            store.inbox.enqueue(sid, "effect")
            raise RuntimeError("crash before finish")

    with pytest.raises(RuntimeError):
        begin_then_crash()
    assert store.commands.get("cli", "c") is None
    assert store.inbox.pending(sid) == []


def test_kernel_records(store: Store) -> None:
    sid = session(store)
    assert store.kernels.get(sid) is None
    store.kernels.record(sid, 123, "/run/k-1.json")
    store.kernels.record(sid, 456, "/run/k-2.json")
    row = store.kernels.get(sid)
    assert row is not None
    assert (row.pid, row.connection_file) == (456, "/run/k-2.json")
    assert [k.session_id for k in store.kernels.all()] == [sid]
    store.kernels.forget(sid)
    assert store.kernels.all() == []


def test_undecodable_text_in_a_message_is_kept_exactly(store: Store) -> None:
    sid = session(store)
    text = "caf\udce9 \ud800 ok"
    store.inbox.enqueue(sid, text)
    [message] = store.inbox.pending(sid)
    assert message.text == text
    [record] = store.inbox.deliver([message])
    assert record.event == UserInput(text=text)

"""The SQLite store on real files: sessions, the append-only log, usage, cell outputs,
permissions, and an append that survives kill -9."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from recursa.errors import NotFound, StoreError
from recursa.models.types import ToolCall, Usage
from recursa.protocol.events import (
    EVENT_TYPES,
    TRANSIENT_TYPES,
    CellFinished,
    Event,
    ModelUsage,
    Notice,
    ReadMessage,
    TextDelta,
    TurnEnded,
    TurnStarted,
    UserInput,
    event_from_dict,
    event_to_dict,
)
from recursa.store import (
    DB_FILE_NAME,
    SessionIds,
    SessionRow,
    Store,
    UsageTotals,
    new_session_id,
)


class FakeClock:
    """Advances one second per reading, so every stored time is distinct and known."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "nested" / DB_FILE_NAME


@pytest.fixture
def store(db_path: Path, clock: FakeClock) -> Iterator[Store]:
    with Store.open(db_path, clock=clock) as opened:
        yield opened


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _new(store: Store, **kwargs: Any) -> SessionRow:
    fields: dict[str, Any] = {"model": "faux/echo", "cwd": "/tmp", "workspace": "/tmp/ws"}
    fields.update(kwargs)
    return store.create_session(**fields)


# -- a sample of every event type, built from the grammar itself ----------------


def _sample_value(hint: Any, name: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        return args[-1]  # not always the first: a default is often the first
    if origin in (typing.Union, types.UnionType):
        return _sample_value(next(a for a in args if a is not type(None)), name)
    if origin is tuple and args and args[-1] is Ellipsis:
        return (_sample_value(args[0], name),)
    if hint is ToolCall:
        return ToolCall(id="call_1", name="python", arguments='{"code": "1+1"}')
    if hint is ReadMessage:
        return ReadMessage(id=1, sender="s-child", source="child", text="done: 42")
    samples: dict[Any, Any] = {str: f"{name} ✓", int: 7, float: 2.5, bool: True}
    if hint in samples:
        return samples[hint]
    raise AssertionError(f"add a sample for {hint!r} (field {name})")


def _sample(cls: type[Any]) -> Event:
    hints = typing.get_type_hints(cls)
    kwargs = {
        f.name: _sample_value(hints[f.name], f.name)
        for f in dataclasses.fields(cls)
        if f.name != "type"
    }
    return cast(Event, cls(**kwargs))


STORED_SAMPLES = [
    _sample(cls) for kind, cls in sorted(EVENT_TYPES.items()) if kind not in TRANSIENT_TYPES
]


# -- opening --------------------------------------------------------------------


def test_open_creates_private_dirs_and_file_in_wal_mode(tmp_path: Path, db_path: Path) -> None:
    before = tmp_path.stat().st_mode & 0o777
    with Store.open(db_path) as store:
        store.append(_new(store).id, UserInput(text="hi"))
        wal = db_path.with_name(db_path.name + "-wal")
        assert wal.stat().st_mode & 0o777 == 0o600
        assert store.path == db_path
    assert db_path.parent.stat().st_mode & 0o777 == 0o700
    assert db_path.parent.parent.stat().st_mode & 0o777 == 0o700
    assert tmp_path.stat().st_mode & 0o777 == before  # an existing directory is not ours to change
    assert db_path.stat().st_mode & 0o777 == 0o600
    conn = _raw(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_connection_pragmas(store: Store) -> None:
    conn = store._db()
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_private_file_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "open" / DB_FILE_NAME
        Store.open(path).close()
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_memory_store_has_the_schema(clock: FakeClock) -> None:
    with Store.memory(clock=clock) as store:
        sid = _new(store).id
        record = store.append(sid, UserInput(text="in memory"))
        assert store.events(sid) == [record]
        assert store.path is None


def test_closed_store_refuses_calls(db_path: Path) -> None:
    store = Store.open(db_path)
    with store:
        pass
    assert store.closed
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.last_seq()


# -- events -----------------------------------------------------------------------


ALL_SAMPLES = [_sample(cls) for _, cls in sorted(EVENT_TYPES.items())]


@pytest.mark.parametrize("event", ALL_SAMPLES, ids=lambda event: event.type)
def test_an_event_as_a_dict_is_what_asdict_gives_type_first(event: Event) -> None:
    expected = dataclasses.asdict(event)
    dumped = event_to_dict(event)
    assert dumped == expected
    assert list(dumped) == ["type", *(name for name in expected if name != "type")]
    for name, value in dumped.items():  # nested calls and messages are dicts, not shared objects
        assert type(value) is type(expected[name])
        if isinstance(value, tuple) and value:
            assert all(type(item) is dict for item in value)
    assert event_from_dict(dumped) == event


def test_every_stored_event_type_round_trips_in_seq_order(store: Store, db_path: Path) -> None:
    assert {e.type for e in STORED_SAMPLES} == set(EVENT_TYPES) - TRANSIENT_TYPES
    sid = _new(store).id
    records = [store.append(sid, event) for event in STORED_SAMPLES]
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    assert [r.ts for r in records] == sorted(r.ts for r in records)
    read = store.events(sid)
    assert [(r.seq, r.session_id, r.ts) for r in read] == [
        (r.seq, r.session_id, r.ts) for r in records
    ]
    assert [r.event for r in read] == STORED_SAMPLES
    store.close()
    with Store.open(db_path) as reopened:
        assert [r.event for r in reopened.events(sid)] == STORED_SAMPLES


@pytest.mark.parametrize("kind", sorted(TRANSIENT_TYPES))
def test_transient_events_are_refused_and_nothing_is_written(store: Store, kind: str) -> None:
    sid = _new(store).id
    with pytest.raises(ValueError, match="transient"):
        store.append(sid, _sample(EVENT_TYPES[kind]))
    with pytest.raises(ValueError, match="transient"):
        store.append_many(sid, [UserInput(text="a"), TextDelta(text="x")])
    assert store.events(sid) == []
    assert store.last_seq() == 0


def test_append_many_is_one_transaction(store: Store) -> None:
    sid = _new(store).id
    records = store.append_many(sid, [UserInput(text="a"), TurnStarted(turn=1)])
    assert [r.seq for r in records] == [1, 2]
    assert store.append_many(sid, []) == []
    # The second event cannot be encoded: the first must not be stored either.
    with pytest.raises(TypeError):
        store.append_many(sid, [UserInput(text="b"), Notice(text=cast(str, object()))])
    assert store.last_seq(sid) == 2
    assert [r.event for r in store.events(sid)] == [UserInput(text="a"), TurnStarted(turn=1)]


def test_append_to_unknown_session_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="no session 's-nope'"):
        store.append("s-nope", UserInput(text="x"))
    assert store.last_seq() == 0


def test_filters_after_limit_types(store: Store) -> None:
    a, b = _new(store).id, _new(store).id
    for i in range(5):
        store.append(a, UserInput(text=f"a{i}"))
        store.append(b, Notice(text=f"b{i}"))
        store.append(a, Notice(text=f"n{i}"))
    all_a = store.events(a)
    assert len(all_a) == 10
    assert all(r.session_id == a for r in all_a)
    assert store.events(a, after=all_a[3].seq) == all_a[4:]
    assert store.events(a, limit=3) == all_a[:3]
    assert store.events(a, after=all_a[3].seq, limit=2) == all_a[4:6]
    assert store.events(a, limit=0) == []
    inputs = store.events(a, types={"user_input"})
    assert [r.event for r in inputs] == [UserInput(text=f"a{i}") for i in range(5)]
    assert store.events(a, types=["user_input"], after=inputs[1].seq, limit=2) == inputs[2:4]
    assert store.events(a, types=()) == []
    assert store.events("s-unknown") == []
    with pytest.raises(ValueError, match="unknown event types: bogus"):
        store.events(a, types=["bogus"])
    with pytest.raises(ValueError, match="limit"):
        store.events(a, limit=-1)


def test_last_seq(store: Store) -> None:
    assert store.last_seq() == 0
    a, b = _new(store).id, _new(store).id
    assert store.last_seq(a) == 0
    ra = store.append(a, UserInput(text="a"))
    rb = store.append(b, UserInput(text="b"))
    assert store.last_seq(a) == ra.seq
    assert store.last_seq(b) == rb.seq
    assert store.last_seq() == rb.seq > ra.seq


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET data = '{}'",
        "DELETE FROM events",
        "INSERT OR REPLACE INTO events (seq, session_id, ts, type, data) "
        'SELECT seq, session_id, ts, \'notice\', \'{"type":"notice","text":"forged"}\' FROM events',
    ],
    ids=["update", "delete", "replace"],
)
def test_the_database_refuses_to_change_events(store: Store, db_path: Path, statement: str) -> None:
    sid = _new(store).id
    record = store.append(sid, UserInput(text="keep me"))
    conn = _raw(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    finally:
        conn.close()
    assert store.events(sid) == [record]
    assert store.events(sid)[0].event == UserInput(text="keep me")


def test_undecodable_rows_are_skipped_and_counted(
    store: Store, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid = _new(store).id
    first = store.append(sid, UserInput(text="before"))
    conn = _raw(db_path)
    try:
        for data in ('{"type":"from_the_future"}', "not json", "[1]", '{"type":"turn_started"}'):
            conn.execute(
                "INSERT INTO events (session_id, ts, type, data) VALUES (?, 0, 'x', ?)", (sid, data)
            )
    finally:
        conn.close()
    last = store.append(sid, UserInput(text="after"))
    with caplog.at_level(logging.WARNING, logger="recursa.store"):
        assert store.events(sid) == [first, last]
        # A page that holds only undecodable rows does not end the reading early.
        assert store.events(sid, after=first.seq, limit=1) == [last]
        paged = []
        cursor = 0
        while page := store.events(sid, after=cursor, limit=1):
            paged.extend(page)
            cursor = page[-1].seq
        assert paged == [first, last]
    assert store.skipped_events == 4
    assert len([r for r in caplog.records if "skipped event" in r.getMessage()]) == 4


# -- usage --------------------------------------------------------------------------


def test_model_usage_writes_its_usage_row(store: Store, db_path: Path) -> None:
    sid = _new(store).id
    usage = ModelUsage(
        model="openai/x", input_tokens=100, output_tokens=20, cached_tokens=40,
        cache_write_tokens=5, cost=None, latency=1.25,
    )  # fmt: skip
    record = store.append(sid, usage)
    store.append(sid, UserInput(text="no usage row for this"))
    conn = _raw(db_path)
    try:
        rows = conn.execute(
            "SELECT seq, session_id, model, input_tokens, output_tokens, cached_tokens,"
            " cache_write_tokens, cost, latency, ts FROM usage"
        ).fetchall()
    finally:
        conn.close()
    assert rows == [(record.seq, sid, "openai/x", 100, 20, 40, 5, None, 1.25, record.ts)]


def test_usage_totals_keep_unknown_cost_apart(store: Store) -> None:
    sid = _new(store).id
    assert store.usage_totals(sid) == UsageTotals()
    assert store.usage_totals(sid).cost_complete
    store.append(sid, ModelUsage(model="m", input_tokens=10, output_tokens=1, cost=0.25))
    store.append(
        sid, ModelUsage(model="m", input_tokens=20, output_tokens=2, cached_tokens=5, cost=0.5)
    )
    store.append(sid, ModelUsage(model="m", input_tokens=30, output_tokens=3, cache_write_tokens=7))
    totals = store.usage_totals(sid)
    assert totals == UsageTotals(
        calls=3, input_tokens=60, output_tokens=6, cached_tokens=5, cache_write_tokens=7,
        cost=0.75, unknown_cost_calls=1,
    )  # fmt: skip
    assert not totals.cost_complete
    assert totals.usage == Usage(60, 6, 5, 7)


def test_usage_totals_over_the_session_tree(store: Store) -> None:
    root = _new(store)
    child = _new(store, parent_id=root.id)
    grandchild = _new(store, parent_id=child.id)
    other = _new(store)
    for sid, tokens in ((root.id, 1), (child.id, 10), (grandchild.id, 100), (other.id, 1000)):
        store.append(
            sid, ModelUsage(model="m", input_tokens=tokens, output_tokens=0, cost=float(tokens))
        )
    assert store.usage_totals(root.id).input_tokens == 1
    tree = store.usage_totals(root.id, tree=True)
    assert (tree.calls, tree.input_tokens, tree.cost) == (3, 111, 111.0)
    assert store.usage_totals(child.id, tree=True).input_tokens == 110


# -- sessions -------------------------------------------------------------------------


def test_create_and_look_up_by_id_name_and_prefix(store: Store, clock: FakeClock) -> None:
    row = _new(store, name="researcher", meta={"goal": {"text": "x", "tags": [1, None]}})
    assert re.fullmatch(r"s-[0-9a-hjkmnp-tv-z]{14}", row.id)
    assert row.status == "admitted"
    assert row.created_at == row.updated_at == clock.now
    assert row.meta == {"goal": {"text": "x", "tags": [1, None]}}
    with pytest.raises(TypeError):
        row.meta["goal"] = 1  # type: ignore[index]
    other = _new(store)
    assert store.session(row.id) == row
    assert store.session("researcher") == row
    common = 0
    while row.id[common] == other.id[common]:
        common += 1
    assert store.session(row.id[: common + 1]) == row
    assert store.session(other.id[: common + 1]) == other
    with pytest.raises(NotFound, match="more than one session"):
        store.session(row.id[:common])


def test_unknown_session_is_not_found_in_one_line(store: Store) -> None:
    _new(store)
    for query in ("nobody", "s-zzzz", ""):
        with pytest.raises(NotFound) as info:
            store.session(query)
        assert "\n" not in str(info.value)
        assert isinstance(info.value, StoreError)


def test_names_are_unique_and_checked(store: Store) -> None:
    first = _new(store, name="alpha")
    _new(store)
    _new(store)  # any number of unnamed sessions
    with pytest.raises(StoreError, match="a session named 'alpha' already exists") as info:
        _new(store, name="alpha")
    assert not isinstance(info.value, NotFound)
    for bad in ("", "two words", "tab\there", "x" * 101):
        with pytest.raises(ValueError, match="session name"):
            _new(store, name=bad)
    assert store.sessions()[0].id == first.id


def test_parent_must_exist(store: Store) -> None:
    with pytest.raises(NotFound, match="no parent session 's-missing'"):
        _new(store, parent_id="s-missing")
    assert store.sessions() == []


def test_sessions_filters(store: Store) -> None:
    root = _new(store)
    kids = [_new(store, parent_id=root.id) for _ in range(2)]
    other_root = _new(store, status="idle")
    store.set_status(kids[1].id, "running")
    assert [s.id for s in store.sessions()] == [root.id, kids[0].id, kids[1].id, other_root.id]
    assert [s.id for s in store.sessions(parent_id=root.id)] == [k.id for k in kids]
    assert [s.id for s in store.sessions(roots=True)] == [root.id, other_root.id]
    assert [s.id for s in store.sessions(statuses={"running", "idle"})] == [
        kids[1].id,
        other_root.id,
    ]
    assert [s.id for s in store.sessions(parent_id=root.id, statuses=["admitted"])] == [kids[0].id]
    assert store.sessions(statuses=[]) == []
    with pytest.raises(ValueError, match="not both"):
        store.sessions(parent_id=root.id, roots=True)
    with pytest.raises(ValueError, match="unknown session status"):
        store.sessions(statuses=cast(Any, ["sleeping"]))


def test_set_status(store: Store, clock: FakeClock) -> None:
    row = _new(store)
    updated = store.set_status(row.id, "running")
    assert updated.status == "running"
    assert updated.updated_at == clock.now > row.updated_at
    assert updated.created_at == row.created_at
    assert store.session(row.id) == updated
    with pytest.raises(NotFound):
        store.set_status("s-missing", "idle")
    with pytest.raises(ValueError, match="unknown session status"):
        store.set_status(row.id, cast(Any, "sleeping"))


def test_update_session(store: Store) -> None:
    row = _new(store, name="old", meta={"a": 1})
    _new(store, name="taken")
    updated = store.update_session(row.id, model="anthropic/y", workspace="/ws/new")
    assert (updated.model, updated.workspace, updated.name, updated.meta) == (
        "anthropic/y", "/ws/new", "old", {"a": 1},
    )  # fmt: skip
    assert store.update_session(row.id, meta={"b": [2]}).meta == {"b": [2]}
    assert store.update_session(row.id, name="new").name == "new"
    assert store.session("new").id == row.id
    with pytest.raises(NotFound):
        store.session("old")
    assert store.update_session(row.id, name=None).name is None
    with pytest.raises(StoreError, match="'taken' already exists"):
        store.update_session(row.id, name="taken")
    with pytest.raises(NotFound):
        store.update_session("s-missing", model="m")


def test_session_ids_are_time_ordered_and_unique() -> None:
    ids = SessionIds()
    same_ms = [ids.new(5000.0) for _ in range(1000)]
    assert same_ms == sorted(same_ms)
    assert len(set(same_ms)) == 1000
    assert all(re.fullmatch(r"s-[0-9a-hjkmnp-tv-z]{14}", i) for i in same_ms)
    # A clock that steps back does not break the order.
    assert ids.new(1.0) > same_ms[-1]
    later = ids.new(10_000.0)
    assert later > same_ms[-1]
    assert later[:12] != same_ms[0][:12]  # the time is in the leading characters
    # Two sources at different times order by time, whatever their random parts.
    assert SessionIds().new(10_000.0) > SessionIds().new(9_999.999)
    assert new_session_id() != new_session_id()


# -- transactions and cell outputs --------------------------------------------------


def _append_then_fail(store: Store, sid: str, text: str) -> None:
    with store.transaction():
        store.append(sid, UserInput(text=text))
        raise RuntimeError(text)


def test_transaction_commits_together_and_nests(store: Store) -> None:
    sid = _new(store).id
    with pytest.raises(RuntimeError):
        _append_then_fail(store, sid, "lost")
    assert store.events(sid) == []
    with store.transaction():
        kept = store.append(sid, UserInput(text="kept"))
        with pytest.raises(RuntimeError):
            _append_then_fail(store, sid, "inner, rolled back")
        also = store.append(sid, UserInput(text="also kept"))
    assert store.events(sid) == [kept, also]
    assert not store._db().in_transaction


def test_cell_outputs(store: Store, db_path: Path) -> None:
    sid = _new(store).id
    assert store.cell_output(sid, 1) is None
    big = "é" * 1_000_000
    store.put_cell_output(sid, 1, "call_1", big)
    store.put_cell_output(sid, 2, "call_2", "two")
    assert store.cell_output(sid, 1) == big
    store.put_cell_output(sid, 2, "call_2b", "two, again")
    assert store.cell_output(sid, 2) == "two, again"
    assert store.cell_output("s-other", 1) is None
    with pytest.raises(NotFound):
        store.put_cell_output("s-missing", 1, "c", "x")
    conn = _raw(db_path)
    try:
        rows = conn.execute(
            "SELECT cell, call_id, chars FROM cell_outputs ORDER BY cell"
        ).fetchall()
    finally:
        conn.close()
    assert rows == [(1, "call_1", 1_000_000), (2, "call_2b", 10)]


# -- crash safety ---------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from recursa.protocol.events import CellFinished
    from recursa.store import Store

    store = Store.open(Path(sys.argv[1]))
    sid = store.create_session(model="m", cwd="/", workspace="/").id
    record = store.append(sid, CellFinished(cell=1, call_id="c", status="ok", output="42", chars=2))
    print(sid, record.seq, flush=True)
    sys.stdin.read()  # hold the store open until killed
    """
)


def test_a_committed_append_survives_kill_9(db_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        try:
            line = child.stdout.readline()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    sid, seq = line.split()
    # The commit lives only in the WAL: no checkpoint ran, no clean close happened.
    assert db_path.with_name(db_path.name + "-wal").stat().st_size > 0
    with Store.open(db_path) as store:
        records = store.events(sid)
    assert [r.seq for r in records] == [int(seq)]
    assert records[0].event == CellFinished(cell=1, call_id="c", status="ok", output="42", chars=2)


def test_the_feed_and_the_tail_read_past_undecodable_rows(store: Store, db_path: Path) -> None:
    sid, other = _new(store).id, _new(store).id
    first = store.append(sid, UserInput(text="before"))
    conn = _raw(db_path)
    try:
        for _ in range(3):
            conn.execute(
                "INSERT INTO events (session_id, ts, type, data) VALUES (?, 0, 'x', 'not json')",
                (sid,),
            )
    finally:
        conn.close()
    last = store.append(other, UserInput(text="after"))
    # A page of rows none of which decodes still moves the reader on.
    assert store.feed(after=first.seq, limit=2) == ([], first.seq + 2)
    assert store.feed(after=first.seq + 2, limit=10) == ([last], last.seq)
    assert store.feed(after=last.seq) == ([], last.seq)
    assert store.tail(sid, limit=10) == [first]
    assert store.tail(other, limit=1, before=last.seq) == []
    assert store.last_seq(sid, type="user_input") == first.seq
    assert store.last_seq() == last.seq


def test_last_answer_is_the_latest_turn_that_ended_with_one(store: Store, db_path: Path) -> None:
    sid = store.create_session(model="faux/m", cwd="/w", workspace="/w").id
    other = store.create_session(model="faux/m", cwd="/w", workspace="/w").id
    assert store.last_answer(sid) is None
    store.append(sid, TurnEnded(turn=1, reason="answered", answer="first"))
    store.append(other, TurnEnded(turn=1, reason="answered", answer="not this session's"))
    store.append(sid, TurnEnded(turn=2, reason="answered", answer='second, "quoted"\n'))
    store.append(sid, TurnEnded(turn=3, reason="interrupted"))  # no answer: the one before stays
    store.append(sid, UserInput(text="more"))
    conn = _raw(db_path)
    try:  # a garbled row of the same type is passed over
        conn.execute(
            "INSERT INTO events (session_id, ts, type, data) VALUES (?, 0, 'turn_ended', '{no')",
            (sid,),
        )
    finally:
        conn.close()
    assert store.last_answer(sid) == 'second, "quoted"\n'

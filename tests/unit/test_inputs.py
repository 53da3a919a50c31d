"""Long inputs as kernel variables (recursa.session.inputs): which inputs are
placed, their names, what the model reads about them, and the attachments
kept in the session's directory. The kernel side is in
tests/integration/test_long_inputs.py."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from recursa.errors import KernelError
from recursa.protocol.events import EventRecord, Notice, UserInput
from recursa.session.inputs import (
    EDGE_CHARS,
    Attachment,
    InputPlacer,
    Placement,
    has_stash,
    names,
    oversize,
    oversize_message,
    question_in,
    stash,
    stashed,
    with_files,
)
from recursa.store import MessageRow, Store


def test_an_input_is_oversize_past_its_share_of_the_window() -> None:
    assert not oversize("x" * 6_000, 4_000, 0.5)  # 2,000 tokens (three characters each)
    assert oversize("x" * 6_003, 4_000, 0.5)
    assert not oversize("x" * 10**6, None, 0.5)  # no known window: never
    assert not oversize("x" * 10**6, 4_000, 0.0)  # share 0: never


def test_names_never_reuse_an_earlier_variable() -> None:
    assert names(1, 0) == ["context"]
    assert names(2, 0) == ["context_1", "context_2"]
    assert names(1, 1) == ["context_2"]
    assert names(2, 3) == ["context_4", "context_5"]


def test_the_oversize_message_is_short_and_shows_only_head_and_tail() -> None:
    text = "HEAD " + "m" * 100_000 + " middle-secret " + "n" * 100_000 + " Which number?"
    message = oversize_message(Placement("context", "oversize", "", text))
    assert len(message) < 2 * EDGE_CHARS + 1000
    assert "`context`" in message and f"{len(text):,} characters" in message
    assert "HEAD" in message and "Which number?" in message
    assert "middle-secret" not in message
    assert "the question included" in message


def test_a_short_file_is_shown_whole_and_the_task_comes_first() -> None:
    files = [
        Placement("context_1", "file", "a.txt", "line one\nline two\n"),
        Placement("context_2", "file", "b.txt", "x" * 5_000),
    ]
    message = with_files("Count the lines.", files)
    assert message.startswith("Count the lines.\n\n")
    assert 'It reads: "line one\\nline two\\n"' in message  # line breaks stay visible
    assert "a.txt is in your kernel as the Python variable `context_1`" in message
    assert "b.txt is in your kernel as the Python variable `context_2`" in message
    assert "x" * (EDGE_CHARS + 1) not in message


def row(message_id: int, created_at: float = 1.0) -> MessageRow:
    return MessageRow(
        message_id, "s", None, "user", "auto", "task", "queued", created_at, None, None
    )


def test_attachments_are_kept_exactly_by_message(tmp_path: Path) -> None:
    odd = "caf\u00e9 \udcff \U0001f600"  # a lone surrogate (an undecodable byte) survives
    stash(tmp_path, row(7), [Attachment("a.txt", odd), Attachment("b.txt", "")])
    assert stashed(tmp_path, row(7)) == (Attachment("a.txt", odd), Attachment("b.txt", ""))
    assert has_stash(tmp_path, 7) and not has_stash(tmp_path, 8)
    assert stashed(tmp_path, row(8)) == ()
    stash(tmp_path, row(9), [])  # nothing to keep: no file
    assert not has_stash(tmp_path, 9)
    assert [p.name for p in (tmp_path / "inputs").iterdir()] == ["7.json"]
    # Message 7 rolled back and its id given to another message: not its files.
    assert stashed(tmp_path, row(7, created_at=2.0)) == ()


# ------------------------------------------------------------ delivering (a real store)


def placer_for(
    store: Store, session_id: str, workspace: Path, placed: dict[str, str], fail: bool = False
) -> InputPlacer:
    async def place(values: Mapping[str, str]) -> None:
        if fail:
            raise KernelError("the kernel did not start")
        placed.update(values)

    return InputPlacer(session_id, workspace, store, place, window=4_000, share=0.5)


async def test_delivery_places_long_inputs_and_keeps_the_order(tmp_path: Path) -> None:
    with Store.open(tmp_path / "r.db") as store:
        sid = store.create_session(model="faux/x", cwd="/", workspace=str(tmp_path)).id
        store.inbox.enqueue(sid, "short one")
        long = store.inbox.enqueue(sid, "y" * 30_000)
        with_file = store.inbox.enqueue(sid, "the task")
        stash(tmp_path, with_file, [Attachment("f.txt", "file text")])
        placed: dict[str, str] = {}
        published: list[EventRecord] = []
        placer = placer_for(store, sid, tmp_path, placed)
        assert placer.places(long) and placer.places(with_file)
        await placer.deliver(store.inbox.pending(sid), published.append)
        assert placed == {"context": "y" * 30_000, "context_2": "file text"}
        events = [r.event for r in published]
        assert [type(e).__name__ for e in events] == [
            "UserInput",
            "InputPlaced",
            "UserInput",
            "InputPlaced",
            "UserInput",
        ]
        texts = [e.text for e in events if isinstance(e, UserInput)]
        assert texts[0] == "short one" and "`context`" in texts[1]
        assert texts[2].startswith("the task\n\nThe file f.txt")
        assert [r.seq for r in published] == [r.seq for r in store.events(sid)]
        assert store.inbox.pending(sid) == []
        # A new placer (the session loaded again) numbers on from the log.
        assert placer_for(store, sid, tmp_path, {}).used == 2


async def test_an_input_the_kernel_cannot_take_is_given_as_it_is(tmp_path: Path) -> None:
    with Store.open(tmp_path / "r.db") as store:
        sid = store.create_session(model="faux/x", cwd="/", workspace=str(tmp_path)).id
        store.inbox.enqueue(sid, "z" * 30_000)
        task = store.inbox.enqueue(sid, "the task")
        stash(tmp_path, task, [Attachment("f.txt", "file text")])
        published: list[EventRecord] = []
        await placer_for(store, sid, tmp_path, {}, fail=True).deliver(
            store.inbox.pending(sid), published.append
        )
        notice, given, file_notice, file_task = (r.event for r in published)
        assert isinstance(notice, Notice) and "the kernel did not start" in notice.text
        assert isinstance(given, UserInput) and given.text == "z" * 30_000
        assert isinstance(file_notice, Notice) and "the files f.txt" in file_notice.text
        assert isinstance(file_task, UserInput)
        assert (
            file_task.text == "the task\n\n(Not available: f.txt; the kernel could not take them.)"
        )
        assert store.inbox.pending(sid) == []


def test_a_question_gets_a_ready_search_cell_and_other_tasks_a_hint() -> None:
    files = [Placement("context", "file", "doc.txt", "y" * 5_000)]
    asked = with_files("Essays follow. What is the magic number for amber-apple?", files)
    assert 'search(context, "What is the magic number for amber-apple?")' in asked
    told = with_files("Count the lines.", files)
    assert "search(context, 'a few words')" in told and "Count the lines.)" not in told


def test_the_question_of_an_oversize_input_is_found_at_its_end() -> None:
    text = "Is this it? " + "filler. " * 5_000 + "What is the special magic number for x-y?\n"
    assert question_in(text) == "What is the special magic number for x-y?"
    assert question_in("no question at all. " * 100) is None
    message = oversize_message(Placement("context", "oversize", "", text))
    assert 'search(context, "What is the special magic number for x-y?")' in message

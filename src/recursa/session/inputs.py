"""Long inputs become kernel variables, as in the RLM paper.

An input the model's window cannot take whole is not refused: its text is
put in the session's kernel as a ``str`` variable, ``context`` (or
``context_1``, ``context_2``, ... when there are several), and the model's
message describes it instead: the name, the size, a short head and tail, and
how to read it with code. Files given on purpose (``recursa run
--context-file``) are placed the same way beside the task, which stays the
model's message.

Which inputs are placed:

- **oversize**: a message whose estimated tokens pass ``share`` of the
  model's context window (``[sessions] inline_input_share``). Its question
  cannot be told apart from its material, so the whole text goes in the
  variable, and the message says so plainly.
- **file**: every attachment stashed with the message (:func:`stash`).

It happens as inputs are delivered, before the turn's first model call
(:meth:`InputPlacer.deliver`): the kernel is got, each text is set silently
(as a payload, never as a cell's source) and the namespace is snapshotted,
so the variable survives a lost kernel and an unload. Then, in one
transaction, an ``input_placed`` event per variable and the ``user_input``
with the description are appended. The text is kept once: an oversize input
in its inbox message, a file's in the session's directory (:func:`stash`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from recursa.errors import KernelError
from recursa.protocol.events import EventRecord, InputOrigin, InputPlaced, Notice
from recursa.session.compaction import CHARS_PER_TOKEN
from recursa.store import MessageRow, Store

INPUTS_DIR = "inputs"
"""Under a session's directory: the attachments of its messages, one file each."""
VARIABLE = "context"
"""The variable's name (numbered when there are several)."""
EDGE_CHARS = 200
"""Characters of the head and of the tail shown to the model."""
SHOWN_CHARS_PER_TOKEN = 4
"""For the "about N tokens" the model reads (the decision uses the higher estimate)."""


@dataclass(frozen=True, slots=True)
class Attachment:
    """A text given with a message to be placed in the kernel; ``label`` names
    it for the model (a file's name)."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class Placement:
    """One text to put in the kernel as ``name``."""

    name: str
    origin: InputOrigin
    label: str
    text: str

    def event(self) -> InputPlaced:
        return InputPlaced(
            name=self.name,
            origin=self.origin,
            chars=len(self.text),
            lines=line_count(self.text),
            label=self.label,
        )


# ---------------------------------------------------------------- attachments


def stash(workspace: Path, message: MessageRow, attachments: Sequence[Attachment]) -> None:
    """Keep ``attachments`` of ``message`` in the session's directory until they
    are placed (and after, as the record of their text). Written atomically:
    call it inside the transaction that stores the message, so a failure here
    stores neither. Raises OSError."""
    if not attachments:
        return
    folder = workspace / INPUTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{message.id}.json"
    partial = folder / f".{message.id}.json.partial"
    data = {
        "created_at": message.created_at,
        "attachments": [{"label": a.label, "text": a.text} for a in attachments],
    }
    # ensure_ascii: a lone surrogate (an undecodable byte) survives as an escape.
    partial.write_text(json.dumps(data), encoding="ascii")
    os.replace(partial, target)


def stashed(workspace: Path, message: MessageRow) -> tuple[Attachment, ...]:
    """The attachments :func:`stash` kept for ``message`` (none if it kept none).
    A file left by a message whose transaction was rolled back, and whose id
    a later message got, is told apart by its time and ignored."""
    path = workspace / INPUTS_DIR / f"{message.id}.json"
    try:
        data = json.loads(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        return ()
    if data.get("created_at") != message.created_at:
        return ()
    return tuple(Attachment(str(a["label"]), str(a["text"])) for a in data["attachments"])


def has_stash(workspace: Path, message_id: int) -> bool:
    """:func:`stash` may have kept attachments for message ``message_id`` (cheap:
    :func:`stashed` reads them, and tells a stale file apart)."""
    return (workspace / INPUTS_DIR / f"{message_id}.json").exists()


# ---------------------------------------------------------------- deciding


def line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def oversize(text: str, window: int | None, share: float) -> bool:
    """``text`` would take more than ``share`` of ``window`` tokens (estimated
    high, as compaction does). No window or no share: never."""
    if window is None or share <= 0:
        return False
    return len(text) // CHARS_PER_TOKEN > share * window


def names(count: int, used: int) -> list[str]:
    """Names for ``count`` new variables when ``used`` were placed before in the
    session: ``context`` for the first single one, else numbered on from ``used``
    (a later input never replaces an earlier one)."""
    if count == 1 and used == 0:
        return [VARIABLE]
    return [f"{VARIABLE}_{used + i + 1}" for i in range(count)]


# ---------------------------------------------------------------- describing


def _edge(text: str) -> str:
    """A piece of text on one line, quoted, with its line breaks shown as ``\\n``."""
    return json.dumps(text, ensure_ascii=False)


def size_of(text: str) -> str:
    return (
        f"{len(text):,} characters, about {len(text) // SHOWN_CHARS_PER_TOKEN:,} tokens, "
        f"{line_count(text):,} lines"
    )


def edges(text: str) -> list[str]:
    """The text if it is short, else its head and its tail."""
    if len(text) <= 2 * EDGE_CHARS:
        return [f"It reads: {_edge(text)}"]
    return [f"It starts: {_edge(text[:EDGE_CHARS])}", f"It ends: {_edge(text[-EDGE_CHARS:])}"]


QUESTION_CHARS = 300
"""The longest question :func:`first_cell` puts in the search it suggests."""
_QUESTION = re.compile(r"[^.!?\n]*\?")


def question_in(text: str) -> str | None:
    """The last question (a sentence ending in ``?``) near the end of ``text``,
    where a pasted prompt (RULER's, most people's) puts it; None if none."""
    found = _QUESTION.findall(text[-2 * QUESTION_CHARS :])
    question = " ".join(found[-1].split()) if found else ""
    return question if 0 < len(question) <= QUESTION_CHARS else None


def how_to_read(name: str, question: str | None) -> str:
    """How to read a long text with code, in words a small model follows: for
    a question, a first cell ready to run. The hints answer what went wrong
    without them: the text's start read and taken for all of it, a whole
    phrase that did not match, a ``find()`` position taken for the answer, a
    printed text whose middle was cut from the output (``search``,
    :func:`recursa.api.text.search`, answers the middle two)."""
    lines = [f"Do not print {name} whole: the output is cut."]
    if question is not None:
        lines += [
            "To find what the question asks, start with this cell, which prints the passages "
            "holding most of its words, with the text around them:",
            f"search({name}, {json.dumps(question, ensure_ascii=False)})",
            "Then read the answer from what it prints (search again with other words if it "
            f"is not there; {name}[i:i + 4000] gives pieces to loop over).",
        ]
    else:
        lines.append(
            f"search({name}, 'a few words') prints the passages holding most of those words, "
            f"with the text around them; {name}[i:i + 4000] gives pieces to loop over."
        )
    return "\n".join(lines)


def oversize_message(placement: Placement) -> str:
    """The message that stands for an input too long for the window."""
    text = placement.text
    lines = [
        f"Your message is too long to show here ({size_of(text)}), so all of it, the "
        f"question included, is in your kernel as the Python variable `{placement.name}` (a str).",
        *edges(text),
        how_to_read(placement.name, question_in(text)),
    ]
    return "\n".join(lines)


def describe(placement: Placement) -> str:
    """What the model reads about one file placed beside its task."""
    text = placement.text
    where = f"the Python variable `{placement.name}` (a str, {size_of(text)})"
    return "\n".join([f"The file {placement.label} is in your kernel as {where}.", *edges(text)])


def with_files(task: str, placements: Sequence[Placement]) -> str:
    """The task, then the description of each file placed beside it."""
    parts = [task.rstrip(), ""] if task.strip() else []
    parts += [describe(p) for p in placements]
    parts.append(how_to_read(placements[0].name, question_in(task)))
    return "\n".join(parts)


# ---------------------------------------------------------------- delivering


Publish = Callable[[EventRecord], None]


class InputPlacer:
    """Delivers a session's inbox messages, placing long inputs in its kernel
    first; see the module docstring. ``place`` puts texts in the kernel
    (got if need be) and snapshots it; it raises :class:`KernelError`."""

    def __init__(
        self,
        session_id: str,
        workspace: Path,
        store: Store,
        place: Callable[[Mapping[str, str]], Awaitable[None]],
        *,
        window: int | None,
        share: float,
    ) -> None:
        self.session_id = session_id
        self.workspace = workspace
        self.store = store
        self.place = place
        self.window = window
        self.share = share
        self._used: int | None = None

    def plan(self, message: MessageRow) -> tuple[list[Placement], str]:
        """What to place for ``message``, and the text the model gets instead."""
        files = stashed(self.workspace, message)
        if files:
            given = names(len(files), self.used)
            placements = [
                Placement(name, "file", a.label, a.text)
                for name, a in zip(given, files, strict=True)
            ]
            return placements, with_files(message.text, placements)
        if oversize(message.text, self.window, self.share):
            placement = Placement(names(1, self.used)[0], "oversize", "", message.text)
            return [placement], oversize_message(placement)
        return [], message.text

    def places(self, message: MessageRow) -> bool:
        """``message`` has something to put in the kernel (so it must wait for
        :meth:`deliver`, never be delivered as a steer between cells)."""
        return has_stash(self.workspace, message.id) or oversize(
            message.text, self.window, self.share
        )

    @property
    def used(self) -> int:
        """Variables placed in this session so far (counted from its log once)."""
        if self._used is None:
            self._used = sum(
                1 for r in self.store.events(self.session_id) if isinstance(r.event, InputPlaced)
            )
        return self._used

    async def deliver(self, pending: Sequence[MessageRow], publish: Publish) -> None:
        """Deliver ``pending`` in order, each ``user_input`` (and ``input_placed``)
        published as it is appended. An input that cannot be placed (the kernel
        fails) is delivered as it is, with a warning: nothing is lost."""
        plain: list[MessageRow] = []
        for message in pending:
            placements, text = self.plan(message)
            if not placements:
                plain.append(message)
                continue
            self._flush(plain, publish)
            plain = []
            try:
                await self.place({p.name: p.text for p in placements})
            except KernelError as exc:
                files = [p.label for p in placements if p.origin == "file"]
                what = f"the files {', '.join(files)}" if files else "the input"
                warning = (
                    f"could not put {what} in the kernel ({exc}); the message is given as it is"
                )
                publish(self.store.append(self.session_id, Notice(level="warning", text=warning)))
                if files:  # the model must know what it was meant to have
                    note = f"(Not available: {', '.join(files)}; the kernel could not take them.)"
                    message = replace(message, text=f"{message.text.rstrip()}\n\n{note}")
                self._flush([message], publish)
                continue
            try:
                with self.store.transaction():
                    records = [self.store.append(self.session_id, p.event()) for p in placements]
                    delivered = self.store.inbox.deliver([replace(message, text=text)])
                    if not delivered:
                        raise _Taken
            except _Taken:  # a cell took it meanwhile: the variables stay, unannounced
                continue
            self._used = self.used + len(placements)
            for record in (*records, *delivered):
                publish(record)
        self._flush(plain, publish)

    def _flush(self, messages: Sequence[MessageRow], publish: Publish) -> None:
        if messages:
            for record in self.store.inbox.deliver(messages):
                publish(record)


class _Taken(Exception):
    """A message was delivered by someone else between planning and delivery."""


__all__ = [
    "EDGE_CHARS",
    "INPUTS_DIR",
    "VARIABLE",
    "Attachment",
    "InputPlacer",
    "Placement",
    "describe",
    "has_stash",
    "how_to_read",
    "names",
    "oversize",
    "oversize_message",
    "question_in",
    "stash",
    "stashed",
    "with_files",
]

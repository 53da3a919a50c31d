"""``harness`` and ``refine``: the Continual Harness, from inside a kernel.

What a session learns is kept outside the model as typed entries: prompt
notes, memories, skills and sub-agent specs. ``harness.create/update/delete/
rollback`` stage an edit for the caller's next turn boundary (the daemon
derives the caller from the kernel's token); the read calls see only what the
caller may see: global entries and its own local ones.

Arguments are checked here, before any request: an unknown keyword is
Python's TypeError, a bad value a TypeError or ValueError. What an edit means
(a skill's code must define its name, an update must change something) is
the daemon's to judge, and comes back as a one-line UsageError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from recursa.api import client
from recursa.api.client import text_arg as _text

if TYPE_CHECKING:
    from recursa.protocol.wire import EditOp

KINDS = ("prompt_note", "memory", "skill", "subagent_spec")
SCOPES = ("local", "global")
STATUSES = ("proposed", "active", "rejected", "rolled_back", "deleted")

Entry = dict[str, object]
"""One version of an entry: id, version, kind, title, scope, status, content,
code, meta, reason, effect, review, created_at, session_id, action, actor,
source_events, refinement_id."""
Entries = list[Entry]


class HarnessApi:
    """What you learn, kept for your later turns (and, when global, for later sessions).

    Kinds: ``"prompt_note"`` (how to behave), ``"memory"`` (a fact),
    ``"skill"`` (Python: ``code`` must define a function named ``title``; it is
    bound in your kernel from the next turn on, and indexed in your prompt),
    ``"subagent_spec"`` (a role for ``rlm(task, spec=TITLE)``: instructions in
    ``content``; ``meta`` may hold ``model``, ``budget``, ``description``).
    Scope ``"local"`` (this session and its sub-agents) or ``"global"`` (every
    later session; it passes a review first and stays ``"proposed"`` until then).

    Edits are staged and applied when this turn ends; each returns a receipt
    ``{"entry_id", "op", "staged", "applies"}``. ``entry`` is an id, an id
    prefix or a title. Every edit writes a new version; nothing is erased.

    ``await harness.create(kind, title, content="", *, scope="local", code=None, meta=None,
    reason="", effect="")``
    ``await harness.update(entry, *, title=None, content=None, code=None, scope=None,
    meta=None, reason="", effect="")``
    ``await harness.delete(entry, *, reason="")``
    ``await harness.rollback(entry, to_version, *, reason="")``   (0: before it existed)
    ``await harness.get(entry)``           its newest version, a dict
    ``await harness.list(kind=None, scope=None, status=None)``    newest versions, dicts
    ``await harness.history(entry)``       every version, oldest first
    ``await harness.diff(entry, from_version=None, to_version=None)``   a unified diff (str)

    ``reason``: why (what happened that calls for it); ``effect``: what it should change.
    """

    async def create(
        self,
        kind: str,
        title: str,
        content: str = "",
        *,
        scope: str = "local",
        code: str | None = None,
        meta: Mapping[str, object] | None = None,
        reason: str = "",
        effect: str = "",
    ) -> Entry:
        """Stage a new entry; the receipt carries its id (usable at once)."""
        __tracebackhide__ = True
        body = {
            "kind": _choice(kind, "kind", KINDS),
            "title": _str(_text(title, "title"), "title"),
            "content": _str(content, "content"),
            "scope": _choice(scope, "scope", SCOPES),
            **_shared_fields(code, meta, reason, effect),
        }
        return await _edit("create", None, body, "harness.create()")

    async def update(
        self,
        entry: str,
        *,
        title: str | None = None,
        content: str | None = None,
        code: str | None = None,
        scope: str | None = None,
        meta: Mapping[str, object] | None = None,
        reason: str = "",
        effect: str = "",
    ) -> Entry:
        """Stage a new version of ``entry`` with the fields given (the others stay)."""
        __tracebackhide__ = True
        body = {
            "title": None if title is None else _str(_text(title, "title"), "title"),
            "content": _optional_str(content, "content"),
            "scope": None if scope is None else _choice(scope, "scope", SCOPES),
            **_shared_fields(code, meta, reason, effect),
        }
        return await _edit("update", entry, body, "harness.update()")

    async def delete(self, entry: str, *, reason: str = "") -> Entry:
        """Stage the deletion of ``entry`` (its history stays; rollback brings it back)."""
        __tracebackhide__ = True
        return await _edit("delete", entry, {"reason": _str(reason, "reason")}, "harness.delete()")

    async def rollback(self, entry: str, to_version: int, *, reason: str = "") -> Entry:
        """Stage a new version of ``entry`` equal to ``to_version`` (0: before it existed)."""
        __tracebackhide__ = True
        if isinstance(to_version, bool) or not isinstance(to_version, int):
            raise TypeError(f"to_version must be an int, not {type(to_version).__name__}")
        if to_version < 0:
            raise ValueError(f"to_version must be 0 or more, not {to_version}")
        body = {"to_version": to_version, "reason": _str(reason, "reason")}
        return await _edit("rollback", entry, body, "harness.rollback()")

    async def get(self, entry: str) -> Entry:
        """The newest version of ``entry`` (NotFound if you cannot see it)."""
        __tracebackhide__ = True
        what = "harness.get()"
        data = await client.run("visible_entry", {"entry": _ref(entry)}, what=what)
        return _entry(data, what)

    async def list(
        self, kind: str | None = None, scope: str | None = None, status: str | None = None
    ) -> Entries:
        """The newest version of every entry you can see, oldest entry first,
        filtered by ``kind``, ``scope`` and ``status`` when given."""
        __tracebackhide__ = True
        what = "harness.list()"
        params = {
            "kind": None if kind is None else _choice(kind, "kind", KINDS),
            "scope": None if scope is None else _choice(scope, "scope", SCOPES),
            "status": None if status is None else _choice(status, "status", STATUSES),
        }
        data = await client.run("visible_entries", params, what=what)
        return _entries(data, what)

    async def history(self, entry: str) -> Entries:
        """Every version of ``entry``, oldest first."""
        __tracebackhide__ = True
        what = "harness.history()"
        data = await client.run("visible_history", {"entry": _ref(entry)}, what=what)
        return _entries(data, what)

    async def diff(
        self, entry: str, from_version: int | None = None, to_version: int | None = None
    ) -> str:
        """A unified diff between two versions of ``entry`` (default: the newest and
        the one before it)."""
        __tracebackhide__ = True
        what = "harness.diff()"
        params = {
            "entry": _ref(entry),
            "from_version": _optional_version(from_version, "from_version"),
            "to_version": _optional_version(to_version, "to_version"),
        }
        data = await client.run("visible_diff", params, what=what)
        text = data.get("diff") if isinstance(data, dict) else None
        if not isinstance(text, str):
            raise client.malformed(what)
        return text

    def __repr__(self) -> str:
        return (
            "<harness: await harness.create(kind, title, content, scope='local', code=None), "
            ".update(entry, ...), .delete(entry), .rollback(entry, to_version), .get(entry), "
            ".list(kind=None, scope=None, status=None), .history(entry), .diff(entry); "
            "help(harness)>"
        )


class Refiner:
    """Refinement: a separate model call reads this session's recent events and
    proposes harness edits (notes, memories, skills, specs). Valid proposals
    are staged like your own edits and applied when this turn ends.

    ``await refine.run(instructions=None)``
        ``instructions``: what to look for (optional). Returns
        ``{"refinement_id", "staged": [entry ids], "problems": [proposals skipped, why]}``.
    """

    async def run(self, instructions: str | None = None) -> dict[str, object]:
        """Refine from this session's recent events; the outcome (see ``help(refine)``)."""
        __tracebackhide__ = True
        from recursa.protocol.wire import RefineReply, to_json

        what = "refine.run()"
        body = {"instructions": _optional_str(instructions, "instructions")}
        data = await client.run("refine_caller", body, what=what)
        reply = client.decode(RefineReply, data, what)
        out = to_json(reply)
        return {**out, "staged": list(reply.staged), "problems": list(reply.problems)}

    def __repr__(self) -> str:
        return "<refine: await refine.run(instructions=None); help(refine)>"


async def _edit(op: EditOp, entry: str | None, body: Mapping[str, object], what: str) -> Entry:
    __tracebackhide__ = True
    from recursa.protocol.wire import HarnessReceipt, to_json

    request = {"op": op, "entry": None if entry is None else _ref(entry), **body}
    data = await client.run("stage_edit", request, what=what)
    return to_json(client.decode(HarnessReceipt, data, what))


def _entry(data: object, what: str) -> Entry:
    from recursa.protocol.wire import HarnessEntry

    client.decode(HarnessEntry, data, what)  # checked; the JSON itself is returned
    assert isinstance(data, dict)
    return data


def _entries(data: object, what: str) -> Entries:
    if not isinstance(data, list):
        raise client.malformed(what)
    return [_entry(item, what) for item in data]


def _ref(entry: object) -> str:
    if not isinstance(entry, str):
        raise TypeError(
            f"entry must be an id, id prefix or title (a str), not {type(entry).__name__}"
        )
    if not entry.strip():
        raise ValueError("entry is empty")
    return entry


def _str(value: object, name: str) -> str:
    """``value`` if it is a str that is valid text (the daemon checks it
    again, and refuses control characters too; this says it before sending)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} has a lone surrogate {value[exc.start]!r} at character {exc.start},"
            " which is not valid text; send it as proper Unicode"
        ) from None
    return value


def _optional_str(value: object, name: str) -> str | None:
    return None if value is None else _str(value, name)


def _choice(value: object, name: str, allowed: tuple[str, ...]) -> str:
    text = _str(value, name)
    if text not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return text


def _shared_fields(
    code: str | None, meta: Mapping[str, object] | None, reason: str, effect: str
) -> dict[str, object]:
    """The checked fields that ``create`` and ``update`` both send."""
    return {
        "code": _optional_str(code, "code"),
        "meta": _meta(meta),
        "reason": _str(reason, "reason"),
        "effect": _str(effect, "effect"),
    }


def _meta(meta: object) -> dict[str, object] | None:
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a dict, not {type(meta).__name__}")
    if not all(isinstance(key, str) for key in meta):
        raise TypeError("meta's keys must be str")
    for key, value in meta.items():
        _str(key, "meta")
        if isinstance(value, str):
            _str(value, f"meta[{key!r}]")
    return dict(meta)


def _optional_version(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, not {value}")
    return value


harness = HarnessApi()
refine = Refiner()

__all__ = ["KINDS", "SCOPES", "STATUSES", "HarnessApi", "Refiner", "harness", "refine"]

"""Harness entries as values: the four kinds, their versions, and the checks an
edit passes before it is staged.

An entry is what an agent learned, kept outside the model: a ``prompt_note``
(how to behave), a ``memory`` (a fact), a ``skill`` (Python with a call
contract: a callable named after the entry) or a ``subagent_spec`` (a role
for ``rlm(spec=...)``: instructions, and optionally a model and a budget).

Every change is a new :class:`EntryVersion`; nothing is edited in place.
The entry's state is its newest version. Status:

- ``proposed``: waiting for review (global scope only);
- ``active``: applies (to its session when ``local``, to every later
  session when ``global``);
- ``rejected``: the review said no; the reasons are in ``review``;
- ``rolled_back``: rolled back to before it existed, so it applies nowhere;
- ``deleted``: deleted; its history stays.

Pure: no I/O. The store keeps versions (:mod:`recursa.store.harness`), the
runtime applies edits (:mod:`recursa.harness.service`).
"""

from __future__ import annotations

import ast
import json
import keyword
import re

from recursa.errors import UsageError
from recursa.protocol.harness import (
    KINDS,
    SCOPES,
    SPEC_FIELDS,
    Edit,
    EntryVersion,
    Kind,
    Scope,
)

MAX_TITLE_CHARS = 80
MAX_CONTENT_CHARS = 20_000
MAX_CODE_CHARS = 50_000
MAX_REASON_CHARS = 2_000
MAX_META_CHARS = 10_000


# -- checks -------------------------------------------------------------------------


def check_kind(kind: object) -> Kind:
    if kind not in KINDS:
        raise UsageError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return kind


def check_scope(scope: object) -> Scope:
    if scope not in SCOPES:
        raise UsageError(f"scope must be 'local' or 'global', not {scope!r}")
    return scope


def check_title(kind: Kind, title: object) -> str:
    if not isinstance(title, str) or not title.strip():
        raise UsageError("title must be a non-empty string")
    title = title.strip()
    if len(title) > MAX_TITLE_CHARS:
        raise UsageError(f"title is {len(title)} characters; the limit is {MAX_TITLE_CHARS}")
    check_text("title", title, MAX_TITLE_CHARS)
    if kind in ("skill", "subagent_spec") and not is_name(title):
        raise UsageError(
            f"a {kind}'s title is the name it is called by: a Python identifier, not {title!r}"
        )
    return title


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters no entry needs (tab, newline and carriage return are fine)."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_text(name: str, value: object, limit: int) -> str:
    """``value`` if it is a string within ``limit`` characters that the store
    can keep as UTF-8 text: no lone surrogate, no NUL or other control
    character but tab, newline and carriage return."""
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string")
    if len(value) > limit:
        raise UsageError(f"{name} is {len(value):,} characters; the limit is {limit:,}")
    bad = _SURROGATE.search(value)
    if bad:
        raise UsageError(
            f"{name} has a lone surrogate {bad.group()!r} at character {bad.start()},"
            " which is not valid text; send it as proper Unicode"
        )
    bad = _CONTROL.search(value)
    if bad:
        raise UsageError(
            f"{name} has the control character {bad.group()!r} at character {bad.start()};"
            " only tab, newline and carriage return are allowed"
        )
    return value


def check_json_text(name: str, value: object, limit: int) -> None:
    """Every string in ``value`` (a JSON-like tree: keys too) passes
    :func:`check_text`, and the whole stays within ``limit`` characters of JSON."""
    try:
        size = len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{name} must be plain JSON data: {exc}") from None
    if size > limit:
        raise UsageError(f"{name} is {size:,} characters as JSON; the limit is {limit:,}")
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(name, item, limit)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def check_skill_code(title: str, code: object) -> str:
    """A skill's code must parse and define, at top level, a function (or async
    function, or class) named after the skill: that callable is its contract."""
    if not isinstance(code, str) or not code.strip():
        raise UsageError(f"a skill needs code that defines {title}(...)")
    check_text("code", code, MAX_CODE_CHARS)
    try:
        tree = ast.parse(code, filename=f"<skill {title}>")
    except SyntaxError as exc:
        raise UsageError(f"the skill's code does not parse: line {exc.lineno}: {exc.msg}") from None
    except (MemoryError, RecursionError):
        # CPython's parser gives up this way on some long invalid inputs.
        raise UsageError("the skill's code does not parse: the parser gave up on it") from None
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    if title not in defined:
        raise UsageError(f"the skill's code must define {title}(...) at top level")
    return code


def check_meta(kind: Kind, meta: object) -> dict[str, object]:
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise UsageError("meta must be a dict with string keys")
    check_json_text("meta", meta, MAX_META_CHARS)
    if kind == "subagent_spec":
        unknown = sorted(set(meta) - set(SPEC_FIELDS))
        if unknown:
            raise UsageError(
                f"a subagent_spec takes {', '.join(SPEC_FIELDS)}; unknown: {', '.join(unknown)}"
            )
    return dict(meta)


def is_name(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)


def validate(edit: Edit, current: EntryVersion | None) -> Edit:
    """The edit with its fields checked (and a create's defaults filled), or
    UsageError in one line. ``current``: the entry's newest version (None for
    a create)."""
    check_text("reason", edit.provenance.reason, MAX_REASON_CHARS)
    check_text("effect", edit.provenance.effect, MAX_REASON_CHARS)
    if edit.op == "create":
        if current is not None:
            raise UsageError(f"entry {edit.entry_id} exists already")
        kind = check_kind(edit.kind)
        title = check_title(kind, edit.title)
        content = check_text("content", edit.content or "", MAX_CONTENT_CHARS)
        code = check_skill_code(title, edit.code) if kind == "skill" else None
        if kind != "skill" and edit.code:
            raise UsageError("only a skill carries code")
        if kind != "skill" and not content.strip():
            raise UsageError(f"a {kind} needs content")
        return _replace(
            edit,
            kind=kind,
            title=title,
            content=content,
            code=code,
            scope=check_scope(edit.scope or "local"),
            meta=check_meta(kind, edit.meta),
        )
    if current is None:
        raise UsageError(f"no harness entry {edit.entry_id}")
    if current.status == "deleted" and edit.op != "rollback":
        raise UsageError(f"entry {edit.entry_id} is deleted (rollback brings a version back)")
    if edit.op == "update":
        kind = current.kind
        title = check_title(kind, edit.title) if edit.title is not None else current.title
        content = (
            check_text("content", edit.content, MAX_CONTENT_CHARS)
            if edit.content is not None
            else current.content
        )
        code = current.code
        if edit.code is not None or title != current.title:
            if kind != "skill":
                if edit.code:
                    raise UsageError("only a skill carries code")
            else:
                code = check_skill_code(title, edit.code if edit.code is not None else current.code)
        scope = check_scope(edit.scope) if edit.scope is not None else current.scope
        meta = check_meta(kind, edit.meta) if edit.meta is not None else current.meta
        if (title, content, code, scope, meta) == (
            current.title,
            current.content,
            current.code,
            current.scope,
            current.meta,
        ):
            raise UsageError("the update changes nothing")
        return _replace(edit, title=title, content=content, code=code, scope=scope, meta=meta)
    if edit.op == "rollback":
        target = edit.to_version
        if not isinstance(target, int) or isinstance(target, bool) or target < 0:
            raise UsageError("rollback needs to_version: a version number (0: before it existed)")
        if target >= current.version + 1:
            raise UsageError(f"entry {edit.entry_id} has versions 1 to {current.version}")
        return edit
    return edit  # delete


def _replace(edit: Edit, **changes: object) -> Edit:
    fields = {name: getattr(edit, name) for name in Edit.__dataclass_fields__}
    fields.update(changes)
    return Edit(**fields)


def reason_text(value: object) -> str:
    return check_text("reason", value or "", MAX_REASON_CHARS)


__all__ = [
    "MAX_CODE_CHARS",
    "MAX_CONTENT_CHARS",
    "MAX_META_CHARS",
    "MAX_REASON_CHARS",
    "MAX_TITLE_CHARS",
    "check_json_text",
    "check_kind",
    "check_meta",
    "check_scope",
    "check_skill_code",
    "check_text",
    "check_title",
    "is_name",
    "reason_text",
    "validate",
]

"""The Continual Harness as one object: edits staged and applied at turn
boundaries, the review of global entries, audit and rollback.

Lifecycle of an edit: the model (``harness.create`` in its kernel), a
refinement or a person asks for it; :meth:`Harness.stage` checks it (errors go
straight back to the caller) and stores it; at the session's next turn
boundary :meth:`Harness.apply_staged` writes a new version. A ``local`` entry
is ``active`` at once. A ``global`` one is reviewed as its kind's policy says
(``[harness] review_KIND``):

- ``none``: active;
- ``human``: ``proposed`` until ``recursa harness approve`` or ``reject``;
- ``model``: ``proposed``, then an independent reviewer call
  (:meth:`Harness.review`) approves or rejects it with reasons.

Before any of that a static screen (:func:`recursa.harness.screen.screen`)
looks for what must never be activated without a person (reading the
environment or credentials, sending data out, destructive commands,
shortcuts around rules or tests, disguised text). A
finding rejects the entry under ``model`` and holds it ``proposed`` under
``human`` and ``none``: a trick that worked is not yet a skill.

What applies is each entry's *effective* version: its newest version that is
``active``, ``deleted`` or ``rolled_back`` (a ``proposed`` or ``rejected``
update leaves the version before it in force). Every change, approvals and
rejections included, is a new version row; nothing is ever edited.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from recursa.config import HarnessConfig
from recursa.errors import NotFound, UsageError
from recursa.harness.entries import check_text, validate
from recursa.harness.review import parse_verdict, review_prompt
from recursa.harness.screen import screen
from recursa.protocol.calls import Complete
from recursa.protocol.harness import Action, Actor, Edit, EntryVersion, Provenance, Status
from recursa.store import Store
from recursa.store.harness import new_entry_id

EFFECTIVE: frozenset[Status] = frozenset({"active", "deleted", "rolled_back"})
MAX_REF_CHARS = 200


@dataclass(frozen=True, slots=True)
class FailedEdit:
    """A staged edit that could not be applied, and why (one line)."""

    edit: Edit
    error: str

    def describe(self) -> str:
        what = self.edit.title or self.edit.entry_id or "(untitled)"
        return f"{self.edit.op} {what!r}: {self.error}"


@dataclass(frozen=True, slots=True)
class Applied:
    """What one turn boundary did with a session's staged edits."""

    written: tuple[EntryVersion, ...]
    failed: tuple[FailedEdit, ...]


def _describe(exc: BaseException) -> str:
    """One line for an unexpected failure, valid UTF-8 whatever the message held."""
    first = (str(exc).strip().splitlines() or [""])[0]
    first = first.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class Harness:
    def __init__(self, store: Store, config: HarnessConfig) -> None:
        self.store = store
        self.config = config

    # -- staging (the kernel-side API, refinement) -----------------------------------------

    def stage(self, session_id: str, edit: Edit) -> dict[str, object]:
        """Check ``edit`` against the entry as it is now and store it for the
        session's next turn boundary. A create gets its entry id here, so the
        caller can refer to it at once. UsageError (one line) when it is wrong."""
        if edit.op == "create":
            edit = replace(edit, entry_id=edit.entry_id or new_entry_id())
            current = None
        else:
            current = self.visible(session_id, edit.entry_id)
            edit = replace(edit, entry_id=current.entry_id)
        checked = validate(edit, current)
        if checked.op == "create" and checked.kind in ("skill", "subagent_spec"):
            self._check_unique_name(session_id, checked)
        staged = self.store.harness.stage(session_id, checked)
        return {
            "entry_id": checked.entry_id,
            "op": checked.op,
            "staged": staged,
            "applies": "at the end of this turn",
        }

    def apply_staged(self, session_id: str) -> Applied:
        """Apply the session's staged edits, in order. Each is applied in its
        own transaction and marked applied with its result; one that fails
        (the entry changed meanwhile, or anything else) is marked with its
        error and rolled back, and the others go on, so no edit blocks a later one."""
        written: list[EntryVersion] = []
        failed: list[FailedEdit] = []
        for staged in self.store.harness.staged(session_id):
            try:
                with self.store.transaction():
                    version = self._apply(session_id, staged.edit)
                    self.store.harness.mark_applied(
                        staged.id, {"entry_id": version.entry_id, "version": version.version}
                    )
                written.append(version)
            except Exception as exc:  # any failure is this edit's, never the boundary's
                error = str(exc) if isinstance(exc, UsageError | NotFound) else _describe(exc)
                self.store.harness.mark_applied(staged.id, {"error": error, "failed": True})
                failed.append(FailedEdit(staged.edit, error))
        return Applied(tuple(written), tuple(failed))

    def _apply(self, session_id: str, edit: Edit) -> EntryVersion:
        current = self.store.harness.current(edit.entry_id)
        edit = validate(edit, current)
        if edit.op == "create":
            assert edit.kind and edit.title is not None and edit.scope
            draft = self._draft(edit, session_id)
            status, review = self._first_status(draft, edit.actor)
            return self.store.harness.write(None, replace(draft, status=status, review=review))
        assert current is not None
        if edit.op == "update":
            assert edit.title is not None and edit.scope and edit.content is not None
            draft = replace(
                current,
                title=edit.title,
                content=edit.content,
                code=edit.code,
                scope=edit.scope,
                meta=edit.meta or {},
            )
            status, review = self._first_status(draft, edit.actor)
            return self._next(current, draft, status, "update", edit, review=review)
        if edit.op == "delete":
            return self._next(current, current, "deleted", "delete", edit)
        # rollback
        assert edit.to_version is not None
        if edit.to_version == 0:
            return self._next(current, current, "rolled_back", "rollback", edit)
        old = self.store.harness.version(current.entry_id, edit.to_version)
        assert old is not None
        status, review = self._first_status(old, edit.actor)
        return self._next(current, old, status, "rollback", edit, review=review)

    def _draft(self, edit: Edit, session_id: str) -> EntryVersion:
        """The version an edit would write, for the review to look at."""
        assert edit.kind and edit.title is not None and edit.scope
        return EntryVersion(
            entry_id=edit.entry_id,
            version=1,
            kind=edit.kind,
            title=edit.title,
            scope=edit.scope,
            status="proposed",
            content=edit.content or "",
            code=edit.code,
            meta=edit.meta or {},
            session_id=session_id,
            action="create",
            actor=edit.actor,
            reason=edit.provenance.reason,
            effect=edit.provenance.effect,
            source_events=edit.provenance.source_events,
            refinement_id=edit.provenance.refinement_id,
            review=None,
            created_at=self.store.now(),
        )

    def _next(
        self,
        current: EntryVersion,
        body: EntryVersion,
        status: Status,
        action: Action,
        by: Edit | tuple[Actor, str],
        *,
        review: dict[str, object] | None = None,
    ) -> EntryVersion:
        """The next version of ``current``: ``body``'s title, content, code,
        meta and scope with ``status``; ``by`` is the edit that asked for it,
        or (actor, reason) for a decision."""
        if isinstance(by, Edit):
            actor, p = by.actor, by.provenance
        else:
            actor, p = by[0], Provenance(reason=by[1])
        return self.store.harness.write(
            current,
            replace(
                body,
                entry_id=current.entry_id,
                kind=current.kind,
                status=status,
                session_id=current.session_id,
                action=action,
                actor=actor,
                reason=p.reason,
                effect=p.effect,
                source_events=p.source_events,
                refinement_id=p.refinement_id,
                review=review,
            ),
        )

    # -- the review ----------------------------------------------------------------------

    def _first_status(
        self, draft: EntryVersion, actor: Actor
    ) -> tuple[Status, dict[str, object] | None]:
        """The status a new version starts in, and the review that says why:
        local entries apply at once; global ones pass the screen and their
        kind's review policy."""
        if draft.scope == "local":
            return "active", None
        findings = screen(draft)
        policy = self.config.policy(draft.kind)
        if actor == "human" and not findings:
            return "active", {"by": "human", "reasons": "a person made this change"}
        if findings:
            if policy == "model":
                return "rejected", {"by": "screen", "findings": findings}
            return "proposed", {"by": "screen", "findings": findings, "policy": policy}
        if policy == "none":
            return "active", {"by": "policy", "reasons": "review policy is none"}
        return "proposed", {"policy": policy}

    def needs_model_review(self, version: EntryVersion) -> bool:
        """A proposed global version whose kind's policy is ``model`` and that
        the screen let through."""
        return (
            version.status == "proposed"
            and version.scope == "global"
            and self.config.policy(version.kind) == "model"
            and not (version.review or {}).get("findings")
        )

    async def review(self, version: EntryVersion, complete: Complete) -> EntryVersion:
        """Ask an independent reviewer (no tools) about a proposed version, and
        write its verdict as the next version. ``complete`` is a fresh call:
        the reviewer sees its own prompt and the entry, nothing of the
        proposing session (whose log the entry's author could have shaped).
        It fails closed: a reviewer that cannot be reached leaves the entry
        proposed (a person can still decide); an unreadable verdict is a rejection."""
        current = self.store.harness.current(version.entry_id)
        if current is None or current.version != version.version or current.status != "proposed":
            return current or version  # decided meanwhile
        system, user = review_prompt(version, findings=())
        try:
            reply = await complete(system, user)
        except Exception as exc:  # the provider's failure: keep it proposed, say why
            return self._next(
                current,
                current,
                "proposed",
                "update",
                ("reviewer", "the reviewer could not be reached"),
                review={"by": "reviewer", "error": f"{type(exc).__name__}: {exc}"},
            )
        verdict = parse_verdict(reply)
        return self._next(
            current,
            current,
            "active" if verdict.approve else "rejected",
            "approve" if verdict.approve else "reject",
            ("reviewer", verdict.reasons),
            review={"by": "reviewer", "reasons": verdict.reasons},
        )

    # -- people (the CLI) ---------------------------------------------------------------

    def approve(self, ref: str, reason: str = "", *, actor: Actor = "human") -> EntryVersion:
        return self._decide(ref, "approve", reason or "approved", actor)

    def reject(self, ref: str, reason: str = "", *, actor: Actor = "human") -> EntryVersion:
        return self._decide(ref, "reject", reason or "rejected", actor)

    def _decide(
        self, ref: str, action: Literal["approve", "reject"], reason: str, actor: Actor
    ) -> EntryVersion:
        """A person's (or the reviewer's) decision on a proposed version, as the next version."""
        current = self.find(ref)
        if current.status != "proposed":
            raise UsageError(f"{current.entry_id} is {current.status}, not proposed")
        return self._next(
            current,
            current,
            "active" if action == "approve" else "rejected",
            action,
            (actor, reason),
            review={"by": actor, "reasons": reason},
        )

    def revert(self, ref: str, to_version: int, *, actor: Actor = "human") -> EntryVersion:
        """A new version with the exact title, content, code, meta and scope of
        ``to_version`` (0: before the entry existed, so it applies nowhere)."""
        current = self.find(ref)
        edit = Edit(
            op="rollback",
            entry_id=current.entry_id,
            to_version=to_version,
            provenance=Provenance(reason=f"reverted to version {to_version}"),
            actor=actor,
        )
        with self.store.transaction():
            return self._apply(current.session_id or "", edit)

    # -- reading ------------------------------------------------------------------------

    def find(self, ref: str) -> EntryVersion:
        found = self.store.harness.find(check_text("entry", ref, MAX_REF_CHARS))
        if found is None:
            raise NotFound(f"no harness entry {ref!r}")
        return found

    def effective(self, entry_id: str) -> EntryVersion | None:
        for version in reversed(self.store.harness.history(entry_id)):
            if version.status in EFFECTIVE:
                return version
        return None

    def entries(
        self,
        *,
        session_id: str | None = None,
        kind: str | None = None,
        scope: str | None = None,
        status: str | None = None,
    ) -> list[EntryVersion]:
        """Newest versions; ``session_id``: only what that session can see
        (global entries and its own local ones)."""
        found = []
        for entry in self.store.harness.entries():
            if session_id is not None and not self._sees(session_id, entry):
                continue
            if kind is not None and entry.kind != kind:
                continue
            if scope is not None and entry.scope != scope:
                continue
            if status is not None and entry.status != status:
                continue
            found.append(entry)
        return found

    def applicable(self, session_id: str, lineage: Iterable[str] = ()) -> list[EntryVersion]:
        """The versions that shape ``session_id``'s turns now: each entry's
        effective version, when active and global or local to it."""
        chain = tuple(lineage)
        found = []
        for entry in self.store.harness.entries():
            if entry.scope == "local" and entry.session_id not in (session_id, *chain):
                continue
            effective = entry if entry.status in EFFECTIVE else self.effective(entry.entry_id)
            if effective is not None and effective.applies_to(session_id, chain):
                found.append(effective)
        return found

    def spec(self, session_id: str, name: str, lineage: Iterable[str] = ()) -> EntryVersion:
        """The active sub-agent spec called ``name`` that ``session_id`` sees."""
        for entry in reversed(self.applicable(session_id, lineage)):
            if entry.kind == "subagent_spec" and entry.title == name:
                return entry
        raise UsageError(f"no active subagent_spec named {name!r} (harness.list() shows entries)")

    def diff(self, ref: str, from_version: int | None = None, to_version: int | None = None) -> str:
        """A unified diff between two versions (default: the one before the
        newest, and the newest)."""
        current = self.find(ref)
        to_v = current.version if to_version is None else to_version
        from_v = max(to_v - 1, 0) if from_version is None else from_version
        old = self.store.harness.version(current.entry_id, from_v) if from_v else None
        new = self.store.harness.version(current.entry_id, to_v)
        if new is None or (from_v and old is None):
            raise UsageError(f"{current.entry_id} has versions 1 to {current.version}")
        return "".join(
            difflib.unified_diff(
                render(old).splitlines(keepends=True),
                render(new).splitlines(keepends=True),
                fromfile=f"{current.entry_id} v{from_v}",
                tofile=f"{current.entry_id} v{to_v}",
            )
        )

    def _sees(self, session_id: str, entry: EntryVersion) -> bool:
        return entry.scope == "global" or entry.session_id == session_id

    def visible(self, session_id: str, ref: str) -> EntryVersion:
        found = self.store.harness.find(check_text("entry", ref, MAX_REF_CHARS))
        if found is None or not self._sees(session_id, found):
            raise NotFound(f"no harness entry {ref!r}")
        return found

    def _check_unique_name(self, session_id: str, edit: Edit) -> None:
        for entry in self.entries(session_id=session_id, kind=edit.kind):
            if entry.title == edit.title and entry.status in ("active", "proposed"):
                raise UsageError(
                    f"a {edit.kind} named {edit.title!r} exists already ({entry.entry_id});"
                    " update it instead"
                )


def render(version: EntryVersion | None) -> str:
    """A version as text, for diffs: what a reader compares."""
    if version is None:
        return ""
    lines = [
        f"title: {version.title}",
        f"kind: {version.kind}",
        f"scope: {version.scope}",
        f"status: {version.status}",
    ]
    if version.meta:
        lines.append(f"meta: {json.dumps(version.meta, sort_keys=True)}")
    lines += ["", version.content.rstrip("\n")]
    if version.code is not None:
        lines += ["", "--- code ---", version.code.rstrip("\n")]
    return "\n".join(lines) + "\n"


__all__ = ["EFFECTIVE", "Applied", "Complete", "FailedEdit", "Harness", "render"]

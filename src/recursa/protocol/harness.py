"""Harness entries as pure values: the four kinds, a version, an edit.

See :mod:`recursa.harness.entries` for what they mean and the checks an edit
passes; the store keeps versions (:mod:`recursa.store.harness`).
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal, get_args

from recursa.values import frozen

Kind = Literal["prompt_note", "memory", "skill", "subagent_spec"]
Scope = Literal["local", "global"]
Status = Literal["proposed", "active", "rejected", "rolled_back", "deleted"]
Action = Literal["create", "update", "delete", "rollback", "approve", "reject"]
Actor = Literal["model", "refine", "human", "reviewer", "policy"]

KINDS: tuple[Kind, ...] = get_args(Kind)
SCOPES: tuple[Scope, ...] = get_args(Scope)
STATUSES: tuple[Status, ...] = get_args(Status)

SPEC_FIELDS = ("model", "budget", "description")
"""What a ``subagent_spec`` may carry in ``meta`` besides its instructions (``content``)."""


@frozen
class EntryVersion:
    """One version of one entry (a row of ``harness_entries``)."""

    entry_id: str
    version: int
    kind: Kind
    title: str
    scope: Scope
    status: Status
    content: str
    code: str | None
    meta: dict[str, object]
    session_id: str | None
    """The session it belongs to (``local``) or that created it (``global``)."""
    action: Action
    actor: Actor
    reason: str
    effect: str
    source_events: tuple[int, ...]
    refinement_id: int | None
    review: dict[str, object] | None
    created_at: float

    @property
    def description(self) -> str:
        """One line for indexes: ``meta['description']``, else the content's first line."""
        described = self.meta.get("description")
        if isinstance(described, str) and described.strip():
            return described.strip().splitlines()[0]
        first = self.content.strip().splitlines()
        return first[0] if first else ""

    def applies_to(self, session_id: str, lineage: tuple[str, ...] = ()) -> bool:
        """Whether this version shapes ``session_id``'s turns: active, and global
        or local to it (``lineage``: ids whose local entries it also sees)."""
        if self.status != "active":
            return False
        return self.scope == "global" or self.session_id in (session_id, *lineage)


@frozen
class Provenance:
    """Why an edit was made, and from what."""

    reason: str = ""
    effect: str = ""
    source_events: tuple[int, ...] = ()
    refinement_id: int | None = None


@frozen
class Edit:
    """A change asked for by the model, a refinement or a person: staged, then
    applied at the session's next turn boundary.

    ``create`` needs kind, title, content (and code for a skill); ``update``
    any of title, content, code, meta, scope; ``delete`` nothing;
    ``rollback`` ``to_version`` (0: to before the entry existed)."""

    op: Literal["create", "update", "delete", "rollback"]
    entry_id: str
    kind: Kind | None = None
    title: str | None = None
    content: str | None = None
    code: str | None = None
    scope: Scope | None = None
    meta: dict[str, object] | None = None
    to_version: int | None = None
    provenance: Provenance = field(default_factory=Provenance)
    actor: Actor = "model"

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op,
            "entry_id": self.entry_id,
            "kind": self.kind,
            "title": self.title,
            "content": self.content,
            "code": self.code,
            "scope": self.scope,
            "meta": self.meta,
            "to_version": self.to_version,
            "reason": self.provenance.reason,
            "effect": self.provenance.effect,
            "source_events": list(self.provenance.source_events),
            "refinement_id": self.provenance.refinement_id,
            "actor": self.actor,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Edit:
        events = data.get("source_events")
        events = events if isinstance(events, list) else []
        refinement = data.get("refinement_id")
        return cls(
            op=data["op"],  # type: ignore[arg-type]
            entry_id=str(data["entry_id"]),
            kind=data.get("kind"),  # type: ignore[arg-type]
            title=text_or_none(data.get("title")),
            content=text_or_none(data.get("content")),
            code=text_or_none(data.get("code")),
            scope=data.get("scope"),  # type: ignore[arg-type]
            meta=data.get("meta") if isinstance(data.get("meta"), dict) else None,  # type: ignore[arg-type]
            to_version=data.get("to_version"),  # type: ignore[arg-type]
            provenance=Provenance(
                reason=str(data.get("reason") or ""),
                effect=str(data.get("effect") or ""),
                source_events=tuple(e for e in events if isinstance(e, int)),
                refinement_id=refinement if isinstance(refinement, int) else None,
            ),
            actor=data.get("actor", "model"),  # type: ignore[arg-type]
        )


def text_or_none(value: object) -> str | None:
    """``value`` if it is a string, else None (for fields read from JSON)."""
    return value if isinstance(value, str) else None


__all__ = [
    "KINDS",
    "SCOPES",
    "SPEC_FIELDS",
    "STATUSES",
    "Action",
    "Actor",
    "Edit",
    "EntryVersion",
    "Kind",
    "Provenance",
    "Scope",
    "Status",
    "text_or_none",
]

"""The runtime's side of the Continual Harness: what a session's turns see
(the supplemental prompt, the skills bound in its kernel), what happens at a
turn boundary (staged edits applied, reviews started), and the model calls
the harness makes (the reviewer's, refinement's). Those calls go through the
model-call gateway of the session they serve (:mod:`recursa.session.gateway`):
admitted under its subtree's budgets, retried, and counted in its books at
once, like any other.

The harness itself (versions, the review, audit) is
:class:`recursa.harness.service.Harness`; this module gives it models,
sessions and kernels.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from recursa.errors import ProviderError, UsageError
from recursa.harness.prompt import Supplement, estimate_tokens, supplemental_prompt
from recursa.harness.refine import parse_proposals, refine_prompt, render_events
from recursa.harness.service import Harness
from recursa.harness.skills import FolderSkill, bind_code, discover_skills, skills_digest
from recursa.protocol.events import Event, Notice
from recursa.protocol.harness import EntryVersion

if TYPE_CHECKING:
    from recursa.runtime.runtime import Runtime
    from recursa.session import Session

log = logging.getLogger("recursa.harness")

REFINE_EVENTS_CHARS = 24_000
"""How much of the recent event log a refinement reads."""


@dataclass(frozen=True, slots=True)
class RefineResult:
    refinement_id: int
    staged: tuple[str, ...]
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "refinement_id": self.refinement_id,
            "staged": list(self.staged),
            "problems": list(self.problems),
        }


class Learning:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.harness = Harness(runtime.store, runtime.config.harness)
        self._reviews = runtime.tasks.group("reviews")
        self._failed: dict[str, tuple[str, ...]] = {}
        """Per session, the edits its last turn boundary could not apply: told
        in its next turn's prompt (and in its log, which outlives this)."""

    # -- what a session sees -----------------------------------------------------------

    def lineage(self, session_id: str) -> tuple[str, ...]:
        """A session's ancestors: their local entries apply to their sub-agents too."""
        chain: list[str] = []
        row = self.runtime.store.session(session_id)
        while row.parent_id is not None:
            chain.append(row.parent_id)
            row = self.runtime.store.session(row.parent_id)
        return tuple(chain)

    def folder_skills(self, session_id: str) -> list[FolderSkill]:
        row = self.runtime.store.session(session_id)
        return discover_skills(Path(row.cwd), self.runtime.config.home)

    def applicable(self, session_id: str) -> list[EntryVersion]:
        return self.harness.applicable(session_id, self.lineage(session_id))

    def supplement(self, session_id: str) -> Supplement:
        """What the session's next model call gets after the base prompt: its
        role (a sub-agent started with a spec), then the harness's entries."""
        made = supplemental_prompt(
            self.applicable(session_id),
            self.folder_skills(session_id),
            max_chars=self.runtime.config.harness.max_prompt_chars,
        )
        sections = [made.text] if made.text else []
        role = self.runtime.store.session(session_id).meta.get("role")
        if isinstance(role, str) and role.strip():
            sections.insert(0, f"# Your role\n\n{role.strip()}")
        failed = self._failed.get(session_id)
        if failed:
            sections.append(
                "# Harness edits that were not applied\n\n"
                "When your last turn ended, these staged edits failed; nothing of them"
                " applies:\n" + "\n".join(f"- {line}" for line in failed)
            )
        text = "\n\n".join(sections)
        if text == made.text:
            return made
        return replace(made, text=text, tokens=estimate_tokens(text))

    def prelude(self, session_id: str) -> tuple[str, str] | None:
        """What a session's kernel runs before its cells: its skills bound."""
        skills = [e for e in self.applicable(session_id) if e.kind == "skill"]
        folders = self.folder_skills(session_id)
        if not skills and not folders:
            return None
        return skills_digest(skills, folders), bind_code(skills, folders)

    # -- the turn boundary -------------------------------------------------------------

    def turn_ended(self, session: Session) -> None:
        """Apply the session's staged edits (in the transaction that records the
        turn's end) and start the reviews they need. An edit that fails is
        told in the log and in the session's next turn's prompt; the others
        apply all the same."""
        applied = self.harness.apply_staged(session.id)
        for version in applied.written:
            state = f"{version.kind} {version.title!r} v{version.version}: {version.status}"
            session.record(Notice(level="info", text=f"harness: {state} ({version.entry_id})"))
            if self.harness.needs_model_review(version):
                self._start_review(version)
        for failure in applied.failed:
            text = f"harness: edit not applied: {failure.describe()}"
            session.record(Notice(level="warning", text=text))
        if applied.failed:
            self._failed[session.id] = tuple(f.describe() for f in applied.failed)
        else:
            self._failed.pop(session.id, None)  # told once: in the turn after the failure

    def _start_review(self, version: EntryVersion) -> None:
        if self._reviews.closed:  # a turn that ends while the runtime closes
            log.info("not reviewing %s: the runtime is closing", version.entry_id)
            return
        self._reviews.start(self.review(version), name=f"review {version.entry_id}")

    async def review(self, version: EntryVersion) -> EntryVersion:
        """The model review of one proposed version: a fresh call on
        ``[harness] reviewer_model`` (else the proposing session's model) with
        its own prompt and the entry alone, none of the session's context. The
        call is counted in the proposing session's books."""
        session_id = version.session_id
        model = self.runtime.config.harness.reviewer_model or (
            self.runtime.store.session(session_id).model if session_id else None
        )
        if model is None:
            return version

        async def complete(system: str, user: str) -> str:
            return await self.complete(model, system, user, session_id=session_id)

        decided = await self.harness.review(version, complete)
        if session_id is not None:
            text = f"harness: {decided.title!r} v{decided.version}: {decided.status} by reviewer"
            self.runtime.get(session_id).record(Notice(level="info", text=text))
        return decided

    async def wait_reviews(self) -> None:
        """Until the reviews started so far are done (tests, shutdown)."""
        await self._reviews.join()

    async def aclose(self) -> None:
        """Cancel the reviews still running (their entries stay proposed)."""
        await self._reviews.aclose()

    # -- refinement ----------------------------------------------------------------------

    async def refine(self, session_id: str, instructions: str | None) -> RefineResult:
        """A model call over the session's recent events that proposes edits;
        each valid one is staged for the session's next turn boundary."""
        store = self.runtime.store
        row = store.session(session_id)
        records = list(store.events(session_id))
        events_text = render_events(records, REFINE_EVENTS_CHARS)
        if not events_text.strip():
            raise UsageError(f"session {session_id} has no events to refine from")
        refinement = store.harness.begin_refinement(session_id, instructions)
        system, user = refine_prompt(events_text, self.applicable(session_id), instructions)
        try:
            reply = await self.complete(row.model, system, user, session_id=session_id)
        except ProviderError as exc:
            store.harness.finish_refinement(refinement, "failed", [], str(exc))
            raise
        source = tuple(r.seq for r in records[-50:])
        edits, problems = parse_proposals(
            reply, session_id=session_id, refinement_id=refinement, source_events=source
        )
        staged: list[str] = []
        for edit in edits:
            try:
                receipt = self.harness.stage(session_id, edit)
            except UsageError as exc:
                problems.append(f"{edit.op} {edit.title or edit.entry_id}: {exc}")
                continue
            staged.append(str(receipt["entry_id"]))
        store.harness.finish_refinement(
            refinement,
            "done",
            [e.to_json() for e in edits],
            "; ".join(problems),
        )
        session = self.runtime.get(session_id)
        summary = f"refinement {refinement}: {len(staged)} edit(s) staged"
        if problems:
            summary += f", {len(problems)} skipped"
        session.record(Notice(level="info", text=summary))
        if not session.running:
            # Nothing else will reach a turn boundary soon: apply now.
            self.turn_ended(session)
        return RefineResult(refinement, tuple(staged), tuple(problems))

    # -- model calls ---------------------------------------------------------------------

    async def complete(self, model: str, system: str, user: str, *, session_id: str | None) -> str:
        """One model call with no tools, through the gateway of ``session_id``
        (admitted under its subtree's budgets, retried, its retries and usage
        recorded in its log, and so in every total over its tree). Raises
        ProviderError when it fails or a budget refuses it."""
        gateway = self.runtime.accounts.gateway(session_id, model)
        return await gateway.text(system, user, self._recorder(session_id))

    def _recorder(self, session_id: str | None) -> Callable[[Event], object]:
        """Where a harness call's events go: the log of the session it serves."""
        if session_id is None:
            return lambda event: None
        return lambda event: self.runtime.get(session_id).record(event)


__all__ = ["Learning", "RefineResult"]

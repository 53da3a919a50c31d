"""The supplemental prompt: what the harness adds after the base system prompt.

The base system prompt is never edited; the entries that apply to a session
are rendered into a supplement, bounded in size, in four sections in this
order, each only when it has something: ``# Notes`` (prompt notes),
``# Memories``, ``# Skills`` (the index only: names and descriptions) and
``# Sub-agent roles``. Within a section entries go by creation time, then id.
Entries are whole or absent: one that does not fit is left out, later ones
may still fit, and a last line says how many were left out. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from recursa.harness.skills import (
    FolderSkill,
    entry_index_line,
    folder_index_line,
    index_footer,
    skill_index,
)
from recursa.protocol.harness import EntryVersion, Kind

CHARS_PER_TOKEN_ESTIMATE = 3
"""The same high estimate as :mod:`recursa.control.budget` uses (harness and
control are sibling layers, so neither imports the other)."""

SPEC_INTRO = 'Start one with `await rlm(task, spec="NAME")`.'


@dataclass(frozen=True, slots=True)
class Supplement:
    """The rendered supplement: its ``text``, an estimate of its ``tokens``,
    and the ids of the entries that are in it and that did not fit."""

    text: str
    tokens: int
    included: tuple[str, ...]
    left_out: tuple[str, ...]


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN_ESTIMATE)


@dataclass(slots=True)
class _Item:
    entry: EntryVersion | None  # None: a folder skill
    folder: FolderSkill | None
    text: str
    fits: bool = False


@dataclass(slots=True)
class _Section:
    kind: Kind
    heading: str
    separator: str
    intro: str = ""
    footer: str = ""
    """For skills, the footer for every candidate: an upper bound on what is rendered."""
    items: list[_Item] = field(default_factory=list)

    @property
    def overhead(self) -> int:
        size = len(self.heading) + 1
        if self.intro:
            size += len(self.intro) + 1
        if self.footer:
            size += len(self.footer) + 1
        return size


def supplemental_prompt(
    entries: Sequence[EntryVersion], folders: Sequence[FolderSkill], *, max_chars: int
) -> Supplement:
    """The supplement for ``entries`` (those that apply to the session) and
    the session's folder skills, at most ``max_chars`` characters long."""
    sections = _sections(entries, folders)
    if not any(section.items for section in sections):
        return Supplement("", 0, (), ())
    candidates = sum(len(section.items) for section in sections)
    if not _fit(sections, max_chars):
        # Something did not fit: fit again leaving room for the line that says so.
        room = len("\n\n" + _left_out_line(candidates, candidates))
        _fit(sections, max_chars - room)
    text = "\n\n".join(_render(section) for section in sections if _chosen(section))
    items = [item for section in sections for item in section.items]
    left_entries = [i.entry.entry_id for i in items if i.entry is not None and not i.fits]
    left_folders = sum(1 for i in items if i.folder is not None and not i.fits)
    if left_entries or left_folders:
        line = _left_out_line(len(left_entries), left_folders)
        joined = f"{text}\n\n{line}" if text else line
        if len(joined) <= max_chars:
            text = joined
    included = tuple(i.entry.entry_id for i in items if i.entry is not None and i.fits)
    return Supplement(text, estimate_tokens(text), included, tuple(left_entries))


def _sections(entries: Sequence[EntryVersion], folders: Sequence[FolderSkill]) -> list[_Section]:
    ordered = sorted(entries, key=lambda e: (e.created_at, e.entry_id))

    def of(kind: Kind) -> list[EntryVersion]:
        return [e for e in ordered if e.kind == kind]

    notes = _Section("prompt_note", "# Notes", "\n\n")
    notes.items = [_Item(e, None, _note(e)) for e in of("prompt_note")]
    memories = _Section("memory", "# Memories", "\n")
    memories.items = [_Item(e, None, _memory(e)) for e in of("memory")]
    skill_entries = [e for e in of("skill") if e.code]
    skills = _Section("skill", "# Skills", "\n")
    skills.items = [_Item(e, None, entry_index_line(e)) for e in skill_entries]
    skills.items += [_Item(None, f, folder_index_line(f)) for f in folders]
    skills.footer = "\n".join(index_footer(entries=bool(skill_entries), folders=bool(folders)))
    roles = _Section("subagent_spec", "# Sub-agent roles", "\n", intro=SPEC_INTRO)
    roles.items = [_Item(e, None, entry_index_line(e)) for e in of("subagent_spec")]
    return [notes, memories, skills, roles]


def _note(entry: EntryVersion) -> str:
    return f"## {entry.title}\n{entry.content.strip()}"


def _memory(entry: EntryVersion) -> str:
    lines = entry.content.strip().splitlines() or [""]
    rest = "".join(f"\n  {line}" if line.strip() else "\n" for line in lines[1:])
    return f"- {entry.title}: {lines[0]}{rest}".rstrip()


def _fit(sections: list[_Section], budget: int) -> bool:
    """Mark the items that fit in ``budget``, greedily in order; whether all did."""
    used = 0
    started_any = False
    everything = True
    for section in sections:
        started = False
        for item in section.items:
            cost = len(item.text)
            if started:
                cost += len(section.separator)
            else:
                cost += section.overhead + (2 if started_any else 0)
            item.fits = used + cost <= budget
            if item.fits:
                used += cost
                started = started_any = True
            else:
                everything = False
    return everything


def _chosen(section: _Section) -> bool:
    return any(item.fits for item in section.items)


def _render(section: _Section) -> str:
    chosen = [item for item in section.items if item.fits]
    if section.kind == "skill":
        body = skill_index(
            [i.entry for i in chosen if i.entry is not None],
            [i.folder for i in chosen if i.folder is not None],
        )
    else:
        body = section.separator.join(item.text for item in chosen)
    head = f"{section.heading}\n{section.intro}\n" if section.intro else f"{section.heading}\n"
    return head + body


def _left_out_line(entries: int, folders: int) -> str:
    parts = []
    if entries:
        noun = "entry" if entries == 1 else "entries"
        parts.append(f"{entries} more {noun} left out (harness.list() shows them).")
    if folders:
        noun = "folder skill" if folders == 1 else "folder skills"
        parts.append(f"{folders} more {noun} left out.")
    return " ".join(parts)


__all__ = [
    "CHARS_PER_TOKEN_ESTIMATE",
    "SPEC_INTRO",
    "Supplement",
    "estimate_tokens",
    "supplemental_prompt",
]

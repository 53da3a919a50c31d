"""Skills an agent can call: harness ``skill`` entries and Agent Skills folders.

Two sources, one index in the prompt:

- a ``skill`` entry is Python whose contract is a top-level callable named
  after the entry's title; :func:`bind_code` makes the call that installs it
  in a kernel as module ``TITLE`` and binds ``TITLE`` in the user namespace
  (:mod:`recursa.api.skills`, in the kernel);
- a folder skill (the Agent Skills format) is a folder with a ``SKILL.md``
  whose front matter names and describes it; the model reads the full file
  from the kernel when it needs it, and a folder holding Python is put on
  ``sys.path``. :func:`discover_skills` finds them in the project's
  ``.recursa/skills/`` (here or in a parent folder) and in ``$RECURSA_HOME/skills/``.

Everything here but :func:`discover_skills` is pure; the prompt shows only
:func:`skill_index` (names and descriptions), never the code.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recursa.errors import one_line
from recursa.kernel.commands import inline_command
from recursa.protocol.harness import EntryVersion

log = logging.getLogger("recursa.harness")

PROJECT_SKILLS = Path(".recursa") / "skills"
"""Where a project keeps its folder skills, relative to the project's root."""
HOME_SKILLS = "skills"
"""Where a user keeps folder skills, relative to ``RECURSA_HOME``."""
SKILL_FILE = "SKILL.md"
MAX_FOLDER_SKILLS = 200
"""More folder skills than this are ignored (with a warning): each costs a prompt line."""
MAX_SKILL_MD_BYTES = 64 * 1024
"""Only this much of a ``SKILL.md`` is read; the front matter is at its top."""
MAX_DESCRIPTION_CHARS = 300
"""An index line's description is cut to this length."""


@dataclass(frozen=True, slots=True)
class FolderSkill:
    """A folder skill: ``path`` is the folder, ``skill_md`` its ``SKILL.md``.
    ``importable``: the folder holds a Python module or package, so binding
    puts it on the kernel's ``sys.path``."""

    name: str
    description: str
    path: Path
    skill_md: Path
    importable: bool = False


# -- discovery ----------------------------------------------------------------------


def parse_front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the ``---`` lines that open ``text``.

    A small subset of YAML, enough for ``SKILL.md``: plain, single- or
    double-quoted scalars, and ``>``/``|`` block scalars (their indented
    lines, joined). Nested mappings and lists are skipped. No front matter
    (or no closing ``---``): an empty dict.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        return {}
    fields: dict[str, str] = {}
    key: str | None = None
    block: str | None = None  # ">" or "|" while reading a block scalar, "" for a plain one
    for line in lines[1:end]:
        indented = line[:1] in (" ", "\t")
        if indented and key is not None and block is not None and line.strip():
            separator = "\n" if block == "|" else " "
            previous = fields[key]
            fields[key] = f"{previous}{separator}{line.strip()}" if previous else line.strip()
            continue
        if indented or not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, raw = line.partition(":")
        if not colon or not name.strip():
            key = block = None
            continue
        key, value = name.strip(), raw.strip()
        if value[:1] in (">", "|"):
            fields[key], block = "", value[0]
        elif value:
            fields[key], block = _scalar(value), ""
        else:
            fields[key], block = "", None  # a nested mapping or a list: not ours
            key = None
    return fields


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            decoded = json.loads(value)
        except ValueError:
            return value[1:-1]
        return decoded if isinstance(decoded, str) else value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    comment = value.find(" #")
    return value[:comment].rstrip() if comment >= 0 else value


def read_folder_skill(folder: Path) -> FolderSkill | None:
    """The folder skill in ``folder``, or None (with a warning) when its
    ``SKILL.md`` cannot be read or has no front matter with a ``name``."""
    skill_md = folder / SKILL_FILE
    try:
        with skill_md.open("rb") as file:
            head = file.read(MAX_SKILL_MD_BYTES)
    except OSError as exc:
        log.warning("skipping skill %s: %s", skill_md, exc.strerror or exc)
        return None
    fields = parse_front_matter(head.decode("utf-8", errors="replace"))
    name = " ".join(fields.get("name", "").split())
    if not name:
        log.warning("skipping skill %s: no front matter with a name", skill_md)
        return None
    return FolderSkill(
        name=name,
        description=" ".join(fields.get("description", "").split()),
        path=folder,
        skill_md=skill_md,
        importable=_holds_python(folder),
    )


def _holds_python(folder: Path) -> bool:
    try:
        for child in folder.iterdir():
            if child.suffix == ".py" and child.is_file():
                return True
            if child.is_dir() and (child / "__init__.py").is_file():
                return True
    except OSError:
        return False
    return False


def skill_roots(cwd: Path, home: Path) -> list[Path]:
    """The folders searched, nearest first: ``.recursa/skills`` in ``cwd`` and
    each parent, then ``home/skills``. A folder reached twice is listed once."""
    start = cwd.expanduser().absolute()
    candidates = [d / PROJECT_SKILLS for d in (start, *start.parents)]
    candidates.append(home.expanduser().absolute() / HOME_SKILLS)
    roots: list[Path] = []
    seen: set[Path] = set()
    for root in candidates:
        try:
            if not root.is_dir():
                continue
            real = root.resolve()
        except OSError:
            continue
        if real not in seen:
            seen.add(real)
            roots.append(root)
    return roots


def discover_skills(cwd: Path, home: Path) -> list[FolderSkill]:
    """The folder skills ``cwd``'s session sees, nearest first (see
    :func:`skill_roots`); names are unique, the nearest wins. At most
    :data:`MAX_FOLDER_SKILLS`; a malformed one is skipped with a warning."""
    found: list[FolderSkill] = []
    names: set[str] = set()
    for root in skill_roots(cwd, home):
        try:
            folders = sorted(child for child in root.iterdir() if child.is_dir())
        except OSError as exc:
            log.warning("skipping skills in %s: %s", root, exc.strerror or exc)
            continue
        for folder in folders:
            if not (folder / SKILL_FILE).is_file():
                continue
            if len(found) >= MAX_FOLDER_SKILLS:
                log.warning("more than %d folder skills; the rest are ignored", MAX_FOLDER_SKILLS)
                return found
            skill = read_folder_skill(folder)
            if skill is None:
                continue
            if skill.name in names:
                log.debug("skill %s in %s is shadowed by a nearer one", skill.name, folder)
                continue
            names.add(skill.name)
            found.append(skill)
    return found


# -- binding in a kernel ------------------------------------------------------------


def _skill_entries(entries: Sequence[EntryVersion]) -> list[EntryVersion]:
    return [e for e in entries if e.kind == "skill" and e.code]


def bind_code(entries: Sequence[EntryVersion], folders: Sequence[FolderSkill]) -> str:
    """Code that, run silently in a kernel, binds each skill entry (``kind ==
    "skill"`` with code; a later entry wins on a shared title) and puts each
    importable folder skill's folder on ``sys.path`` once:
    :func:`recursa.api.skills.bind` does it in the kernel, and says how. The
    code is one fixed call; the skills travel in it as data (a JSON string
    literal), never as code of their own.

    A skill that fails leaves the others bound; the errors, by title, are
    left in ``recursa.api.skills.errors`` in the kernel. The caller passes
    only the entries that apply to the session."""
    return inline_command(
        "bind_skills",
        skills=[
            {
                "entry_id": entry.entry_id,
                "title": entry.title,
                "version": entry.version,
                "code": entry.code,
                "description": entry.description,
            }
            for entry in _skill_entries(entries)
        ],
        paths=list(dict.fromkeys(str(f.path) for f in folders if f.importable)),
    )


def skills_digest(entries: Sequence[EntryVersion], folders: Sequence[FolderSkill]) -> str:
    """A sha256 over what :func:`bind_code` binds: rebind only when it changes."""
    data = {
        "skills": [[e.entry_id, e.title, e.version, e.code] for e in _skill_entries(entries)],
        "paths": [[str(f.path), f.importable] for f in folders],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# -- the prompt's index -------------------------------------------------------------


def entry_index_line(entry: EntryVersion) -> str:
    described = one_line(entry.description, limit=MAX_DESCRIPTION_CHARS)
    return f"- {entry.title}: {described}" if described else f"- {entry.title}"


def folder_index_line(folder: FolderSkill) -> str:
    described = one_line(folder.description, limit=MAX_DESCRIPTION_CHARS)
    head = f"- {folder.name}: {described}" if described else f"- {folder.name}"
    return f"{head} (read {folder.skill_md})"


def index_footer(*, entries: bool, folders: bool) -> list[str]:
    """The lines after the index saying how each kind of skill is used."""
    lines = []
    if entries:
        lines.append(
            "Skill entries are callable by name in the kernel (await the async ones);"
            " help(NAME) shows a skill's signature."
        )
    if folders:
        lines.append(
            "A folder skill's full instructions are in its SKILL.md: read the file"
            " from the kernel at the path shown before using it."
        )
    return lines


def skill_index(entries: Sequence[EntryVersion], folders: Sequence[FolderSkill]) -> str:
    """The prompt's lines for skills: ``- name: description`` for each skill
    entry and folder skill, then how to use them. Empty when there are none."""
    skills = _skill_entries(entries)
    lines = [entry_index_line(e) for e in skills]
    lines += [folder_index_line(f) for f in folders]
    if not lines:
        return ""
    lines += index_footer(entries=bool(skills), folders=bool(folders))
    return "\n".join(lines)


__all__ = [
    "HOME_SKILLS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_FOLDER_SKILLS",
    "MAX_SKILL_MD_BYTES",
    "PROJECT_SKILLS",
    "SKILL_FILE",
    "FolderSkill",
    "bind_code",
    "discover_skills",
    "entry_index_line",
    "folder_index_line",
    "index_footer",
    "parse_front_matter",
    "read_folder_skill",
    "skill_index",
    "skill_roots",
    "skills_digest",
]

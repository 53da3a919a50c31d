"""The suites ``recursa eval run SUITE`` knows: built-in ones and custom ones.

Built-in (:func:`suite_names`): RULER's synthetic tasks (``ruler-niah``,
``ruler-niah-all``, ``ruler-vt``, ``ruler-cwe``, ``ruler-fwe``, ``ruler-qa``,
``ruler``, and each task alone as ``ruler-TASK``, e.g.
``ruler-niah_multikey_1``; :mod:`.ruler`) and the QA sets ``hotpotqa`` and
``squad`` (:mod:`.qa`).

A custom suite (:func:`load_suite`) is named by

- an import path, ``pkg.mod`` or ``pkg.mod:attr``;
- a Python file, ``path/to/suite.py`` or ``path/to/suite.py:attr``;
- an entry point in the group ``recursa.eval_suites`` (by its name).

What it names (the module, or its ``attr``; a class is instantiated with no
arguments) provides ``items`` and ``score(item, answer) -> float``:

- ``items(lengths, n, seed)`` (the :class:`~recursa.evals.trials.Suite`
  protocol): it chooses its own items; or ``items()`` with no arguments: the
  whole suite, of which a run takes the first ``n`` (``n <= 0``: all, through
  the API; the CLI's ``--n`` is at least 1), at
  length 0;
- items are :class:`~recursa.evals.trials.Item` or dicts with ``id``,
  ``question`` and ``references`` and optionally ``context``, ``prompt``
  (default: the context, a blank line, the question), ``task`` (default: the
  suite's name), ``metric`` (default ``custom``), ``length`` and ``meta``;
- ``score`` gets the :class:`~recursa.evals.trials.Item` and the answer
  (``None`` when there was none).

Its name is its ``name`` attribute, else the module's last component or the
file's stem.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from recursa.errors import UsageError
from recursa.evals.suites.qa import QASuite, scores
from recursa.evals.suites.ruler import SUITES as RULER_SUITES
from recursa.evals.suites.ruler import TASKS as RULER_TASKS
from recursa.evals.suites.ruler import Progress, RulerSuite
from recursa.evals.trials import Item, Suite

ENTRY_POINT_GROUP = "recursa.eval_suites"
QA_SUITES = ("hotpotqa", "squad")


def _ruler_groups() -> dict[str, tuple[str, ...]]:
    groups = dict(RULER_SUITES)
    for task in RULER_TASKS:
        groups.setdefault(f"ruler-{task}", (task,))
    return groups


def suite_names() -> list[str]:
    """The built-in suites, RULER's groups first, then each task, then QA."""
    return [*_ruler_groups(), *QA_SUITES]


def load_suite(
    name_or_path: str, *, cache_dir: Path | None = None, progress: Progress | None = None
) -> Suite:
    """The suite ``name_or_path`` names (see the module docstring).

    ``cache_dir`` is where built-in suites keep generated items (``None``:
    ``$RECURSA_HOME/evals/cache``); ``progress`` is told, in a line, what a
    built-in suite generates (not what it reads from the cache). Raises :class:`UsageError` (one line) for
    a name that is none of these, a module that does not import, or one
    without ``items`` and ``score``.
    """
    name = name_or_path.strip()
    groups = _ruler_groups()
    if name in groups:
        return RulerSuite(name, groups[name], cache_dir=cache_dir, progress=progress)
    if name in QA_SUITES:
        return QASuite(name, cache_dir=cache_dir, progress=progress)
    target, _, attr = name.partition(":") if not _is_windows_drive(name) else (name, "", "")
    if target.endswith(".py") or Path(target).is_file():
        module = _import_file(Path(target))
        return adapt(_attribute(module, attr, name), default_name=Path(target).stem)
    entry = _entry_point(name)
    if entry is not None:
        try:
            found = entry.load()
        except Exception as exc:
            raise UsageError(f"suite entry point {name!r} does not load: {exc}") from None
        return adapt(found, default_name=name)
    if target.replace(".", "").replace("_", "").isalnum() and not target[:1].isdigit():
        module = _import_module(target, name)
        if module is not None:
            return adapt(_attribute(module, attr, name), default_name=target.rsplit(".", 1)[-1])
    raise UsageError(
        f"unknown suite {name!r}: built-in suites are {', '.join(suite_names())}; "
        "or give a module (pkg.mod[:attr]), a .py file or an entry point "
        f"in {ENTRY_POINT_GROUP}"
    )


def _is_windows_drive(name: str) -> bool:
    return len(name) > 2 and name[1] == ":" and name[2] in "\\/"


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"suite file {path} does not exist")
    module_name = f"recursa_custom_suite_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"suite file {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise UsageError(
            f"suite file {path} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    return module


def _import_module(target: str, name: str) -> Any:
    """The module, or None when it (not something it imports) does not exist."""
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (target == exc.name or target.startswith(exc.name + ".")):
            return None
        raise UsageError(f"suite module {target} failed to import: {exc}") from None
    except Exception as exc:
        raise UsageError(f"suite {name} failed to import: {type(exc).__name__}: {exc}") from None


def _attribute(module: Any, attr: str, name: str) -> Any:
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UsageError(f"suite {name}: the module has no {attr!r}") from None


def _entry_point(name: str) -> metadata.EntryPoint | None:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            return entry
    return None


def adapt(found: object, *, default_name: str) -> Suite:
    """A :class:`Suite` from a module or object with ``items`` and ``score``."""
    if inspect.isclass(found):
        found = found()
    items, score = getattr(found, "items", None), getattr(found, "score", None)
    if not callable(items) or not callable(score):
        raise UsageError(f"suite {default_name} must provide items() and score(item, answer)")
    name = getattr(found, "name", None)
    return CustomSuite(str(name) if isinstance(name, str) and name else default_name, items, score)


@dataclass
class CustomSuite:
    """A user's suite behind the :class:`Suite` protocol."""

    name: str
    source_items: Callable[..., Iterable[object]]
    source_score: Callable[[Item, str | None], float]

    def items(self, lengths: Sequence[int], n: int, seed: int) -> list[Item]:
        if _takes_arguments(self.source_items):
            raw = list(self.source_items(lengths, n, seed))
        else:
            raw = list(self.source_items())
            raw = raw[:n] if n > 0 else raw
        return [self._item(entry) for entry in raw]

    def score(self, item: Item, answer: str | None) -> float:
        return float(self.source_score(item, answer))

    def _item(self, entry: object) -> Item:
        if isinstance(entry, Item):
            return entry
        if not isinstance(entry, dict) or not {"id", "question", "references"} <= entry.keys():
            raise UsageError(
                f"suite {self.name}: an item must be an Item or a dict with id, question "
                f"and references (got {type(entry).__name__})"
            )
        refs = entry["references"]
        context = str(entry.get("context", ""))
        question = str(entry["question"])
        return Item(
            id=str(entry["id"]),
            task=str(entry.get("task", self.name)),
            question=question,
            context=context,
            prompt=str(
                entry.get("prompt") or (f"{context}\n\n{question}" if context else question)
            ),
            references=(refs,) if isinstance(refs, str) else tuple(str(r) for r in refs),
            metric=str(entry.get("metric", "custom")),
            length=int(entry.get("length", 0)),
            meta=dict(entry.get("meta", {})),
        )


def _takes_arguments(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(
        p.kind in positional or p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters
    )


__all__ = [
    "ENTRY_POINT_GROUP",
    "CustomSuite",
    "Progress",
    "adapt",
    "load_suite",
    "scores",
    "suite_names",
]

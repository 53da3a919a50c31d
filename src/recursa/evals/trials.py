"""What an evaluation is made of: items, policies, trials and their results.

- An :class:`Item` is one question of a suite: the material (``context``), the
  question, the references and the metric that scores an answer. Its ``id`` is
  stable for a suite, a seed and a length, so two runs pair on it.
- A :class:`Policy` is how the harness is set for a trial: ``repl`` puts the
  context in the kernel as the variable ``context`` (the RLM way), ``context``
  puts it in the prompt; compaction, sub-agents and refinement are each on or off.
- A trial is one item under one model and one policy; its :class:`TrialResult`
  is one line of ``results.jsonl``, written as it finishes.

A suite is anything with ``name``, ``items(lengths, n, seed)`` and
``score(item, answer)`` (:class:`Suite`); built-in ones live in
:mod:`recursa.evals.suites`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from recursa.errors import UsageError
from recursa.protocol.wire import UsageNode

Mode = Literal["repl", "context"]
MODES: tuple[Mode, ...] = ("repl", "context")

TrialStatus = Literal["ok", "limit", "error"]
"""``ok``: the model answered (right or wrong); ``limit``: a per-trial limit
(tokens, cost, time, steps) ended it; ``error``: the session ended its turn
without an answer (a provider error, a stuck model), or the suite could not
score the answer. Every status is scored: an unanswered trial scores 0. (A
trial the runner could not run at all, its daemon unreachable, is not a
result: ``--resume`` runs it again.)"""

RESULTS_FILE = "results.jsonl"
PLAN_FILE = "plan.json"


@dataclass(frozen=True, slots=True)
class Item:
    """One question. ``question`` is what the agent is asked; ``context`` the
    material it must read (empty for a suite without one); ``prompt`` the whole
    text a ``context``-mode trial gets (the material and the question in the
    suite's own template); ``references`` what a right answer holds."""

    id: str
    task: str
    question: str
    context: str
    prompt: str
    references: tuple[str, ...]
    metric: str
    length: int = 0
    """The target length of the whole prompt in tokens (0: the item's own)."""
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Suite(Protocol):
    """A suite of items and its scoring. ``items`` is deterministic given its
    arguments; ``lengths`` is ignored by a suite whose items have their own."""

    name: str

    def items(self, lengths: Sequence[int], n: int, seed: int) -> list[Item]: ...

    def score(self, item: Item, answer: str | None) -> float: ...


def metrics_of(suite: Suite, item: Item, answer: str | None) -> dict[str, float]:
    """Every metric a suite gives an answer: its ``scores(item, answer)`` when it
    has one (HotpotQA and SQuAD: exact match and F1), else its one score, named
    by the item's metric."""
    scores = getattr(suite, "scores", None)
    if callable(scores):
        return {str(k): float(v) for k, v in scores(item, answer).items()}
    return {item.metric: float(suite.score(item, answer))}


@dataclass(frozen=True, slots=True)
class Policy:
    mode: Mode = "repl"
    compaction: bool = True
    subagents: bool = True
    refine: bool = False

    @property
    def label(self) -> str:
        """Short and stable: ``repl``, ``context-nocompact+refine``, ..."""
        parts: list[str] = [self.mode]
        if not self.compaction:
            parts.append("-nocompact")
        if not self.subagents:
            parts.append("-nosub")
        if self.refine:
            parts.append("+refine")
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class TrialResult:
    """One finished trial: a line of ``results.jsonl``. Tokens, cost and
    sub-agents are the whole session tree's; ``wall_s`` is from the session's
    creation to its tree going quiet (refinement included, when on)."""

    trial: str
    """``MODEL|POLICY|ITEM``: unique in a run, what ``--resume`` skips."""
    suite: str
    item: str
    task: str
    length: int
    model: str
    policy: str
    """:attr:`Policy.label`."""
    seed: int
    score: float
    status: TrialStatus
    answer: str | None
    references: tuple[str, ...]
    metric: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    calls: int = 0
    wall_s: float = 0.0
    subagents: int = 0
    session: str = ""
    detail: str = ""
    finished_at: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    """Every metric of the answer (``score`` is the suite's primary one)."""

    @property
    def config(self) -> str:
        """The configuration a report groups by: ``MODEL · POLICY``."""
        return f"{self.model} · {self.policy}"

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def trial_key(model: str, policy: Policy, item: Item) -> str:
    return f"{model}|{policy.label}|{item.id}"


_FIELDS = frozenset(f.name for f in fields(TrialResult))


def result_to_json(result: TrialResult) -> str:
    return json.dumps(asdict(result), ensure_ascii=False, sort_keys=True)


def result_from_dict(raw: object) -> TrialResult:
    """A result from its JSON object; unknown keys (a newer writer's) are
    ignored. Not an object, or missing a field: ``ValueError``."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    values = {k: v for k, v in raw.items() if k in _FIELDS}
    values["references"] = tuple(values.get("references") or ())
    values["metrics"] = dict(values.get("metrics") or {})
    return TrialResult(**values)


def append_result(path: Path, result: TrialResult) -> None:
    """Append one line and make it durable before returning: a crash after
    this keeps the trial. A line torn by an earlier crash (no line break at
    the end of the file) is ended first, so it stays one bad line that
    :func:`read_results` skips rather than swallowing this one."""
    line = result_to_json(result) + "\n"
    if _ends_torn(path):
        line = "\n" + line
    with path.open("a", encoding="utf-8") as stream:
        stream.write(line)
        stream.flush()
        os.fsync(stream.fileno())


def _ends_torn(path: Path) -> bool:
    try:
        with path.open("rb") as stream:
            if stream.seek(0, os.SEEK_END) == 0:
                return False
            stream.seek(-1, os.SEEK_END)
            return stream.read(1) != b"\n"
    except FileNotFoundError:
        return False


def read_results(path: Path) -> list[TrialResult]:
    """Every whole line of a ``results.jsonl`` (or of the one in a directory).
    A line that is not JSON (torn by a crash mid-write) is skipped; JSON that
    is not a trial result is a :class:`UsageError` naming its line number."""
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise UsageError(f"{path}: no such results file")
    results: list[TrialResult] = []
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError:
            continue  # torn by a crash while it was written: that trial runs again
        try:
            results.append(result_from_dict(raw))
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path}:{number}: not a trial result ({exc})") from None
    return results


def descendants(node: UsageNode) -> int:
    """The sessions below ``node`` in a usage tree: a trial's sub-agents."""
    return sum(1 + descendants(child) for child in node.children)


def iter_groups(
    results: Sequence[TrialResult], *keys: str
) -> Iterator[tuple[tuple[Any, ...], list[TrialResult]]]:
    """Results grouped by the named attributes, in first-seen order."""
    groups: dict[tuple[Any, ...], list[TrialResult]] = {}
    for result in results:
        groups.setdefault(tuple(getattr(result, key) for key in keys), []).append(result)
    yield from groups.items()

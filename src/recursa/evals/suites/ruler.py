"""RULER's synthetic tasks, generated offline by RULER's own scripts.

The scripts ship in ``nvidia-long-context-eval`` (Apache-2.0). Each
generation runs one script in a fresh subprocess
(:mod:`recursa.evals.suites._generate`) with the arguments RULER's
``prepare.py`` would give it: the task's entry in the package's
``synthetic.yaml``, the task family's ``tokens_to_generate`` and template
(the ``base`` model template plus the answer prefix) from its
``constants.py``, ``--max_seq_length`` the target length and
``--random_seed`` the run's seed. Items are sized with
:func:`recursa.evals.tokens.load_tokenizer`.

``n`` is the number of items per length for the whole suite, dealt over its
tasks in order (the first tasks take the remainder; a task dealt none is not
generated): ``--n 10`` means ten items per length, whether the suite has one
task or thirteen.

Generated items are cached as JSON lines under ``CACHE/ruler/``, one file
per task, length, count, seed and tokenizer, so a rerun or ``--resume``
reads them back instead of generating again.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recursa.errors import UsageError
from recursa.evals import scoring
from recursa.evals.suites._generate import Request
from recursa.evals.tokens import Tokenizer, load_tokenizer
from recursa.evals.trials import Item

INSTALL_HINT = (
    "RULER's generators are not installed: "
    "pip install --no-deps nvidia-long-context-eval==26.3 (and the evals extra: "
    "pip install 'recursa[evals]')"
)

NIAH = (
    "niah_single_1",
    "niah_single_2",
    "niah_single_3",
    "niah_multikey_1",
    "niah_multikey_2",
    "niah_multikey_3",
    "niah_multivalue",
    "niah_multiquery",
)
TASKS = (*NIAH, "vt", "cwe", "fwe", "qa_1", "qa_2")

SUITES: dict[str, tuple[str, ...]] = {
    # The three single-needle tasks: one fact to find in essays or filler,
    # the retrieval baseline RULER starts from. They fit a small local model
    # at 4k-8k; the multi-key/value/query variants are in ruler-niah-all.
    "ruler-niah": NIAH[:3],
    "ruler-niah-all": NIAH,
    "ruler-vt": ("vt",),
    "ruler-cwe": ("cwe",),
    "ruler-fwe": ("fwe",),
    "ruler-qa": ("qa_1", "qa_2"),
    "ruler": TASKS,
}

Progress = Callable[[str], None]
"""Told, in a line, what a suite is generating (it may take a minute); called
from the threads that wait for the generators, so it must be thread-safe."""

METRIC_OF_FAMILY: dict[str, scoring.Metric] = {"qa": "string_match_part"}
_CACHE_FORMAT = 1


def package_dir() -> Path:
    """Where ``long_context_eval`` is installed (imported by name: it has no types)."""
    try:
        package = importlib.import_module("long_context_eval")
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return Path(str(package.__file__)).parent


@dataclass(frozen=True, slots=True)
class TaskConfig:
    """RULER's configuration of one task: its ``synthetic.yaml`` entry and
    its family's constants (``constants.py``)."""

    family: str
    """The generator script: ``niah``, ``variable_tracking``, ``qa`` ..."""
    args: tuple[tuple[str, str], ...]
    """The script's task arguments, e.g. ``("type_haystack", "essay")``."""
    tokens_to_generate: int
    template: str
    """The ``base`` model template: the task template and the answer prefix."""


def task_config(task: str) -> TaskConfig:
    """RULER's configuration of ``task``, read from the installed package."""
    yaml = importlib.import_module("yaml")  # RULER's config format; PyYAML comes with Jupyter
    package_dir()
    families = importlib.import_module("long_context_eval.data.synthetic.constants").TASKS
    configs = yaml.safe_load((package_dir() / "synthetic.yaml").read_text(encoding="utf-8"))
    if task not in configs:
        raise UsageError(f"unknown RULER task {task!r} (known: {', '.join(TASKS)})")
    entry = configs[task]
    family = families[entry["task"]]
    return TaskConfig(
        family=str(entry["task"]),
        args=tuple((str(k), str(v)) for k, v in entry["args"].items()),
        tokens_to_generate=int(family["tokens_to_generate"]),
        template=str(family["template"]) + str(family.get("answer_prefix", "")),
    )


def generator_argv(task: str, length: int, n: int, seed: int, save_dir: Path) -> list[str]:
    """The arguments ``prepare.py`` gives the task's script (tokenizer ones
    are placeholders: the generator process puts ours in its place)."""
    config = task_config(task)
    argv = [
        "--save_dir", str(save_dir),
        "--save_name", task,
        "--subset", "validation",
        "--tokenizer_path", "recursa",
        "--tokenizer_type", "recursa",
        "--max_seq_length", str(length),
        "--tokens_to_generate", str(config.tokens_to_generate),
        "--num_samples", str(n),
        "--random_seed", str(seed),
        "--template", config.template,
    ]  # fmt: skip
    for key, value in config.args:
        argv += [f"--{key}", value]
    return argv


def generate(
    task: str, length: int, n: int, seed: int, tokenizer: Tokenizer, *, timeout: float = 600.0
) -> list[Item]:
    """``n`` fresh items of ``task`` at ``length`` tokens (no cache)."""
    if length <= 0:
        raise UsageError(f"RULER task {task} needs a length in tokens (e.g. --lengths 4k)")
    config = task_config(task)
    script = package_dir() / "data" / "synthetic" / f"{config.family}.py"
    with tempfile.TemporaryDirectory(prefix="recursa-ruler-") as tmp:
        work = Path(tmp)
        request = Request(
            script=str(script),
            argv=tuple(generator_argv(task, length, n, seed, work)),
            save_dir=str(work),
            save_name=task,
            tokenizer=tokenizer.spec,
            out=str(work / "items.jsonl"),
        )
        (work / "request.json").write_text(request.to_json(), encoding="utf-8")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [
            sys.executable,
            "-m",
            "recursa.evals.suites._generate",
            str(work / "request.json"),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=env, cwd=work, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            # RULER's scripts loop for ever when not even one document or
            # haystack unit fits the length (qa below about 2k tokens).
            raise UsageError(
                f"generating RULER {task} at {length} tokens did not finish in {timeout:.0f} s "
                "(is the length too short for the task?)"
            ) from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"generating RULER {task} at {length} tokens failed: {last}")
        lines = (work / "items.jsonl").read_text(encoding="utf-8").splitlines()
    return [_item(task, config.family, length, seed, tokenizer, json.loads(line)) for line in lines]


def _item(
    task: str, family: str, length: int, seed: int, tokenizer: Tokenizer, raw: dict[str, Any]
) -> Item:
    prompt: str = raw["input"]
    start, end = raw["context_start"], raw["context_end"]
    context = prompt[start:end]
    before, after = prompt[:start].rstrip(), prompt[end:].lstrip()
    references = tuple(str(r) for r in raw["outputs"])
    meta: dict[str, Any] = {
        "seed": seed,
        "tokenizer": tokenizer.name,
        "tokens": tokenizer.count(prompt),
        "context_span": [start, end],
        "source": "RULER (nvidia-long-context-eval)",
    }
    if family == "niah" and references and references[0] in context:
        meta["depth"] = round(context.index(references[0]) / max(1, len(context)), 3)
    return Item(
        id=f"{task}/{length}/{raw['index']}",
        task=task,
        question=f"{before}\n\n{after}" if before else after,
        context=context,
        prompt=prompt,
        references=references,
        metric=METRIC_OF_FAMILY.get(family, "string_match_all"),
        length=length,
        meta=meta,
    )


def deal(tasks: Sequence[str], n: int) -> list[tuple[str, int]]:
    """``n`` items dealt over ``tasks`` in order; tasks dealt none are left out."""
    share, extra = divmod(n, len(tasks))
    counts = [(task, share + (1 if i < extra else 0)) for i, task in enumerate(tasks)]
    return [(task, count) for task, count in counts if count > 0]


@dataclass
class RulerSuite:
    """A :class:`~recursa.evals.trials.Suite` of RULER tasks."""

    name: str
    tasks: tuple[str, ...]
    cache_dir: Path | None = None
    """Where generated items are kept (``None``: ``$RECURSA_HOME/evals/cache``)."""
    tokenizer: Tokenizer | None = None
    progress: Progress | None = None
    """Told what is being generated (not what is read from the cache)."""

    def items(self, lengths: Sequence[int], n: int, seed: int) -> list[Item]:
        package_dir()
        if not lengths:
            raise UsageError(f"{self.name} needs lengths in tokens (e.g. --lengths 4k,8k)")
        tokenizer = self.tokenizer or load_tokenizer()
        cache = self.cache_dir or default_cache()
        jobs = [(task, length, count) for length in lengths for task, count in deal(self.tasks, n)]
        # Each generation is a subprocess that mostly computes on its own
        # (niah builds a 6-million-word list first): run as many as there are cores.
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ruler") as pool:
            batches = pool.map(
                lambda j: self._cached(cache, j[0], j[1], j[2], seed, tokenizer), jobs
            )
            return [item for batch in batches for item in batch]

    def score(self, item: Item, answer: str | None) -> float:
        return scoring.score(item.metric, answer, item.references)  # type: ignore[arg-type]

    def _cached(
        self, cache: Path, task: str, length: int, n: int, seed: int, tok: Tokenizer
    ) -> list[Item]:
        path = cache / "ruler" / f"{task}-{length}-n{n}-s{seed}-{tok.name}-v{_CACHE_FORMAT}.jsonl"
        if path.is_file():
            return read_items(path)
        if self.progress is not None:
            self.progress(f"generating RULER {task} at {length} tokens ({count_items(n)})")
        items = generate(task, length, n, seed, tok)
        write_items(path, items)
        return items


def default_cache() -> Path:
    from recursa.config import load_config

    return load_config().home / "evals" / "cache"


def write_items(path: Path, items: Sequence[Item]) -> None:
    """Items as JSON lines, written to a temporary name and renamed into place."""
    from dataclasses import asdict

    from recursa.files import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(asdict(i), ensure_ascii=False, sort_keys=True) + "\n" for i in items)
    write_atomic(path, text.encode("utf-8"), mode=0o644)


def read_items(path: Path) -> list[Item]:
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        raw["references"] = tuple(raw["references"])
        items.append(Item(**raw))
    return items


def count_items(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"

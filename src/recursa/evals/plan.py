"""The plan of an evaluation run: what ``recursa eval run`` was asked.

A plan comes from the command line or from a TOML file, and is written to
``DIR/plan.json`` when the run starts; ``--resume DIR`` reads it back, so a
resumed run is the same run. A TOML plan::

    suite = "ruler-niah"          # a built-in suite, or a module (pkg.mod, pkg.mod:attr, file.py)
    models = ["local/default"]
    lengths = ["4k", "8k"]        # tokens; k = 1024
    n = 10
    seed = 0
    concurrency = 1

    [limits]                      # per trial, over its whole session tree
    tokens = 200000
    cost = 0.50
    time = "10m"
    steps = 30

    [[policy]]                    # one table per policy (default: one repl policy)
    mode = "repl"
    [[policy]]
    mode = "context"
    compaction = false
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recursa.config import parse_duration
from recursa.errors import ConfigError, UsageError
from recursa.evals.trials import MODES, PLAN_FILE, Policy

PLAN_VERSION = 1
DEFAULT_TRIAL_TIME = 600.0
"""A trial's wall clock when no limit is given: an evaluation must end."""
_LENGTH = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([km]?)\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TrialLimits:
    """Per trial, over its whole session tree; None: no limit (time: the default)."""

    tokens: int | None = None
    cost: float | None = None
    time: float = DEFAULT_TRIAL_TIME
    steps: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    suite: str
    models: tuple[str, ...]
    policies: tuple[Policy, ...] = (Policy(),)
    lengths: tuple[int, ...] = ()
    n: int = 10
    seed: int = 0
    limits: TrialLimits = field(default_factory=TrialLimits)
    concurrency: int = 1

    def __post_init__(self) -> None:
        if not self.models:
            raise UsageError("an evaluation needs a model (--model)")
        if not self.policies:
            raise UsageError("an evaluation needs a policy (--mode)")
        if self.n < 1:
            raise UsageError("--n must be at least 1")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        limits = self.limits
        if limits.time <= 0:
            raise UsageError("a trial's time limit must be more than 0 seconds")
        for name, value in (("tokens", limits.tokens), ("steps", limits.steps)):
            if value is not None and value < 1:
                raise UsageError(f"a trial's {name} limit must be at least 1")
        if limits.cost is not None and limits.cost <= 0:
            raise UsageError("a trial's cost limit must be more than 0")
        labels = [p.label for p in self.policies]
        if len(set(labels)) != len(labels):
            raise UsageError(f"the same policy is given twice: {', '.join(labels)}")

    def to_json(self) -> str:
        return json.dumps({"version": PLAN_VERSION, **asdict(self)}, indent=2)


def parse_length(text: str) -> int:
    """Tokens from ``4k``, ``8K``, ``1.5k``, ``1m`` or ``4096`` (k = 1024)."""
    match = _LENGTH.fullmatch(str(text))
    if not match:
        raise UsageError(f"not a length in tokens: {text!r} (e.g. 4k, 8192)")
    number, unit = float(match.group(1)), match.group(2).lower()
    tokens = int(number * {"": 1, "k": 1024, "m": 1024 * 1024}[unit])
    if tokens < 1:
        raise UsageError(f"not a length in tokens: {text!r}")
    return tokens


def parse_lengths(values: list[str] | None) -> tuple[int, ...]:
    """``--lengths 4k,8k`` (repeatable, comma-separated), sorted, without repeats."""
    found = {parse_length(part) for value in values or () for part in value.split(",") if part}
    return tuple(sorted(found))


def policy_from(raw: dict[str, Any]) -> Policy:
    unknown = set(raw) - {"mode", "compaction", "subagents", "refine"}
    if unknown:
        raise UsageError(f"policy: unknown key {sorted(unknown)[0]!r}")
    mode = raw.get("mode", "repl")
    if mode not in MODES:
        raise UsageError(f"policy: mode must be one of {', '.join(MODES)}, not {mode!r}")
    flags = {}
    for key in ("compaction", "subagents", "refine"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise UsageError(f"policy: {key} must be true or false")
            flags[key] = raw[key]
    return Policy(mode=mode, **flags)


def read_plan_file(path: Path) -> Plan:
    """A plan from a TOML file; a bad key or value is one line naming it."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    try:
        return _plan(raw, toml=True)
    except (UsageError, ConfigError) as exc:
        raise UsageError(f"{path}: {exc}") from None


def read_saved_plan(out: Path) -> Plan:
    """The plan a run wrote to ``DIR/plan.json`` (for ``--resume DIR``)."""
    path = out / PLAN_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{out}: not an evaluation directory (no {PLAN_FILE})") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable ({exc})") from None
    if not isinstance(raw, dict) or raw.get("version") != PLAN_VERSION:
        raise UsageError(f"{path}: not a plan this recursa writes")
    return _plan(raw, toml=False)


def _plan(raw: dict[str, Any], *, toml: bool) -> Plan:
    known = {"suite", "models", "policy", "policies", "lengths", "n", "seed", "limits"}
    known |= {"concurrency", "version"}
    unknown = set(raw) - known
    if unknown:
        raise UsageError(f"unknown key {sorted(unknown)[0]!r}")
    if not isinstance(raw.get("suite"), str):
        raise UsageError("suite must be a string")
    policies = raw.get("policy" if toml else "policies") or [{}]
    limits = raw.get("limits") or {}
    if not isinstance(policies, list) or not all(isinstance(p, dict) for p in policies):
        raise UsageError("policy must be a list of tables ([[policy]])")
    if not isinstance(limits, dict):
        raise UsageError("limits must be a table")
    lengths = raw.get("lengths") or []
    for key in ("models", "lengths"):
        if not isinstance(raw.get(key, []), list):
            raise UsageError(f"{key} must be a list, e.g. {key} = [...]")
    time = limits.get("time", DEFAULT_TRIAL_TIME)
    cost = limits.get("cost")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)):
        raise UsageError("limits.cost must be a number (USD)")
    return Plan(
        suite=raw["suite"],
        models=tuple(str(m) for m in raw.get("models") or ()),
        policies=tuple(policy_from(p) for p in policies),
        lengths=parse_lengths([str(x) for x in lengths]),
        n=_int(raw.get("n", 10), "n"),
        seed=_int(raw.get("seed", 0), "seed"),
        limits=TrialLimits(
            tokens=_opt_int(limits.get("tokens"), "limits.tokens"),
            cost=None if cost is None else float(cost),
            time=(parse_duration(time, key="limits.time") or DEFAULT_TRIAL_TIME)
            if not isinstance(time, int | float)
            else float(time),
            steps=_opt_int(limits.get("steps"), "limits.steps"),
        ),
        concurrency=_int(raw.get("concurrency", 1), "concurrency"),
    )


def _int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{key} must be a whole number")
    return value


def _opt_int(value: object, key: str) -> int | None:
    return None if value is None else _int(value, key)

"""Each configuration of an evaluation gets a home of its own.

A configuration (a model under a policy) runs its trials in a daemon that
serves ``DIR/homes/<slug>``: a ``RECURSA_HOME`` made for it. Its
``config.toml`` is the person's own (providers, prices, review policies,
kernel settings) with the policy laid over it:

- ``context`` mode: ``[sessions] inline_input_share = 0``, so the material
  stays in the prompt however long it is (``repl`` mode gives it to the kernel
  as the variable ``context`` whatever its length);
- compaction off: ``[sessions] compaction = false``;
- sub-agents off: ``[agents] max_depth = 0`` (``rlm`` is refused);
- ``[local] n_ctx`` large enough for the longest prompt, the same for every
  policy, so that the embedded model's window is not a difference between them.

A home of its own keeps what a trial learns (harness entries, with refinement
on) inside its configuration: the person's harness neither shapes the trials
nor takes their edits, and two configurations never see each other's. A
trial's kernel sees neither the person's home (their daemon's token, their
store) nor the run's homes (``[kernel] hide``): a daemon hides only its own.
The kernels run in a managed environment of the configuration's home, made
without network (the person's is in their hidden home).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recursa.config import CONFIG_FILE_NAME, Config, config_path
from recursa.errors import ConfigError
from recursa.evals.trials import Policy, TrialResult
from recursa.files import write_atomic

HOMES_DIR = "homes"
WORK_DIR = "work"
PROMPT_HEADROOM_TOKENS = 4096
"""Room in the embedded model's window beyond the longest item: the system
prompt, the agent's steps and its answer."""
MAX_N_CTX = 131_072


def config_slug(model: str, policy: Policy) -> str:
    """A directory name for ``model`` under ``policy``: ``local-default__repl``."""
    return f"{_slug(model)}__{_slug(policy.label)}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-") or "x"


def home_for(out: Path, model: str, policy: Policy) -> Path:
    return out / HOMES_DIR / config_slug(model, policy)


def home_of(out: Path, result: TrialResult) -> Path:
    """The home a finished trial ran in (its result names the policy by label)."""
    return out / HOMES_DIR / f"{_slug(result.model)}__{_slug(result.policy)}"


def window_for(lengths: tuple[int, ...], base: int) -> int:
    """The embedded model's ``n_ctx`` for items up to ``max(lengths)`` tokens:
    at least ``base``, a power of two."""
    need = max((*lengths, 0)) + PROMPT_HEADROOM_TOKENS
    if need <= base:
        return base
    return min(MAX_N_CTX, 1 << math.ceil(math.log2(need)))


def overlay(policy: Policy, n_ctx: int, hide: tuple[Path, ...]) -> dict[str, dict[str, Any]]:
    """The settings a policy lays over the person's configuration; ``hide``:
    what the trials' kernels must not see besides their own home."""
    sessions: dict[str, Any] = {"compaction": policy.compaction}
    if policy.mode == "context":
        sessions["inline_input_share"] = 0.0
    tables: dict[str, dict[str, Any]] = {"sessions": sessions, "local": {"n_ctx": n_ctx}}
    if not policy.subagents:
        tables["agents"] = {"max_depth": 0}
    tables["kernel"] = {"hide": [str(path) for path in hide]}
    return tables


def prepare_home(
    out: Path,
    model: str,
    policy: Policy,
    config: Config,
    lengths: tuple[int, ...],
    *,
    source: Path | None = None,
) -> Path:
    """Make (or update) the configuration's home and its ``config.toml``, from
    the person's file (``source``; default the one :func:`load_config` reads).
    It may hold API keys: it is written 0600, as the person's should be."""
    home = home_for(out, model, policy)
    home.mkdir(parents=True, exist_ok=True)
    source = source or config_path()
    try:
        base = tomllib.loads(source.read_text(encoding="utf-8")) if source.is_file() else {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
    hide = (config.home.resolve(), (out / HOMES_DIR).resolve())
    tables = overlay(policy, window_for(lengths, config.local.n_ctx), hide)
    merged = _merge(base, tables)
    kernel = merged["kernel"]
    if kernel.get("python") not in (None, "managed", "project"):
        kernel.pop("python")  # a path may lie in the hidden home: the home makes its own env
    write_atomic(home / CONFIG_FILE_NAME, to_toml(merged).encode("utf-8"), mode=0o600)
    return home


def _merge(base: Mapping[str, Any], tables: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
    for name, values in tables.items():
        table = merged.setdefault(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{CONFIG_FILE_NAME}: {name} must be a table")
        table.update(values)
    return merged


def to_toml(data: Mapping[str, Any]) -> str:
    """TOML for a configuration: top-level keys, then tables (nested ones as
    dotted headers). Values are what a configuration holds: strings, numbers,
    booleans and lists of them."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            _table(lines, [key], value)
    return "\n".join(lines) + "\n"


def _table(lines: list[str], path: list[str], table: Mapping[str, Any]) -> None:
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    if scalars or not table:
        lines.append("")
        lines.append("[" + ".".join(_key(p) for p in path) + "]")
        lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars)
    for key, value in table.items():
        if isinstance(value, dict):
            _table(lines, [*path, key], value)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise ConfigError(f"{CONFIG_FILE_NAME}: cannot write {type(value).__name__} values")

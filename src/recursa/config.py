"""Configuration: the only module that reads ``os.environ``.

Precedence, lowest first: built-in defaults (the named constants below), the
TOML file ``$RECURSA_HOME/config.toml``, environment variables, then command
line flags (applied by the caller with :func:`dataclasses.replace`).

The file, field by field::

    model = "openai/gpt-4o-mini"        # default model when --model is not given

    [providers.openai]                  # also: anthropic, or any name with kind = "openai"
    kind = "openai"                     # "openai" (Chat Completions) or "anthropic"
    base_url = "http://127.0.0.1:8000/v1"
    api_key = "..."                     # better: the environment variable below
    api_key_env = "OPENAI_API_KEY"
    timeout = 600                       # seconds per request
    max_retries = 4                     # extra attempts after a retryable failure

    [prices."openai/gpt-4o-mini"]       # USD per million tokens
    input = 0.15
    output = 0.60
    cached_input = 0.075                # prompt-cache reads
    cache_write = 0.15                  # prompt-cache writes (Anthropic bills these)

    [context_windows]                   # tokens, per model reference
    "openai/my-model" = 32000

    [limits]
    max_steps = 50                      # model calls per run
    max_tokens = 0                      # input + output tokens per run, 0 = no limit
    max_time = "30m"                    # wall clock per run, 0 = no limit
    cell_timeout = "2m"                 # per cell; the kernel is interrupted, then restarted
    output_chars = 8000                 # cell output shown to the model (head + tail)

    [kernel]
    env_allow = ["MY_TOOL_HOME"]        # extra variables a kernel may see
    startup_timeout = 60
    interrupt_grace = "3s"              # an interrupted cell's time to stop before a restart
    max_output_chars = 20000000         # one cell's output held in memory, at least 10000

    [sessions]
    idle_timeout = "30m"                # an idle session is unloaded (snapshot, kernel stopped)
    snapshot_max_mb = 1024              # a namespace snapshot's cap; what does not fit is listed
    checkpoint = "turn"                 # snapshot after every turn that ran cells, or "unload" only
    max_kernels = 64                    # live kernels at most; the longest idle session unloads

    [agents]
    max_depth = 2                       # sub-agents of sub-agents of ...: how deep
    max_message_chars = 65536           # one agent message
    max_pending = 200                   # messages waiting for one session
    messages_per_minute = 120           # one session's send rate

    [harness]
    review_skill = "human"              # the gate for global entries: "human", "model" or "none"
    review_prompt_note = "model"
    review_memory = "model"
    review_subagent_spec = "model"
    reviewer_model = ""                 # "" = the proposing session's model
    max_prompt_chars = 6000             # the supplemental prompt's bound

    [local]
    n_ctx = 8192                        # context length for embedded models
    threads = 0                         # 0 = all cores
    models_dir = "~/.cache/recursa/models"  # joined, verified weights (the default)

Provider credentials (any ``api_key`` and the variables named by
``api_key_env``) never reach a kernel: :func:`kernel_environment` builds the
kernel's environment from an allow-list and then removes every credential by
name and by value.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from recursa.errors import ConfigError

ProviderKind = Literal["openai", "anthropic"]

DEFAULT_HOME = Path("~/.recursa")
CONFIG_FILE_NAME = "config.toml"

DEFAULT_MAX_STEPS = 50
DEFAULT_CELL_TIMEOUT = 120.0
DEFAULT_OUTPUT_CHARS = 8000
DEFAULT_PROVIDER_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 4
DEFAULT_KERNEL_STARTUP_TIMEOUT = 60.0
DEFAULT_KERNEL_INTERRUPT_GRACE = 3.0
DEFAULT_KERNEL_MAX_OUTPUT_CHARS = 20_000_000
MIN_KERNEL_MAX_OUTPUT_CHARS = 10_000
DEFAULT_LOCAL_N_CTX = 8192
DEFAULT_IDLE_TIMEOUT = 30 * 60.0
DEFAULT_MAX_DEPTH = 2
DEFAULT_MAX_MESSAGE_CHARS = 65536
DEFAULT_MAX_PENDING = 200
DEFAULT_MESSAGES_PER_MINUTE = 120
DEFAULT_SNAPSHOT_MAX_MB = 1024
DEFAULT_MAX_KERNELS = 64

KERNEL_ENV_ALLOW: frozenset[str] = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "COLUMNS",
        "LINES",
        "NO_COLOR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "JUPYTER_PLATFORM_DIRS",
    }
)
"""Variables a kernel inherits by default (plus every ``LC_*``). Anything else
must be named in ``[kernel] env_allow``."""

_CREDENTIAL_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)

_BUILTIN_PROVIDERS: dict[str, tuple[ProviderKind, str, str]] = {
    # name: (kind, api key variable, base url variable)
    "openai": ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """How to reach one HTTP provider. ``api_key`` is a secret: never logged."""

    name: str
    kind: ProviderKind
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    timeout: float = DEFAULT_PROVIDER_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. ``cached_input`` (prompt-cache reads) defaults to
    ``input``; ``cache_write`` (prompt-cache writes) to the provider's rule."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-run limits. ``None`` means no limit."""

    max_steps: int | None = DEFAULT_MAX_STEPS
    max_tokens: int | None = None
    max_time: float | None = None
    cell_timeout: float = DEFAULT_CELL_TIMEOUT
    output_chars: int = DEFAULT_OUTPUT_CHARS


@dataclass(frozen=True, slots=True)
class KernelConfig:
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    startup_timeout: float = DEFAULT_KERNEL_STARTUP_TIMEOUT
    interrupt_grace: float = DEFAULT_KERNEL_INTERRUPT_GRACE
    max_output_chars: int = DEFAULT_KERNEL_MAX_OUTPUT_CHARS


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """Session lifecycle in a daemon. ``idle_timeout`` None: never unload."""

    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    snapshot_max_bytes: int = DEFAULT_SNAPSHOT_MAX_MB << 20
    checkpoint_each_turn: bool = True
    max_kernels: int = DEFAULT_MAX_KERNELS


@dataclass(frozen=True, slots=True)
class AgentsConfig:
    """Sub-agents and the messages between agents."""

    max_depth: int = DEFAULT_MAX_DEPTH
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    max_pending: int = DEFAULT_MAX_PENDING
    messages_per_minute: int = DEFAULT_MESSAGES_PER_MINUTE


ReviewPolicy = Literal["human", "model", "none"]
REVIEW_POLICIES: tuple[ReviewPolicy, ...] = ("human", "model", "none")
DEFAULT_HARNESS_PROMPT_CHARS = 6000


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """The Continual Harness: the review gate for global entries, per kind
    (a local entry needs no review), and the supplemental prompt's bound."""

    review: Mapping[str, ReviewPolicy] = field(
        default_factory=lambda: {
            "skill": "human",
            "prompt_note": "model",
            "memory": "model",
            "subagent_spec": "model",
        }
    )
    reviewer_model: str | None = None
    max_prompt_chars: int = DEFAULT_HARNESS_PROMPT_CHARS

    def policy(self, kind: str) -> ReviewPolicy:
        return self.review.get(kind, "human")


@dataclass(frozen=True, slots=True)
class LocalConfig:
    n_ctx: int = DEFAULT_LOCAL_N_CTX
    threads: int = 0
    models_dir: Path = Path("~/.cache/recursa/models")


@dataclass(frozen=True, slots=True)
class Config:
    """Everything recursa reads from the outside world, resolved once."""

    home: Path
    model: str | None = None
    providers: Mapping[str, ProviderConfig] = field(default_factory=dict)
    prices: Mapping[str, Price] = field(default_factory=dict)
    context_windows: Mapping[str, int] = field(default_factory=dict)
    limits: Limits = Limits()
    kernel: KernelConfig = KernelConfig()
    sessions: SessionsConfig = SessionsConfig()
    agents: AgentsConfig = AgentsConfig()
    harness: HarnessConfig = HarnessConfig()
    local: LocalConfig = LocalConfig()

    @property
    def secrets(self) -> frozenset[str]:
        """Every credential value configured, for scrubbing."""
        return frozenset(p.api_key for p in self.providers.values() if p.api_key)


def parse_duration(value: object, *, key: str) -> float | None:
    """``"90s"``, ``"30m"``, ``"2h"``, ``"1d"`` or a number of seconds; 0 means no limit."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like '30m', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
        if not match:
            raise ConfigError(
                f"{key}: expected a duration like '90s', '30m' or '2h', got {value!r}"
            )
        unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        seconds = float(match.group(1)) * unit
    else:
        raise ConfigError(f"{key}: expected a duration like '30m', got {value!r}")
    if seconds < 0:
        raise ConfigError(f"{key}: a duration cannot be negative")
    return seconds or None


def environment() -> dict[str, str]:
    """A copy of this process's environment, to start a child process (the daemon)
    with; the caller decides what to leave out."""
    return dict(os.environ)


def debug_enabled() -> bool:
    """``RECURSA_DEBUG=1``: show tracebacks of internal errors."""
    return os.environ.get("RECURSA_DEBUG", "") not in ("", "0")


def color_enabled(stream: TextIO) -> bool:
    """Whether to color output on ``stream``: a terminal, and NO_COLOR unset."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def load_config(
    env: Mapping[str, str] | None = None,
    *,
    file: Path | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Resolve the configuration from defaults, the TOML file and the environment.

    ``env`` defaults to ``os.environ``; ``overrides`` are laid over it (tests
    use them to point RECURSA_HOME elsewhere). A malformed file or value
    raises :class:`ConfigError` naming the key.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if overrides:
        environ = {**environ, **overrides}
    home = Path(environ.get("RECURSA_HOME") or DEFAULT_HOME).expanduser()
    path = file or Path(environ.get("RECURSA_CONFIG") or home / CONFIG_FILE_NAME).expanduser()
    data = _read_toml(path)
    known = {
        "model",
        "providers",
        "prices",
        "context_windows",
        "limits",
        "kernel",
        "sessions",
        "local",
    }
    for key in data:
        if key not in known:
            raise ConfigError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(known))})")

    providers = _providers(_table(data, "providers", path), environ, path)
    kernel_table = _table(data, "kernel", path)
    _check_keys(
        kernel_table,
        {"env_allow", "startup_timeout", "interrupt_grace", "max_output_chars"},
        "kernel",
        path,
    )
    allow = kernel_table.get("env_allow", [])
    if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
        raise ConfigError(f"{path}: kernel.env_allow must be a list of variable names")
    startup = parse_duration(
        kernel_table.get("startup_timeout", DEFAULT_KERNEL_STARTUP_TIMEOUT),
        key="kernel.startup_timeout",
    )
    # No grace would be no limit: a cell that ignores its interrupt would never end.
    grace = parse_duration(
        kernel_table.get("interrupt_grace", DEFAULT_KERNEL_INTERRUPT_GRACE),
        key="kernel.interrupt_grace",
    )
    if grace is None:
        raise ConfigError(f"{path}: kernel.interrupt_grace must be longer than 0")
    max_output = kernel_table.get("max_output_chars", DEFAULT_KERNEL_MAX_OUTPUT_CHARS)
    if (
        isinstance(max_output, bool)
        or not isinstance(max_output, int)
        or max_output < MIN_KERNEL_MAX_OUTPUT_CHARS
    ):
        raise ConfigError(
            f"{path}: kernel.max_output_chars must be an integer of at least "
            f"{MIN_KERNEL_MAX_OUTPUT_CHARS}"
        )
    return Config(
        home=home,
        model=environ.get("RECURSA_MODEL") or _opt_str(data, "model", path),
        providers=providers,
        prices=_prices(_table(data, "prices", path), path),
        context_windows=_context_windows(_table(data, "context_windows", path), path),
        limits=_limits(_table(data, "limits", path), path),
        kernel=KernelConfig(
            env=kernel_environment(environ, extra_allow=allow, providers=providers.values()),
            startup_timeout=startup or DEFAULT_KERNEL_STARTUP_TIMEOUT,
            interrupt_grace=grace,
            max_output_chars=max_output,
        ),
        sessions=_sessions(_table(data, "sessions", path), path),
        agents=_agents(_table(data, "agents", path), path),
        harness=_harness(_table(data, "harness", path), path),
        local=_local(_table(data, "local", path), _cache_dir(environ), path),
    )


def kernel_environment(
    environ: Mapping[str, str],
    *,
    extra_allow: list[str] | tuple[str, ...] = (),
    providers: Iterable[ProviderConfig] = (),
) -> dict[str, str]:
    """The environment a kernel starts with: an allow-list, minus every credential.

    A variable passes if it is allow-listed (or ``LC_*``) and neither its name
    looks like a credential nor its value equals a configured credential.
    Provider key variables are refused even when allow-listed by hand.
    """
    providers = tuple(providers)
    secret_values = {p.api_key for p in providers if p.api_key}
    secret_names = {p.api_key_env for p in providers if p.api_key_env}
    secret_names |= {spec[1] for spec in _BUILTIN_PROVIDERS.values()}
    allowed = KERNEL_ENV_ALLOW | set(extra_allow)
    out: dict[str, str] = {}
    for name, value in environ.items():
        if not (name in allowed or name.startswith("LC_")):
            continue
        if name in secret_names or value in secret_values:
            continue
        if _CREDENTIAL_NAME.search(name) and name not in extra_allow:
            continue
        out[name] = value
    out.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    out["PYTHONUNBUFFERED"] = "1"
    return out


def _cache_dir(environ: Mapping[str, str]) -> Path:
    """Where verified model weights live: shared by every RECURSA_HOME of the user,
    since a file is used only after its sha256 matched (``$XDG_CACHE_HOME/recursa``)."""
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base).expanduser() / "recursa"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def _table(data: Mapping[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {key} must be a table")
    return value


def _check_keys(table: Mapping[str, Any], known: set[str], where: str, path: Path) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(
                f"{path}: unknown key {where}.{key} (known: {', '.join(sorted(known))})"
            )


def _opt_str(table: Mapping[str, Any], key: str, path: Path, where: str = "") -> str | None:
    value = table.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{path}: {where}{key} must be a string")


def _number(table: Mapping[str, Any], key: str, default: float, path: Path, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{path}: {where}{key} must be a non-negative number")
    return float(value)


def _providers(
    table: dict[str, Any], environ: Mapping[str, str], path: Path
) -> dict[str, ProviderConfig]:
    names = set(table) | set(_BUILTIN_PROVIDERS)
    out: dict[str, ProviderConfig] = {}
    for name in sorted(names):
        raw = table.get(name, {})
        where = f"providers.{name}."
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: providers.{name} must be a table")
        _check_keys(
            raw,
            {"kind", "base_url", "api_key", "api_key_env", "timeout", "max_retries"},
            f"providers.{name}",
            path,
        )
        builtin = _BUILTIN_PROVIDERS.get(name)
        kind = raw.get("kind", builtin[0] if builtin else None)
        if kind not in ("openai", "anthropic"):
            raise ConfigError(f"{path}: {where}kind must be 'openai' or 'anthropic'")
        key_env = _opt_str(raw, "api_key_env", path, where) or (builtin[1] if builtin else None)
        base_url = _opt_str(raw, "base_url", path, where)
        api_key = _opt_str(raw, "api_key", path, where)
        if builtin:
            base_url = environ.get(builtin[2]) or base_url
        if key_env and environ.get(key_env):
            api_key = environ[key_env]
        retries = _number(raw, "max_retries", DEFAULT_MAX_RETRIES, path, where)
        timeout = _number(raw, "timeout", DEFAULT_PROVIDER_TIMEOUT, path, where)
        if timeout <= 0:
            raise ConfigError(f"{path}: {where}timeout must be a positive number of seconds")
        out[name] = ProviderConfig(
            name=name,
            kind=kind,
            base_url=base_url,
            api_key=api_key,
            api_key_env=key_env,
            timeout=timeout,
            max_retries=int(retries),
        )
    return out


def _prices(table: dict[str, Any], path: Path) -> dict[str, Price]:
    out: dict[str, Price] = {}
    for model, raw in table.items():
        where = f'prices."{model}".'
        if not isinstance(raw, dict):
            raise ConfigError(f'{path}: prices."{model}" must be a table')
        _check_keys(
            raw, {"input", "output", "cached_input", "cache_write"}, f'prices."{model}"', path
        )
        if "input" not in raw or "output" not in raw:
            raise ConfigError(f"{path}: {where}input and {where}output are required")
        out[model] = Price(
            input=_number(raw, "input", 0, path, where),
            output=_number(raw, "output", 0, path, where),
            cached_input=_number(raw, "cached_input", 0, path, where)
            if "cached_input" in raw
            else None,
            cache_write=_number(raw, "cache_write", 0, path, where)
            if "cache_write" in raw
            else None,
        )
    return out


def _context_windows(table: dict[str, Any], path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for model, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f'{path}: context_windows."{model}" must be a positive integer')
        out[model] = value
    return out


def _limits(table: dict[str, Any], path: Path) -> Limits:
    _check_keys(
        table,
        {"max_steps", "max_tokens", "max_time", "cell_timeout", "output_chars"},
        "limits",
        path,
    )
    steps = _number(table, "max_steps", DEFAULT_MAX_STEPS, path, "limits.")
    tokens = _number(table, "max_tokens", 0, path, "limits.")
    output_chars = _number(table, "output_chars", DEFAULT_OUTPUT_CHARS, path, "limits.")
    if output_chars < 200:
        raise ConfigError(f"{path}: limits.output_chars must be at least 200")
    cell_timeout = parse_duration(
        table.get("cell_timeout", DEFAULT_CELL_TIMEOUT), key="limits.cell_timeout"
    )
    return Limits(
        max_steps=int(steps) or None,
        max_tokens=int(tokens) or None,
        max_time=parse_duration(table.get("max_time", 0), key="limits.max_time"),
        cell_timeout=cell_timeout or DEFAULT_CELL_TIMEOUT,
        output_chars=int(output_chars),
    )


def _sessions(table: dict[str, Any], path: Path) -> SessionsConfig:
    _check_keys(
        table, {"idle_timeout", "snapshot_max_mb", "checkpoint", "max_kernels"}, "sessions", path
    )
    max_kernels = int(_number(table, "max_kernels", DEFAULT_MAX_KERNELS, path, "sessions."))
    if max_kernels < 1:
        raise ConfigError(f"{path}: sessions.max_kernels must be at least 1")
    idle = parse_duration(
        table.get("idle_timeout", DEFAULT_IDLE_TIMEOUT), key="sessions.idle_timeout"
    )
    cap = _number(table, "snapshot_max_mb", DEFAULT_SNAPSHOT_MAX_MB, path, "sessions.")
    checkpoint = table.get("checkpoint", "turn")
    if checkpoint not in ("turn", "unload"):
        raise ConfigError(f"{path}: sessions.checkpoint must be 'turn' or 'unload'")
    return SessionsConfig(
        idle_timeout=idle,
        snapshot_max_bytes=max(1, int(cap)) << 20,
        checkpoint_each_turn=checkpoint == "turn",
        max_kernels=max_kernels,
    )


def _agents(table: dict[str, Any], path: Path) -> AgentsConfig:
    keys = {"max_depth", "max_message_chars", "max_pending", "messages_per_minute"}
    _check_keys(table, keys, "agents", path)
    defaults = AgentsConfig()
    values = {
        key: int(_number(table, key, getattr(defaults, key), path, "agents.")) for key in keys
    }
    if (
        values["max_message_chars"] < 1
        or values["max_pending"] < 1
        or values["messages_per_minute"] < 1
    ):
        raise ConfigError(f"{path}: agents limits must be at least 1")
    return AgentsConfig(**values)


def _harness(table: dict[str, Any], path: Path) -> HarnessConfig:
    kinds = ("skill", "prompt_note", "memory", "subagent_spec")
    keys = {f"review_{k}" for k in kinds} | {"reviewer_model", "max_prompt_chars"}
    _check_keys(table, keys, "harness", path)
    defaults = HarnessConfig()
    review: dict[str, ReviewPolicy] = {}
    for kind in kinds:
        value = table.get(f"review_{kind}", defaults.policy(kind))
        if value not in REVIEW_POLICIES:
            raise ConfigError(
                f"{path}: harness.review_{kind} must be one of {', '.join(REVIEW_POLICIES)},"
                f" not {value!r}"
            )
        review[kind] = value
    reviewer = table.get("reviewer_model", "")
    if not isinstance(reviewer, str):
        raise ConfigError(f"{path}: harness.reviewer_model must be a string")
    chars = int(_number(table, "max_prompt_chars", defaults.max_prompt_chars, path, "harness."))
    if chars < 0:
        raise ConfigError(f"{path}: harness.max_prompt_chars must be at least 0")
    return HarnessConfig(review=review, reviewer_model=reviewer or None, max_prompt_chars=chars)


def _local(table: dict[str, Any], cache: Path, path: Path) -> LocalConfig:
    _check_keys(table, {"n_ctx", "threads", "models_dir"}, "local", path)
    n_ctx = _number(table, "n_ctx", DEFAULT_LOCAL_N_CTX, path, "local.")
    if n_ctx < 512:
        raise ConfigError(f"{path}: local.n_ctx must be at least 512")
    models_dir = _opt_str(table, "models_dir", path, "local.")
    return LocalConfig(
        n_ctx=int(n_ctx),
        threads=int(_number(table, "threads", 0, path, "local.")),
        models_dir=Path(models_dir).expanduser() if models_dir else cache / "models",
    )


__all__ = [
    "AgentsConfig",
    "Config",
    "KernelConfig",
    "Limits",
    "LocalConfig",
    "Price",
    "ProviderConfig",
    "ProviderKind",
    "SessionsConfig",
    "color_enabled",
    "debug_enabled",
    "environment",
    "kernel_environment",
    "load_config",
    "parse_duration",
]

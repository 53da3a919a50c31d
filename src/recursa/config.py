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
    max_retries = 4                     # extra attempts after a retryable failure, at most 20

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
    memory_max = "4G"                   # memory of the kernel and all it starts; 0 = no limit
    max_processes = 256                 # its tasks at once (processes and threads, the
                                        # kernel's own dozen included); 0 = no limit
    sandbox = "bwrap"                   # "bwrap" (Linux default: bubblewrap) or "none"
    network = true                      # false: a sandboxed kernel has no network
    fork_server = true                  # fork kernels from a pre-imported parent (one per
                                        # workspace); false: every kernel is a fresh process
    python = "managed"                  # the kernels' Python: "managed" (a venv recursa owns,
                                        # $RECURSA_HOME/kernel-env), "project" (recursa's own
                                        # interpreter) or an absolute path to one;
                                        # RECURSA_KERNEL_PYTHON overrides it
    hide = []                           # more directories kernels do not see (absolute paths)
    backend = "local"                   # where kernels run: "local" (processes of this host) or
                                        # "gateway" (a Jupyter Kernel/Enterprise Gateway, below);
                                        # `recursa run --kernel-backend`, rlm(task, backend=)
    api = "comm"                        # how kernels reach rlm() and the rest: "comm" (their own
                                        # channels) or "socket" (the daemon's kernel socket)

    [kernel.gateway]                    # kernels behind a Jupyter gateway (backend = "gateway")
    url = "http://127.0.0.1:8888"       # the gateway's base URL
    token_env = "RECURSA_GATEWAY_TOKEN" # the variable holding its token (or token = "...");
                                        # the token stays in the daemon, never in a kernel
    kernel_name = ""                    # the kernelspec to start ("" = the gateway's default);
                                        # its Python must import recursa

    [sessions]
    idle_timeout = "30m"                # an idle session is unloaded (snapshot, kernel stopped)
    snapshot_max_mb = 1024              # a namespace snapshot's cap; what does not fit is listed
    checkpoint = "turn"                 # snapshot after every turn that ran cells, or "unload" only
    max_kernels = 64                    # live kernels at most; the longest idle session unloads
    inline_input_share = 0.5            # an input past this share of the model's window is put
                                        # in the kernel as the variable `context`; 0 = never
    compaction = true                   # false: never compact by itself (a call past the window fails)

    [agents]
    max_depth = 2                       # sub-agents of sub-agents of ...: how deep
    max_children = 64                   # sub-agents of one session not deleted, at most
    max_message_chars = 65536           # one agent message
    max_pending = 200                   # messages waiting for one session
    messages_per_minute = 120           # one session's send rate
    llm_concurrency = 8                 # llm() calls of one session in flight at once

    [harness]
    review_skill = "human"              # who reviews global entries: "human", "model" or "none"
    review_prompt_note = "model"
    review_memory = "model"
    review_subagent_spec = "model"
    reviewer_model = ""                 # "" = the proposing session's model (a fresh call either way)
    max_prompt_chars = 6000             # the supplemental prompt's bound

    [local]
    n_ctx = 8192                        # context length for embedded models
    threads = 0                         # 0 = all cores
    models_dir = "~/.cache/recursa/models"  # joined, verified weights (the default)

Every table and key above is the schema (:class:`ConfigFile`): an unknown key
is an error that lists the known ones, a value of the wrong type or out of its
range (``max_retries`` from 0 to 20, say) is refused in one line naming the
key. Durations (``timeout``, ``max_time``, ``cell_timeout``, ...) are written
as ``"90s"``, ``"1h30m"``, ``"2d"`` or a number of seconds (:mod:`recursa.duration`).
Sizes (``memory_max``) are a number of bytes or a number with a binary unit:
``"512M"``, ``"4G"``, ``"1.5GiB"`` (K, M, G or T, then an optional ``B`` or ``iB``).

Provider credentials (any ``api_key`` and the variables named by
``api_key_env``) never reach a kernel: :func:`kernel_environment` builds the
kernel's environment from an allow-list and then removes every credential by
name and by value.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from recursa import duration
from recursa.duration import Duration
from recursa.environ import color_enabled, debug_enabled, environment, home_dir
from recursa.errors import ConfigError
from recursa.validation import one_line, within

ProviderKind = Literal["openai", "anthropic"]
SandboxKind = Literal["bwrap", "none"]
ApiTransport = Literal["socket", "comm"]
"""How a kernel reaches the kernel API: HTTP over the daemon's kernel socket,
with a token in its environment, or comm messages on its own Jupyter channels
(:mod:`recursa.kernel.relay`)."""
DEFAULT_KERNEL_API: ApiTransport = "comm"
"""How kernels are confined: bubblewrap, or not at all (``[kernel] sandbox``)."""

CONFIG_FILE_NAME = "config.toml"

DEFAULT_MAX_STEPS = 50
DEFAULT_CELL_TIMEOUT = 120.0
DEFAULT_OUTPUT_CHARS = 8000
DEFAULT_PROVIDER_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 4
DEFAULT_KERNEL_STARTUP_TIMEOUT = 60.0
DEFAULT_KERNEL_INTERRUPT_GRACE = 3.0
DEFAULT_KERNEL_MAX_OUTPUT_CHARS = 20_000_000
DEFAULT_KERNEL_SANDBOX: SandboxKind = "bwrap" if sys.platform.startswith("linux") else "none"
DEFAULT_KERNEL_PYTHON = "managed"
DEFAULT_KERNEL_FORK_SERVER = True
KERNEL_PYTHON_NAMES = ("managed", "project")
"""The named ``[kernel] python`` choices; any other value is an absolute path."""
MIN_KERNEL_MAX_OUTPUT_CHARS = 10_000
MIN_KERNEL_MEMORY = 64 << 20
"""The smallest ``[kernel] memory_max``: an idle kernel holds about 50 MB."""
MIN_KERNEL_PROCESSES = 16
"""The smallest ``[kernel] max_processes``: an idle kernel runs about a dozen threads."""
DEFAULT_LOCAL_N_CTX = 8192
DEFAULT_IDLE_TIMEOUT = 30 * 60.0
DEFAULT_MAX_DEPTH = 2
DEFAULT_MAX_CHILDREN = 64
MAX_CHILDREN = 100_000
DEFAULT_MAX_MESSAGE_CHARS = 65536
DEFAULT_MAX_PENDING = 200
DEFAULT_MESSAGES_PER_MINUTE = 120
DEFAULT_LLM_CONCURRENCY = 8
MAX_LLM_CONCURRENCY = 64
DEFAULT_SNAPSHOT_MAX_MB = 1024
DEFAULT_MAX_KERNELS = 64
DEFAULT_INLINE_INPUT_SHARE = 0.5
"""An input past this share of the model's window becomes a kernel variable."""

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


KernelBackend = Literal["local", "gateway"]
KERNEL_BACKENDS: tuple[KernelBackend, ...] = ("local", "gateway")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """``[kernel.gateway]``: a Jupyter Kernel Gateway or Enterprise Gateway.
    ``token`` is a credential (from ``token_env`` or the file): it is scrubbed
    like a provider key and never reaches a kernel."""

    url: str
    token: str = field(default="", repr=False)
    token_env: str | None = None
    kernel_name: str = ""


@dataclass(frozen=True, slots=True)
class KernelConfig:
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    startup_timeout: float = DEFAULT_KERNEL_STARTUP_TIMEOUT
    interrupt_grace: float = DEFAULT_KERNEL_INTERRUPT_GRACE
    max_output_chars: int = DEFAULT_KERNEL_MAX_OUTPUT_CHARS
    memory_max: int | None = None
    """Bytes of memory the kernel and every process it starts may use; None: no limit."""
    max_processes: int | None = None
    """Tasks (processes and threads) the kernel and its descendants may run; None: no limit."""
    sandbox: SandboxKind = DEFAULT_KERNEL_SANDBOX
    """Kernels run under bubblewrap ("bwrap"), or unconfined ("none")."""
    network: bool = True
    """False: a sandboxed kernel gets an empty network namespace."""
    hide: tuple[Path, ...] = ()
    """Directories a sandboxed kernel does not see, besides ``RECURSA_HOME``
    (an evaluation's homes hide the person's home and each other)."""
    python: str = DEFAULT_KERNEL_PYTHON
    """The kernels' interpreter: "managed", "project" or an absolute path
    (``RECURSA_KERNEL_PYTHON`` overrides the file)."""
    fork_server: bool = DEFAULT_KERNEL_FORK_SERVER
    """Kernels are forked from a pre-imported parent (:mod:`recursa.kernel.forkserver`)
    where that works; False: every kernel is launched as a new process."""
    backend: KernelBackend = "local"
    """Where a session's kernel runs unless its run or ``rlm()`` call says otherwise."""
    gateway: GatewayConfig | None = None
    """The Jupyter gateway of the ``gateway`` backend, when one is configured."""
    api: ApiTransport = DEFAULT_KERNEL_API
    """How kernels reach the kernel API: "socket" (the daemon's kernel socket
    and a token in the kernel's environment) or "comm" (the kernel's own
    Jupyter channels; no socket, no token in the kernel)."""


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """Session lifecycle in a daemon. ``idle_timeout`` None: never unload."""

    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    snapshot_max_bytes: int = DEFAULT_SNAPSHOT_MAX_MB << 20
    checkpoint_each_turn: bool = True
    max_kernels: int = DEFAULT_MAX_KERNELS
    inline_input_share: float = DEFAULT_INLINE_INPUT_SHARE
    """An input past this share of the model's context window is put in the
    session's kernel as a variable instead of in the model's context; 0: never."""
    compaction: bool = True
    """False: a context is never compacted by itself; a model call past the
    window fails (an evaluation's "compaction off")."""


@dataclass(frozen=True, slots=True)
class AgentsConfig:
    """Sub-agents and the messages between agents."""

    max_depth: int = DEFAULT_MAX_DEPTH
    max_children: int = DEFAULT_MAX_CHILDREN
    """Sub-agents of one session that are not deleted; deleting one frees its place."""
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    max_pending: int = DEFAULT_MAX_PENDING
    messages_per_minute: int = DEFAULT_MESSAGES_PER_MINUTE
    llm_concurrency: int = DEFAULT_LLM_CONCURRENCY
    """``llm()`` calls of one session in flight at once; the rest wait their turn."""


ReviewPolicy = Literal["human", "model", "none"]
REVIEW_POLICIES: tuple[ReviewPolicy, ...] = ("human", "model", "none")
DEFAULT_HARNESS_PROMPT_CHARS = 6000


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """The Continual Harness: the review of global entries, per kind
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
    """The reviewer's model (None: the proposing session's). Either way a review
    is a fresh call: its own prompt and the entry, none of the session's context."""
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
        keys = {p.api_key for p in self.providers.values() if p.api_key}
        gateway = self.kernel.gateway
        if gateway is not None and gateway.token:
            keys.add(gateway.token)
        return frozenset(keys)


def parse_duration(value: object, *, key: str) -> float | None:
    """Seconds from a duration (:mod:`recursa.duration`: ``"90s"``, ``"1h30m"``,
    ``"2d"`` or a number of seconds) given as ``key`` (a flag or a field);
    0 means no limit (None). :class:`ConfigError` names ``key`` when it is none."""
    try:
        return duration.parse_duration(value) or None
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
MAX_SIZE_CHARS = 40
"""Longer text is refused before it is read: sizes are short."""
MAX_SIZE = 1 << 50
"""The largest size a field accepts (1 PiB): more is a typo."""
MAX_PIDS = 1 << 22
"""The most tasks Linux allows at all (``pid_max``'s ceiling)."""


def parse_size(value: object) -> int:
    """Bytes from a size: a whole number of bytes, or text such as ``"512M"``,
    ``"4G"``, ``"1.5GiB"`` or ``"100000"`` (units are binary: K is 1024).
    ``ValueError`` in one line (a rule starting "must") when it is not a size."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    found = (
        _SIZE.fullmatch(value) if isinstance(value, str) and len(value) <= MAX_SIZE_CHARS else None
    )
    if found is None:
        raise ValueError("must be a size in bytes or with a unit (512M, 4G)")
    return int(float(found[1]) * (1 << _SIZE_SHIFT[found[2].lower()]))


def _zero_or_at_least(low: int, shown: str) -> AfterValidator:
    """A pydantic check that a whole number is 0 (no limit) or at least ``low``
    (``shown`` is how the error writes ``low``)."""

    def check(value: int) -> int:
        if 0 < value < low:
            raise ValueError(f"must be 0 (no limit) or at least {shown}")
        return value

    return AfterValidator(check)


# --- the file's schema: what config.toml may hold, checked once ---------------------

DAY = 86_400.0
YEAR = 366 * DAY
"""The longest time limit, interval or timeout a field accepts: longer is a typo."""
MAX_RETRIES = 20
"""Retries of one model call at most. With the backoff's longest wait (60 s),
20 retries already span many minutes: more only spends a budget on an outage."""
MAX_COUNT = 10**12
"""The largest count a field accepts (tokens per run): more is a typo, not a budget."""
HARNESS_KINDS = ("skill", "prompt_note", "memory", "subagent_spec")

Whole = Annotated[int, within(0, MAX_COUNT)]
Money = Annotated[float, within(0, 1_000_000)]
"""USD per million tokens."""


class _Table(BaseModel):
    """A TOML table: no unknown keys, no coercion (``"5"`` is not 5), frozen."""

    # defer_build: a table's validator is built when a file is first read, not
    # at import (every CLI call imports this module; most never read the file).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class ProviderTable(_Table):
    """``[providers.NAME]``; ``kind`` may be left out for the built-in names."""

    kind: ProviderKind | None = None
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    timeout: Annotated[Duration, within(0, DAY, duration=True, above=True)] = (
        DEFAULT_PROVIDER_TIMEOUT
    )
    max_retries: Annotated[int, within(0, MAX_RETRIES)] = DEFAULT_MAX_RETRIES


class PriceTable(_Table):
    """``[prices."PROVIDER/MODEL"]``."""

    input: Money
    output: Money
    cached_input: Money | None = None
    cache_write: Money | None = None


class LimitsTable(_Table):
    max_steps: Annotated[int, within(0, 1_000_000)] = DEFAULT_MAX_STEPS
    max_tokens: Whole = 0
    max_time: Annotated[Duration, within(0, YEAR, duration=True)] = 0.0
    cell_timeout: Annotated[Duration, within(0, YEAR, duration=True)] = DEFAULT_CELL_TIMEOUT
    output_chars: Annotated[int, within(200, 100_000_000)] = DEFAULT_OUTPUT_CHARS


def _gateway_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"a gateway URL is http(s)://HOST[:PORT][/BASE], not {value!r}")
    if parts.username or parts.password:
        # It would be shown in every message that names the gateway.
        raise ValueError("a gateway URL holds no credentials: give the token with token_env")
    return value


class GatewayTable(_Table):
    url: Annotated[str, AfterValidator(_gateway_url)]
    token: str = ""
    token_env: str = ""
    kernel_name: str = ""


class KernelTable(_Table):
    env_allow: list[str] = []
    hide: list[str] = []
    startup_timeout: Annotated[Duration, within(0, DAY, duration=True)] = (
        DEFAULT_KERNEL_STARTUP_TIMEOUT
    )
    # No grace would be no limit: a cell that ignores its interrupt would never end.
    interrupt_grace: Annotated[Duration, within(0, 3600, duration=True, above=True)] = (
        DEFAULT_KERNEL_INTERRUPT_GRACE
    )
    max_output_chars: Annotated[int, within(MIN_KERNEL_MAX_OUTPUT_CHARS, 2**31)] = (
        DEFAULT_KERNEL_MAX_OUTPUT_CHARS
    )
    memory_max: Annotated[
        int,
        BeforeValidator(parse_size),
        within(0, MAX_SIZE),
        _zero_or_at_least(MIN_KERNEL_MEMORY, f"{MIN_KERNEL_MEMORY >> 20}M"),
    ] = 0
    max_processes: Annotated[
        int,
        within(0, MAX_PIDS),
        _zero_or_at_least(MIN_KERNEL_PROCESSES, str(MIN_KERNEL_PROCESSES)),
    ] = 0
    sandbox: SandboxKind = DEFAULT_KERNEL_SANDBOX
    network: bool = True
    python: str = DEFAULT_KERNEL_PYTHON
    fork_server: bool = DEFAULT_KERNEL_FORK_SERVER
    backend: KernelBackend = "local"
    gateway: GatewayTable | None = None
    api: ApiTransport = DEFAULT_KERNEL_API


class SessionsTable(_Table):
    idle_timeout: Annotated[Duration, within(0, YEAR, duration=True)] = DEFAULT_IDLE_TIMEOUT
    snapshot_max_mb: Annotated[int, within(0, 1 << 20)] = DEFAULT_SNAPSHOT_MAX_MB
    checkpoint: Literal["turn", "unload"] = "turn"
    max_kernels: Annotated[int, within(1, 10_000)] = DEFAULT_MAX_KERNELS
    inline_input_share: Annotated[float, within(0, 1)] = DEFAULT_INLINE_INPUT_SHARE
    compaction: bool = True


class AgentsTable(_Table):
    max_depth: Annotated[int, within(0, 100)] = DEFAULT_MAX_DEPTH
    max_children: Annotated[int, within(1, MAX_CHILDREN)] = DEFAULT_MAX_CHILDREN
    max_message_chars: Annotated[int, within(1, 100_000_000)] = DEFAULT_MAX_MESSAGE_CHARS
    max_pending: Annotated[int, within(1, 1_000_000)] = DEFAULT_MAX_PENDING
    messages_per_minute: Annotated[int, within(1, 1_000_000)] = DEFAULT_MESSAGES_PER_MINUTE
    llm_concurrency: Annotated[int, within(1, MAX_LLM_CONCURRENCY)] = DEFAULT_LLM_CONCURRENCY


class HarnessTable(_Table):
    review_skill: ReviewPolicy = "human"
    review_prompt_note: ReviewPolicy = "model"
    review_memory: ReviewPolicy = "model"
    review_subagent_spec: ReviewPolicy = "model"
    reviewer_model: str = ""
    max_prompt_chars: Annotated[int, within(0, 10_000_000)] = DEFAULT_HARNESS_PROMPT_CHARS


class LocalTable(_Table):
    n_ctx: Annotated[int, within(512, 1 << 24)] = DEFAULT_LOCAL_N_CTX
    threads: Annotated[int, within(0, 4096)] = 0
    models_dir: str | None = None


class ConfigFile(_Table):
    """The whole of ``config.toml`` (the module docstring documents every key)."""

    model: str | None = None
    providers: dict[str, ProviderTable] = {}
    prices: dict[str, PriceTable] = {}
    context_windows: dict[str, Annotated[int, within(1, 1 << 30)]] = {}
    limits: LimitsTable = Field(default_factory=LimitsTable)
    kernel: KernelTable = Field(default_factory=KernelTable)
    sessions: SessionsTable = Field(default_factory=SessionsTable)
    agents: AgentsTable = Field(default_factory=AgentsTable)
    harness: HarnessTable = Field(default_factory=HarnessTable)
    local: LocalTable = Field(default_factory=LocalTable)


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The configuration file :func:`load_config` reads: ``RECURSA_CONFIG``, else
    ``$RECURSA_HOME/config.toml``."""
    environ: Mapping[str, str] = os.environ if env is None else env
    return Path(environ.get("RECURSA_CONFIG") or home_dir(environ) / CONFIG_FILE_NAME).expanduser()


def load_config(
    env: Mapping[str, str] | None = None,
    *,
    file: Path | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Resolve the configuration from defaults, the TOML file and the environment.

    ``env`` defaults to ``os.environ``; ``overrides`` are laid over it (tests
    use them to point RECURSA_HOME elsewhere). A malformed file or value
    raises :class:`ConfigError`: one line naming the file and the key.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if overrides:
        environ = {**environ, **overrides}
    home = home_dir(environ)
    path = file or config_path(environ)
    try:
        data = ConfigFile.model_validate(_read_toml(path))
    except ValidationError as exc:
        raise ConfigError(f"{path}: {one_line(exc, root=ConfigFile, mapping='a table')}") from None
    providers = _providers(data.providers, environ, path)
    kernel = data.kernel
    gateway = _gateway(kernel.gateway, environ, path)
    if kernel.backend == "gateway" and gateway is None:
        raise ConfigError(f'{path}: kernel.backend = "gateway" needs a [kernel.gateway] url')
    limits = data.limits
    sessions = data.sessions
    harness = data.harness
    return Config(
        home=home,
        model=environ.get("RECURSA_MODEL") or data.model,
        providers=providers,
        prices={
            model: Price(p.input, p.output, p.cached_input, p.cache_write)
            for model, p in data.prices.items()
        },
        context_windows=dict(data.context_windows),
        limits=Limits(
            max_steps=limits.max_steps or None,
            max_tokens=limits.max_tokens or None,
            max_time=limits.max_time or None,
            cell_timeout=limits.cell_timeout or DEFAULT_CELL_TIMEOUT,
            output_chars=limits.output_chars,
        ),
        kernel=KernelConfig(
            env=kernel_environment(
                environ,
                extra_allow=kernel.env_allow,
                providers=providers.values(),
                secrets=(gateway.token,) if gateway is not None else (),
            ),
            startup_timeout=kernel.startup_timeout or DEFAULT_KERNEL_STARTUP_TIMEOUT,
            interrupt_grace=kernel.interrupt_grace,
            max_output_chars=kernel.max_output_chars,
            memory_max=kernel.memory_max or None,
            max_processes=kernel.max_processes or None,
            sandbox=kernel.sandbox,
            network=kernel.network,
            python=_kernel_python(environ.get("RECURSA_KERNEL_PYTHON") or kernel.python, path),
            hide=tuple(_hidden_dir(value, path) for value in kernel.hide),
            fork_server=kernel.fork_server,
            backend=kernel.backend,
            gateway=gateway,
            api=kernel.api,
        ),
        sessions=SessionsConfig(
            idle_timeout=sessions.idle_timeout or None,
            snapshot_max_bytes=max(1, sessions.snapshot_max_mb) << 20,
            checkpoint_each_turn=sessions.checkpoint == "turn",
            max_kernels=sessions.max_kernels,
            inline_input_share=sessions.inline_input_share,
            compaction=sessions.compaction,
        ),
        agents=AgentsConfig(**data.agents.model_dump()),
        harness=HarnessConfig(
            review={kind: getattr(harness, f"review_{kind}") for kind in HARNESS_KINDS},
            reviewer_model=harness.reviewer_model or None,
            max_prompt_chars=harness.max_prompt_chars,
        ),
        local=LocalConfig(
            n_ctx=data.local.n_ctx,
            threads=data.local.threads,
            models_dir=Path(data.local.models_dir).expanduser()
            if data.local.models_dir
            else _cache_dir(environ) / "models",
        ),
    )


def _gateway(
    table: GatewayTable | None, environ: Mapping[str, str], path: Path
) -> GatewayConfig | None:
    """``[kernel.gateway]``, with its token read from ``token_env`` when named."""
    if table is None:
        return None
    token = table.token
    if table.token_env:
        token = environ.get(table.token_env, "")
        if not token:
            raise ConfigError(
                f"{path}: kernel.gateway.token_env: the variable {table.token_env} is not set"
            )
    if not token:
        # Without one, any process that reaches the gateway (a kernel among
        # them) could start and drive kernels there.
        raise ConfigError(f"{path}: kernel.gateway: a token is required (token_env or token)")
    return GatewayConfig(
        url=table.url,
        token=token,
        token_env=table.token_env or None,
        kernel_name=table.kernel_name,
    )


def kernel_environment(
    environ: Mapping[str, str],
    *,
    extra_allow: list[str] | tuple[str, ...] = (),
    providers: Iterable[ProviderConfig] = (),
    secrets: Iterable[str] = (),
) -> dict[str, str]:
    """The environment a kernel starts with: an allow-list, minus every credential.

    A variable passes if it is allow-listed (or ``LC_*``) and neither its name
    looks like a credential nor its value equals a configured credential.
    Provider key variables are refused even when allow-listed by hand, and so
    is any value among ``secrets`` (the kernel gateway's token).
    """
    providers = tuple(providers)
    secret_values = {p.api_key for p in providers if p.api_key} | {v for v in secrets if v}
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


def _kernel_python(value: str, path: Path) -> str:
    """``[kernel] python`` checked: a named choice, or an absolute path (``~`` expanded)."""
    if value in KERNEL_PYTHON_NAMES:
        return value
    expanded = Path(value).expanduser()
    if not expanded.is_absolute():
        raise ConfigError(
            f"{path}: kernel.python must be 'managed', 'project' or an absolute path, not {value!r}"
        )
    return str(expanded)


def _hidden_dir(value: str, path: Path) -> Path:
    """A ``[kernel] hide`` entry: an absolute directory (``~`` expanded)."""
    expanded = Path(value).expanduser()
    if not expanded.is_absolute():
        raise ConfigError(f"{path}: kernel.hide entries must be absolute paths, not {value!r}")
    return expanded


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
    import tomllib  # here: most CLI calls read no file

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def _providers(
    tables: Mapping[str, ProviderTable], environ: Mapping[str, str], path: Path
) -> dict[str, ProviderConfig]:
    """Every configured provider and the built-in ones, with the environment laid
    over the file: a builtin's base URL variable, any provider's key variable."""
    out: dict[str, ProviderConfig] = {}
    for name in sorted(set(tables) | set(_BUILTIN_PROVIDERS)):
        table = tables.get(name) or ProviderTable()
        builtin = _BUILTIN_PROVIDERS.get(name)
        kind = table.kind or (builtin[0] if builtin else None)
        if kind is None:
            raise ConfigError(f"{path}: providers.{name}.kind is required: 'openai' or 'anthropic'")
        key_env = table.api_key_env or (builtin[1] if builtin else None)
        base_url = (environ.get(builtin[2]) if builtin else None) or table.base_url
        api_key = environ.get(key_env) if key_env else None
        out[name] = ProviderConfig(
            name=name,
            kind=kind,
            base_url=base_url,
            api_key=api_key or table.api_key,
            api_key_env=key_env,
            timeout=table.timeout,
            max_retries=table.max_retries,
        )
    return out


__all__ = [
    "AgentsConfig",
    "ApiTransport",
    "Config",
    "KernelConfig",
    "Limits",
    "LocalConfig",
    "Price",
    "ProviderConfig",
    "ProviderKind",
    "SandboxKind",
    "SessionsConfig",
    "color_enabled",
    "debug_enabled",
    "environment",
    "home_dir",
    "kernel_environment",
    "load_config",
    "parse_duration",
    "parse_size",
]

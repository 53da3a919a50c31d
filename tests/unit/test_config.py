from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import recursa.config
from recursa.config import kernel_environment, load_config, parse_duration
from recursa.errors import ConfigError

README = Path(__file__).resolve().parents[2] / "README.md"


def write(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text, encoding="utf-8")


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config = load_config({"RECURSA_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert config.home == tmp_path
    assert config.model is None
    assert config.limits.max_steps == 50
    assert config.providers["openai"].kind == "openai"
    assert config.providers["openai"].api_key is None
    # Verified weights are shared by every RECURSA_HOME of the user.
    assert config.local.models_dir == tmp_path / "cache" / "recursa" / "models"


def test_file_then_environment_precedence(tmp_path: Path) -> None:
    write(
        tmp_path,
        'model = "anthropic/claude-x"\n'
        '[providers.openai]\nbase_url = "http://file"\napi_key = "from-file"\n'
        '[limits]\nmax_steps = 7\nmax_time = "2m"\n',
    )
    config = load_config({"RECURSA_HOME": str(tmp_path)})
    assert config.model == "anthropic/claude-x"
    assert config.providers["openai"].base_url == "http://file"
    assert config.providers["openai"].api_key == "from-file"
    assert config.limits.max_steps == 7
    assert config.limits.max_time == 120

    env = {
        "RECURSA_HOME": str(tmp_path),
        "RECURSA_MODEL": "openai/gpt-x",
        "OPENAI_BASE_URL": "http://env",
        "OPENAI_API_KEY": "from-env",
    }
    config = load_config(env)
    assert config.model == "openai/gpt-x"
    assert config.providers["openai"].base_url == "http://env"
    assert config.providers["openai"].api_key == "from-env"


def test_custom_openai_compatible_provider(tmp_path: Path) -> None:
    write(
        tmp_path,
        '[providers.vllm]\nkind = "openai"\nbase_url = "http://127.0.0.1:8000/v1"\napi_key_env = "VLLM_KEY"\n',
    )
    config = load_config({"RECURSA_HOME": str(tmp_path), "VLLM_KEY": "k"})
    vllm = config.providers["vllm"]
    assert (vllm.kind, vllm.base_url, vllm.api_key) == ("openai", "http://127.0.0.1:8000/v1", "k")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[limits]\nmax_stepz = 3\n", "limits.max_stepz"),
        ('[limits]\nmax_steps = "many"\n', "limits.max_steps"),
        ('[providers.x]\nkind = "grpc"\n', "providers.x.kind"),
        ("bogus = 1\n", "'bogus'"),
        ("[limits\n", "invalid TOML"),
        ('[kernel]\nenv_allow = "PATH"\n', "kernel.env_allow"),
        ('[limits]\ncell_timeout = "soon"\n', "limits.cell_timeout"),
        ('[kernel]\ninterrupt_grace = "soon"\n', "kernel.interrupt_grace"),
        ("[kernel]\ninterrupt_grace = 0\n", "kernel.interrupt_grace"),
        ("[kernel]\nmax_output_chars = 9999\n", "kernel.max_output_chars"),
        ("[kernel]\nmax_output_chars = 5e6\n", "kernel.max_output_chars"),
        ('[kernel]\nmax_output_chars = "lots"\n', "kernel.max_output_chars"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, names: str) -> None:
    write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config({"RECURSA_HOME": str(tmp_path)})
    message = str(info.value)
    assert names in message
    assert "\n" not in message


def test_kernel_interrupt_grace_and_output_cap(tmp_path: Path) -> None:
    kernel = load_config({"RECURSA_HOME": str(tmp_path)}).kernel
    assert (kernel.interrupt_grace, kernel.max_output_chars) == (3.0, 20_000_000)
    write(tmp_path, '[kernel]\ninterrupt_grace = "1.5m"\nmax_output_chars = 10_000\n')
    kernel = load_config({"RECURSA_HOME": str(tmp_path)}).kernel
    assert (kernel.interrupt_grace, kernel.max_output_chars) == (90.0, 10_000)
    write(tmp_path, "[kernel]\ninterrupt_grace = 0.5\n")
    assert load_config({"RECURSA_HOME": str(tmp_path)}).kernel.interrupt_grace == 0.5


def test_kernel_fork_server_is_on_by_default_and_can_be_turned_off(tmp_path: Path) -> None:
    assert load_config({"RECURSA_HOME": str(tmp_path)}).kernel.fork_server is True
    write(tmp_path, "[kernel]\nfork_server = false\n")
    assert load_config({"RECURSA_HOME": str(tmp_path)}).kernel.fork_server is False
    write(tmp_path, '[kernel]\nfork_server = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"kernel\.fork_server"):
        load_config({"RECURSA_HOME": str(tmp_path)})


def test_durations() -> None:
    assert parse_duration("90s", key="k") == 90
    assert parse_duration("1.5h", key="k") == 5400
    assert parse_duration(0, key="k") is None
    with pytest.raises(ConfigError, match="k:"):
        parse_duration("-3m", key="k")


def test_command_line_durations_take_every_form() -> None:
    """The CLI's flags (--max-time, --cell-timeout, --gate-timeout) parse with this."""
    assert parse_duration("1h30m", key="--max-time") == 5400
    assert parse_duration("2d", key="--max-time") == 172_800
    assert parse_duration("90", key="--max-time") == 90
    with pytest.raises(ConfigError, match=r"^--max-time: cannot read the duration 'soon'"):
        parse_duration("soon", key="--max-time")


def readme_examples() -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def readme_example() -> str:
    """The configuration section's example (the first; the gateway section has its own)."""
    return readme_examples()[0]


def docstring_example() -> str:
    """The indented block after "field by field::" in config.py's docstring."""
    doc = recursa.config.__doc__ or ""
    after = doc.split("The file, field by field::\n", 1)[1]
    lines = []
    for line in after.splitlines():
        if line and not line.startswith(" "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


def test_the_readme_example_loads_verbatim(tmp_path: Path) -> None:
    text = readme_example()
    assert "[limits]" in text and "[kernel]" in text  # the block was found
    write(tmp_path, text)
    config = load_config({"RECURSA_HOME": str(tmp_path)})
    assert config.model == "openai/gpt-4o-mini"
    assert config.providers["vllm"].base_url == "http://127.0.0.1:8000/v1"
    assert (config.prices["vllm/qwen"].input, config.prices["vllm/qwen"].output) == (0.2, 0.6)
    assert (config.limits.max_time, config.limits.cell_timeout) == (1800, 120)
    assert config.limits.output_chars == 8000


def test_the_readme_gateway_example_loads_verbatim(tmp_path: Path) -> None:
    [text] = [block for block in readme_examples() if "[kernel.gateway]" in block]
    write(tmp_path, text)
    env = {"RECURSA_HOME": str(tmp_path), "RECURSA_GATEWAY_TOKEN": "t0ken"}
    config = load_config(env)
    gateway = config.kernel.gateway
    assert config.kernel.backend == "gateway" and gateway is not None
    assert (gateway.url, gateway.token, gateway.kernel_name) == (
        "http://gateway.internal:8888",
        "t0ken",
        "recursa",
    )
    assert "t0ken" in config.secrets and "t0ken" not in repr(config)
    with pytest.raises(ConfigError, match="RECURSA_GATEWAY_TOKEN is not set"):
        load_config({"RECURSA_HOME": str(tmp_path)})


def test_the_docstring_example_loads_verbatim_with_every_table(tmp_path: Path) -> None:
    text = docstring_example()
    tables = set(re.findall(r"^\[([a-z_]+)", text, re.M))
    assert tables == set(recursa.config.ConfigFile.model_fields) - {"model"}
    write(tmp_path, text)
    env = {
        "RECURSA_HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path),
        "RECURSA_GATEWAY_TOKEN": "t",
    }
    config = load_config(env)
    assert config.kernel.backend == "local" and config.kernel.gateway is not None
    assert config.kernel.gateway.url == "http://127.0.0.1:8888"
    openai = config.providers["openai"]
    assert (openai.api_key, openai.timeout, openai.max_retries) == ("...", 600, 4)
    assert config.prices["openai/gpt-4o-mini"].cache_write == 0.15
    assert config.context_windows == {"openai/my-model": 32000}
    assert config.kernel.interrupt_grace == 3
    assert config.sessions.idle_timeout == 1800 and config.sessions.checkpoint_each_turn
    assert config.agents.max_depth == 2 and config.agents.messages_per_minute == 120
    assert config.harness.policy("skill") == "human"
    assert config.harness.policy("memory") == "model"
    assert config.harness.reviewer_model is None
    assert config.local.models_dir == Path("~/.cache/recursa/models").expanduser()


def test_the_harness_and_agents_tables_load(tmp_path: Path) -> None:
    write(
        tmp_path,
        '[harness]\nreview_skill = "model"\nreviewer_model = "faux/reviewer"\n'
        "max_prompt_chars = 0\n[agents]\nmax_depth = 1\n",
    )
    config = load_config({"RECURSA_HOME": str(tmp_path)})
    assert config.harness.policy("skill") == "model"
    assert config.harness.reviewer_model == "faux/reviewer"
    assert config.harness.max_prompt_chars == 0
    assert config.agents.max_depth == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "bogus = 1\n",
            "unknown key 'bogus' (known: agents, context_windows, harness, kernel, limits,"
            " local, model, prices, providers, sessions)",
        ),
        (
            "[harness]\nreview_skil = 'model'\n",
            "unknown key 'harness.review_skil' (known: max_prompt_chars, review_memory,"
            " review_prompt_note, review_skill, review_subagent_spec, reviewer_model)",
        ),
        (
            "[providers.vllm]\nkind = 'openai'\nretries = 3\n",
            "unknown key 'providers.vllm.retries' (known: api_key, api_key_env, base_url, kind,"
            " max_retries, timeout)",
        ),
    ],
)
def test_an_unknown_key_lists_the_valid_ones(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config({"RECURSA_HOME": str(tmp_path)})
    assert str(info.value) == f"{tmp_path / 'config.toml'}: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[providers.openai]\nmax_retries = 1000000000\n",
            "providers.openai.max_retries must be from 0 to 20, not 1000000000",
        ),
        (
            "[providers.openai]\nmax_retries = 21\n",
            "providers.openai.max_retries must be from 0 to 20, not 21",
        ),
        ("[agents]\nmax_children = 0\n", "agents.max_children must be from 1 to 100000, not 0"),
        (
            "[agents]\nmax_children = 100001\n",
            "agents.max_children must be from 1 to 100000, not 100001",
        ),
        ("[limits]\nmax_steps = -1\n", "limits.max_steps must be from 0 to 1000000, not -1"),
        ('[limits]\nmax_time = "400d"\n', "limits.max_time must be from 0s to 366d, not '400d'"),
        ("[agents]\nmax_depth = 1000\n", "agents.max_depth must be from 0 to 100, not 1000"),
        ("[sessions]\nmax_kernels = 0\n", "sessions.max_kernels must be from 1 to 10000, not 0"),
        ('[harness]\nreview_skill = "maybe"\n', "harness.review_skill must be 'human', 'model'"),
        ("[agents]\nmax_depth = true\n", "agents.max_depth must be a whole number, not True"),
        ("[agents]\nmax_depth = 1.0\n", "agents.max_depth must be a whole number, not 1.0"),
        ('[prices."a/b"]\ninput = 1\n', 'prices."a/b".output is required'),
        ("[harness]\nreviewer_model = 3\n", "harness.reviewer_model must be a string, not 3"),
        ("limits = 3\n", "limits must be a table, not 3"),
    ],
)
def test_wrong_and_absurd_values_are_refused_with_their_range(
    tmp_path: Path, text: str, message: str
) -> None:
    write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config({"RECURSA_HOME": str(tmp_path)})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_durations_in_the_file_take_every_form(tmp_path: Path) -> None:
    write(
        tmp_path,
        '[limits]\nmax_time = "1h30m"\ncell_timeout = 45\n'
        '[sessions]\nidle_timeout = "2d"\n[providers.openai]\ntimeout = "10m"\n',
    )
    config = load_config({"RECURSA_HOME": str(tmp_path)})
    assert (config.limits.max_time, config.limits.cell_timeout) == (5400, 45)
    assert config.sessions.idle_timeout == 172_800
    assert config.providers["openai"].timeout == 600


def test_kernel_environment_is_an_allow_list_without_credentials(tmp_path: Path) -> None:
    write(
        tmp_path,
        '[providers.corp]\nkind = "anthropic"\napi_key_env = "CORP_LLM"\n[kernel]\nenv_allow = ["MY_TOOL", "CORP_LLM"]\n',
    )
    env = {
        "RECURSA_HOME": str(tmp_path),
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "MY_TOOL": "/opt/tool",
        "OPENAI_API_KEY": "canary-openai",
        "ANTHROPIC_API_KEY": "canary-anthropic",
        "CORP_LLM": "canary-corp",
        "GITHUB_TOKEN": "canary-gh",
        "RANDOM_THING": "x",
        "PYTHONPATH": "canary-corp",  # a credential's value under an allowed name
    }
    kernel_env = load_config(env).kernel.env
    assert kernel_env["PATH"] == "/usr/bin"
    assert kernel_env["LC_ALL"] == "C.UTF-8"
    assert kernel_env["MY_TOOL"] == "/opt/tool"
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "CORP_LLM",
        "GITHUB_TOKEN",
        "RANDOM_THING",
        "PYTHONPATH",
    ):
        assert name not in kernel_env
    assert not any(value.startswith("canary") for value in kernel_env.values())


def test_kernel_environment_refuses_provider_keys_even_when_allowed() -> None:
    env = kernel_environment({"OPENAI_API_KEY": "k", "HOME": "/h"}, extra_allow=["OPENAI_API_KEY"])
    assert "OPENAI_API_KEY" not in env
    assert env["HOME"] == "/h"


def test_max_children_defaults_to_64_and_is_read_from_the_file(tmp_path: Path) -> None:
    assert load_config({"RECURSA_HOME": str(tmp_path)}).agents.max_children == 64
    write(tmp_path, "[agents]\nmax_children = 7\n")
    assert load_config({"RECURSA_HOME": str(tmp_path)}).agents.max_children == 7


def test_a_gateway_needs_a_token_no_credentials_in_its_url_and_its_token_reaches_no_kernel(
    tmp_path: Path,
) -> None:
    table = '[kernel.gateway]\nurl = "http://gw:8888"\n'
    write(tmp_path, table)
    with pytest.raises(ConfigError, match=r"kernel\.gateway: a token is required"):
        load_config({"RECURSA_HOME": str(tmp_path)})
    write(tmp_path, '[kernel.gateway]\nurl = "http://me:pw@gw:8888"\ntoken = "t"\n')
    with pytest.raises(ConfigError, match="a gateway URL holds no credentials") as refused:
        load_config({"RECURSA_HOME": str(tmp_path)})
    assert "pw" not in str(refused.value)
    # The token's value is refused in a kernel's environment, even allow-listed by hand.
    write(
        tmp_path,
        '[kernel]\nenv_allow = ["GW_KEY"]\n[kernel.gateway]\nurl = "http://gw:8888"\n'
        'token_env = "GW_KEY"\n',
    )
    config = load_config({"RECURSA_HOME": str(tmp_path), "GW_KEY": "s3cret"})
    assert config.kernel.gateway is not None and config.kernel.gateway.token == "s3cret"
    assert "GW_KEY" not in config.kernel.env and "s3cret" not in config.kernel.env.values()

from __future__ import annotations

from pathlib import Path

import pytest

from recursa.config import kernel_environment, load_config, parse_duration
from recursa.errors import ConfigError


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


def test_durations() -> None:
    assert parse_duration("90s", key="k") == 90
    assert parse_duration("1.5h", key="k") == 5400
    assert parse_duration(0, key="k") is None
    with pytest.raises(ConfigError, match="k:"):
        parse_duration("-3m", key="k")


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

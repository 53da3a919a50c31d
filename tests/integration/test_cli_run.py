"""``recursa run --no-daemon`` as a user runs it: a real process, real kernels,
real HTTP to the loopback fake server. Only the model's replies are scripted.
(The daemon path is tested in test_daemon_sessions.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from recursa.testing import FakeModelServer, Fault, Reply, ToolCallSpec

CANARIES = {
    "OPENAI_API_KEY": "sk-canary-openai-1234",
    "ANTHROPIC_API_KEY": "sk-ant-canary-5678",
    "CORP_LLM_TOKEN": "canary-corp-9999",
}


def python(code: str) -> ToolCallSpec:
    return ToolCallSpec("python", {"code": code})


def recursa(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    if args and args[0] == "run":
        args = ["run", "--no-daemon", *args[1:]]
    return subprocess.run(
        [sys.executable, "-m", "recursa", *args],
        env={**os.environ, **env},
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def openai_env(server: FakeModelServer, home: Path) -> dict[str, str]:
    return {
        "RECURSA_HOME": str(home),
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": "x",
    }


def tool_results(server: FakeModelServer) -> list[str]:
    last = server.requests[-1].body
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


def test_a_multi_step_task_reuses_a_variable_across_cells(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(
        Reply(text="First I'll store a value.", tool_calls=[python("x = 41")]),
        Reply(tool_calls=[python("print(x + 1)")]),
        Reply(text="The answer is 42."),
    )
    result = recursa(
        ["run", "--model", "openai/test-model", "Add one to 41"], openai_env(server, home), tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The answer is 42."
    assert "print(x + 1)" in result.stderr  # the transcript shows the code ...
    assert "42" in result.stderr  # ... and its output
    assert len(server.requests) == 3
    assert tool_results(server) == ["(no output)", "42\n"]
    assert server.requests[0].headers["authorization"] == "Bearer x"
    assert server.requests[0].body["model"] == "test-model"


def test_json_lines_are_valid_and_carry_the_session_and_the_answer(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(Reply(tool_calls=[python("y = 2 ** 10\nprint(y)")]), Reply(text="1024"))
    result = recursa(
        ["run", "--json", "--model", "openai/m", "2**10?"], openai_env(server, home), tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    session_ids = {line["session_id"] for line in lines}
    assert len(session_ids) == 1 and None not in session_ids
    types = [line["type"] for line in lines]
    assert types[0] == "session_created"
    assert "cell_finished" in types
    assert lines[-1]["type"] == "result"
    assert lines[-1]["answer"] == "1024"
    assert lines[-1]["usage"]["calls"] == 2
    finished = next(line for line in lines if line["type"] == "cell_finished")
    assert finished["output"] == "1024\n"


def test_canary_provider_keys_never_reach_the_kernel(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    probe = (
        "import os\n"
        "planted = ('sk-canary', 'sk-ant-canary', 'canary-corp')\n"
        "ours = {'RECURSA_KERNEL_TOKEN', 'RECURSA_API_SOCKET'}\n"
        "hits = [k for k, v in os.environ.items()\n"
        "        if any(p in v for p in planted) or (('KEY' in k or 'TOKEN' in k) and k not in ours)]\n"
        "print(sorted(hits))"
    )
    server.push(Reply(tool_calls=[python(probe)]), Reply(text="checked"))
    env = {**openai_env(server, home), **CANARIES, "OPENAI_API_KEY": CANARIES["OPENAI_API_KEY"]}
    result = recursa(["run", "--model", "openai/m", "look at your environment"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert tool_results(server) == ["[]\n"]
    # The key did reach the provider, as it must.
    assert server.requests[0].headers["authorization"] == f"Bearer {CANARIES['OPENAI_API_KEY']}"
    # And no credential appears in the stored transcript.
    db = (home / "recursa.db").read_bytes()
    for value in CANARIES.values():
        assert value.encode() not in db


def test_anthropic_endpoint(server: FakeModelServer, home: Path, tmp_path: Path) -> None:
    server.push(Reply(tool_calls=[python("print(sum(range(10)))")]), Reply(text="45"))
    env = {
        "RECURSA_HOME": str(home),
        "ANTHROPIC_BASE_URL": server.anthropic_base_url,
        "ANTHROPIC_API_KEY": "k",
    }
    result = recursa(["run", "--model", "anthropic/claude-haiku-4-5", "sum 0..9"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "45"
    assert all(r.path == "/v1/messages" for r in server.requests)
    last = server.requests[-1].body["messages"][-1]
    assert any(block.get("type") == "tool_result" for block in last["content"])


def test_interactive_session_keeps_the_kernel_between_messages(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(
        Reply(tool_calls=[python("total = 7 * 6")]),
        Reply(text="stored"),
        Reply(tool_calls=[python("print(total)")]),
        Reply(text="it was 42"),
    )
    result = recursa(
        ["run", "--interactive", "--model", "openai/m", "store it"],
        openai_env(server, home),
        tmp_path,
        stdin="now print it\n",
    )
    assert result.returncode == 0, result.stderr
    assert tool_results(server)[-1] == "42\n"
    assert result.stdout.splitlines() == ["stored", "it was 42"]  # each turn's answer


def test_a_bad_key_is_one_line_and_exit_4(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(Fault("auth"))
    result = recursa(["run", "--model", "openai/m", "hi"], openai_env(server, home), tmp_path)
    assert result.returncode == 4
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("recursa: stopped without an answer (provider_error): auth")
    assert "Traceback" not in result.stderr
    assert len(server.requests) == 1  # an auth failure is not retried


def test_a_step_limit_is_not_an_answer(server: FakeModelServer, home: Path, tmp_path: Path) -> None:
    server.push(*[Reply(tool_calls=[python(f"print({i})")]) for i in range(5)])
    result = recursa(
        ["run", "--max-steps", "2", "--model", "openai/m", "loop"],
        openai_env(server, home),
        tmp_path,
    )
    assert result.returncode == 8
    assert result.stdout == ""
    assert "reached the limit of 2 model calls" in result.stderr.strip().splitlines()[-1]


def test_rate_limits_are_retried(server: FakeModelServer, home: Path, tmp_path: Path) -> None:
    server.push(Fault("rate_limit", retry_after=0.01), Reply(text="fine"))
    result = recursa(["run", "--model", "openai/m", "hi"], openai_env(server, home), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "fine"
    assert "retrying (rate_limit" in result.stderr


def test_a_bad_config_file_is_one_line_naming_the_key(home: Path, tmp_path: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[limits]\nmax_steps = 'lots'\n")
    result = recursa(["run", "--model", "openai/m", "hi"], {"RECURSA_HOME": str(home)}, tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "limits.max_steps" in result.stderr


def test_a_missing_key_says_what_to_set(home: Path, tmp_path: Path) -> None:
    result = recursa(
        ["run", "--model", "openai/gpt-4o-mini", "hi"], {"RECURSA_HOME": str(home)}, tmp_path
    )
    assert result.returncode == 3
    assert "OPENAI_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr


def test_models_lists_providers_and_local_weights(home: Path, tmp_path: Path) -> None:
    result = recursa(
        ["models", "--json"], {"RECURSA_HOME": str(home), "OPENAI_API_KEY": "k"}, tmp_path
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    by_provider = {(r["provider"], r["model"].split(" ")[0]): r for r in rows}
    assert by_provider[("openai", "*")]["available"] is True
    assert by_provider[("anthropic", "*")]["available"] is False
    assert "ANTHROPIC_API_KEY" in by_provider[("anthropic", "*")]["detail"]
    assert ("local", "qwen2.5-coder-1.5b") in by_provider
    assert "k" not in json.dumps(by_provider[("openai", "*")]["detail"]).replace("key set", "")


def test_undecodable_bytes_in_the_task_are_kept_not_fatal(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(Reply(text="seen"))
    env = {**os.environ, **openai_env(server, home)}
    result = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"recursa",
            b"run",
            b"--no-daemon",
            b"--json",
            b"--model",
            b"openai/m",
            b"bad \xff arg",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.decode("utf-8").splitlines()]
    task = next(line for line in lines if line["type"] == "user_input")
    assert task["text"] == "bad \\xff arg"  # the byte survives as a visible escape


def test_ctrl_c_at_the_interactive_prompt_exits(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(Reply(text="first answer"))
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recursa",
            "run",
            "--no-daemon",
            "--interactive",
            "--model",
            "openai/m",
            "hello",
        ],
        env={**os.environ, **openai_env(server, home)},
        cwd=tmp_path,
        stdin=subprocess.PIPE,  # left open: the prompt waits for a line
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"first answer\n"  # the prompt comes right after
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130


def test_a_known_model_name_on_another_server_is_not_priced(
    server: FakeModelServer, home: Path, tmp_path: Path
) -> None:
    server.push(Reply(text="hi"))
    result = recursa(
        ["run", "--json", "--model", "openai/gpt-4o-mini", "hi"], openai_env(server, home), tmp_path
    )
    assert result.returncode == 0, result.stderr
    usage = json.loads(result.stdout.splitlines()[-1])["usage"]
    assert usage["cost"] is None
    assert usage["unknown_cost_calls"] == 1


def test_an_unusable_home_is_one_line(tmp_path: Path) -> None:
    result = recursa(
        ["run", "--model", "openai/m", "hi"],
        {"RECURSA_HOME": "/proc/nope", "OPENAI_API_KEY": "k"},
        tmp_path,
    )
    assert result.returncode == 6
    assert result.stderr.strip().startswith("recursa: cannot create the store /proc/nope")
    assert "Traceback" not in result.stderr

"""A client call of the CLI is light: ``recursa agents``, ``usage`` and ``logs``
against a real daemon (on its socket, with a real kernel behind the session)
print what they should, and load neither the model SDKs nor the runtime,
kernel, store or session code, nor the daemon's server side, nor the other
commands' modules (issue 15: "a fast CLI")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemon_kit import recursa
from recursa.cli.commands import COMMANDS
from recursa.testing import FakeModelServer, Reply, ToolCallSpec

# Runs the CLI in this process, then prints every module it loaded as the last
# line of stderr (after whatever the command printed there).
PROBE = """
import json, sys
from recursa.cli import main
if sys.argv[1] == "--full":  # the Typer path, past the quick one
    from recursa.cli.root import main
    del sys.argv[1]
elif sys.argv[1] == "--log-limit":  # the most history the quick path reads whole
    import recursa.cli.quick
    recursa.cli.quick.MAX_LOG_BYTES = int(sys.argv[2])
    del sys.argv[1:3]
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

# Packages a client call has no use for: the SDKs, the kernel's machinery, the
# daemon's server stack, the data stack; a general HTTP client (the daemon's
# client speaks HTTP/1.1 on asyncio) and rich (tables are plain text).
FORBIDDEN_PACKAGES = (
    "openai",
    "anthropic",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "anyio",
    "h11",
    "rich",
    "jupyter_client",
    "zmq",
    "ipykernel",
    "psutil",
    "starlette",
    "uvicorn",
    "sqlite3",
    "textual",
    "numpy",
)
FORBIDDEN_RECURSA = (
    "recursa.runtime",
    "recursa.session",
    "recursa.kernel",
    "recursa.store",
    "recursa.harness",
    "recursa.control",
    "recursa.evals",
    "recursa.view",
    "recursa.api",
    "recursa.testing",
    "recursa.daemon.app",
    "recursa.daemon.server",
    "recursa.daemon.host",
    "recursa.daemon.machine",
    "recursa.daemon.embedded",
)
# recursa.models.types is the provider-neutral types protocol's events carry;
# the providers themselves (and their SDKs) are not loaded.
ALLOWED_MODELS = {"recursa.models", "recursa.models.types"}


def probe(args: list[str], env: dict[str, str], cwd: Path) -> tuple[str, list[str]]:
    """Run ``recursa ARGS`` in a fresh process: its stdout and loaded modules."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    *_, last = result.stderr.strip().splitlines()
    report = json.loads(last)
    assert report["code"] == 0, result.stderr
    return result.stdout, report["modules"]


LISTING_NEEDS_NOT = {"recursa.config", "recursa.protocol.events", "recursa.cli.render"}


def heavy(modules: list[str], command: str) -> list[str]:
    """What of ``modules`` a client call of ``command`` must not load."""
    own = COMMANDS[command].module
    other_commands = {entry.module for entry in COMMANDS.values()} - {own}
    return [
        name
        for name in modules
        if name.split(".")[0] in FORBIDDEN_PACKAGES
        or name.startswith(FORBIDDEN_RECURSA)
        or (name.startswith("recursa.models.") and name not in ALLOWED_MODELS)
        or name in other_commands
    ]


@pytest.fixture
def session(server: FakeModelServer, env: dict[str, str], tmp_path: Path) -> str:
    """A session that ran a cell and answered, in a running daemon."""
    cell = ToolCallSpec("python", {"code": "print(6 * 7)"})
    server.push(Reply(tool_calls=[cell]), Reply(text="forty-two"))
    started = recursa(["run", "--detach", "--model", "openai/m", "compute"], env, tmp_path)
    assert started.returncode == 0, started.stderr
    ref = started.stdout.strip().splitlines()[-1]
    idle = recursa(["attach", ref, "--until-idle", "--after", "0"], env, tmp_path)
    assert idle.returncode == 0, idle.stderr
    return ref


def test_agents_usage_and_logs_load_no_heavy_module(
    session: str, env: dict[str, str], tmp_path: Path
) -> None:
    out, modules = probe(["agents"], env, tmp_path)
    assert session in out and "idle" in out
    assert heavy(modules, "agents") == []
    # A listing reads neither the configuration (a running daemon has its
    # own) nor any event: the schema and the grammar are not built.
    assert LISTING_NEEDS_NOT & set(modules) == set()

    out, modules = probe(["usage", session], env, tmp_path)
    assert session in out
    assert heavy(modules, "usage") == []
    assert LISTING_NEEDS_NOT & set(modules) == set()

    out, modules = probe(["logs", session], env, tmp_path)
    assert "print(6 * 7)" in out and "forty-two" in out
    assert heavy(modules, "logs") == []


QUICK_NEEDS_NOT = (
    "typer",
    "click",
    "pydantic",
    "asyncio",
    "recursa.cli.root",
    "recursa.cli.sessions",
    "recursa.daemon.client",
    "recursa.protocol.wire",
)


def test_agents_and_usage_are_answered_without_typer_pydantic_or_asyncio_as_the_full_path_would(
    session: str, env: dict[str, str], tmp_path: Path
) -> None:
    table, modules = probe(["agents"], env, tmp_path)
    assert [m for m in modules if m.split(".")[0] in QUICK_NEEDS_NOT or m in QUICK_NEEDS_NOT] == []
    assert "recursa.daemon.peek" in modules
    listed, modules = probe(["agents", "--json"], env, tmp_path)
    assert "pydantic" not in modules

    full_table, modules = probe(["--full", "agents"], env, tmp_path)
    assert "recursa.cli.sessions" in modules and "typer" in modules
    full_listed, _ = probe(["--full", "agents", "--json"], env, tmp_path)
    assert json.loads(listed) == json.loads(full_listed)
    assert [i["id"] for i in json.loads(listed)] == [session]

    def without_age(text: str) -> list[str]:  # the last column, "Ns ago", may tick
        return [line.rsplit(None, 2)[0] for line in text.splitlines()]

    assert session in table and without_age(table) == without_age(full_table)

    usage, modules = probe(["usage", session], env, tmp_path)
    assert "pydantic" not in modules and "recursa.cli.root" not in modules
    assert usage == probe(["--full", "usage", session], env, tmp_path)[0] and session in usage
    usage_json, modules = probe(["usage", "--json", session], env, tmp_path)
    assert "pydantic" not in modules
    assert json.loads(usage_json) == json.loads(
        probe(["--full", "usage", session, "--json"], env, tmp_path)[0]
    )
    assert json.loads(usage_json)["session"]["own"]["calls"] == 2


def test_logs_are_answered_without_typer_pydantic_or_asyncio_as_the_full_path_would(
    session: str, env: dict[str, str], tmp_path: Path
) -> None:
    def quick_needs_not(modules: list[str]) -> list[str]:
        return [m for m in modules if m.split(".")[0] in QUICK_NEEDS_NOT or m in QUICK_NEEDS_NOT]

    transcript, modules = probe(["logs", session], env, tmp_path)
    assert quick_needs_not(modules) == [] and "recursa.daemon.peek" in modules
    full_transcript, modules = probe(["--full", "logs", session], env, tmp_path)
    assert "recursa.daemon.client" in modules and "typer" in modules
    assert transcript == full_transcript
    assert "print(6 * 7)" in transcript and "forty-two" in transcript
    assert transcript.splitlines()[-1].startswith(f"── {session} idle · 2 model calls")

    lines, modules = probe(["logs", session, "--json"], env, tmp_path)
    assert quick_needs_not(modules) == []
    assert lines == probe(["--full", "logs", "--json", session], env, tmp_path)[0]
    records = [json.loads(line) for line in lines.splitlines()]
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records) and len(records) > 4
    assert {"user_input", "cell_finished", "turn_ended"} <= {r["type"] for r in records}

    # A history longer than the quick path reads whole is the full path's,
    # which streams it: the same transcript.
    long, modules = probe(["--log-limit", "1000", "logs", session], env, tmp_path)
    assert "recursa.daemon.client" in modules and long == transcript


def test_the_quick_path_leaves_to_the_full_path_what_it_cannot_answer(
    session: str, env: dict[str, str], tmp_path: Path
) -> None:
    home = Path(env["RECURSA_HOME"])
    state_file = home / "daemon.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "version": "0.0.0-another"}))
    other, modules = probe(["agents"], env, tmp_path)  # another version's daemon: the full path
    assert "recursa.cli.root" in modules and other.count(session) == 1
    state_file.write_text(json.dumps(state))
    misplaced = recursa(["--json", "agents"], env, tmp_path)  # Typer's usage error, as ever
    assert misplaced.returncode == 2 and misplaced.stdout == ""
    token = home / "daemon.token"
    kept = token.read_text()
    token.write_text("not-the-token")  # refused: the full path says so, in one line
    refused = recursa(["agents"], env, tmp_path)
    assert refused.returncode != 0 and refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    # Said at once, as the refusal it is: not 30 s of waiting for a daemon
    # "that holds the lock but does not answer".
    assert "token" in refused.stderr and "lock" not in refused.stderr, refused.stderr
    assert str(token) in refused.stderr  # which file holds the refused token
    status = recursa(["daemon", "status"], env, tmp_path)  # the diagnostic command says so too
    assert status.returncode == 7 and str(token) in status.stderr, status.stderr
    token.write_text(kept)
    assert recursa(["daemon", "stop"], env, tmp_path).returncode == 0
    restarted = recursa(["agents"], env, tmp_path)  # no daemon: the full path starts one
    assert restarted.returncode == 0 and session in restarted.stdout, restarted.stderr
    unknown = recursa(["usage", "s-no-such-session"], env, tmp_path)  # a 404: the full path's error
    assert unknown.returncode != 0 and unknown.stdout == ""
    assert "s-no-such-session" in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1


def test_the_check_sees_a_heavy_module(env: dict[str, str], tmp_path: Path) -> None:
    # The check can fail: `recursa models` asks this machine, not the daemon,
    # and loads the model catalogue to do so.
    _, modules = probe(["models", "--json"], env, tmp_path)
    assert heavy(modules, "models") != []


def test_a_run_against_a_running_daemon_reads_no_configuration(
    session: str, server: FakeModelServer, env: dict[str, str], tmp_path: Path
) -> None:
    # The daemon (started by the fixture) has its configuration: a run sent
    # to it builds none, so a malformed file written now is not read.
    (Path(env["RECURSA_HOME"]) / "config.toml").write_text("[limits]\nmax_steps = 'lots'\n")
    server.push(Reply(text="again"))
    out, modules = probe(["run", "--model", "openai/m", "once more"], env, tmp_path)
    assert out.strip() == "again"
    assert "recursa.config" not in modules
    assert heavy(modules, "run") == []
    # The daemon's replies are rebuilt without pydantic (recursa.protocol.plain).
    assert "pydantic" not in modules


def test_a_daemon_is_stopped_whatever_its_configuration_file_became(
    session: str, env: dict[str, str], tmp_path: Path
) -> None:
    home = Path(env["RECURSA_HOME"])
    (home / "config.toml").write_text("[limits]\nmax_steps = 'lots'\n")
    status = recursa(["daemon", "status"], env, tmp_path)
    assert status.returncode == 0, status.stderr
    stopped = recursa(["daemon", "stop"], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert "daemon stopped" in stopped.stdout
    assert recursa(["daemon", "status"], env, tmp_path).returncode == 1

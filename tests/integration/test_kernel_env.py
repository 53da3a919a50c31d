"""The managed kernel environment on real sandboxed kernels, a real runtime and
the real CLI: ``pip`` in a cell installs into the env, the next cell imports
it, a later session sees it, and neither the project's interpreter nor the
system's gets it."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from daemon_kit import fails, ok, recursa
from recursa.config import load_config
from recursa.errors import ConfigError, KernelError
from recursa.kernel.sandbox import check_sandbox, interpreter_paths
from recursa.kernel.venv import DATA_STACK, ENV_DIR_NAME, KernelEnv, resolve_kernel_python
from recursa.models.faux import code, register_script, reply
from recursa.protocol.events import CellFinished
from recursa.session import Session
from recursa.testing import make_runtime

try:
    check_sandbox("bwrap", network=True)
    HAVE_BWRAP = True
except KernelError:
    HAVE_BWRAP = False

MANAGED = {"RECURSA_KERNEL_PYTHON": "managed"}


def wheel(directory: Path, module: str) -> Path:
    """A wheel of one module ``module`` (``VALUE = module``), built by hand:
    pip installs it with no network and no build backend."""
    dist = f"{module}-0.1.dist-info"
    files = {
        f"{module}.py": f"VALUE = {module!r}\n".encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n".encode(),
        f"{dist}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    path = directory / f"{module}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


def outputs(session: Session) -> list[str]:
    return [r.event.output for r in session.history() if isinstance(r.event, CellFinished)]


def finds(python: str, module: str) -> bool:
    """Whether ``python`` (run outside any sandbox, without the env's PATH) imports ``module``."""
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    done = subprocess.run([python, "-c", probe], capture_output=True, check=False, timeout=60)
    return done.returncode == 0


def test_a_managed_env_is_made_on_first_use_and_lets_its_own_packages_win(home: Path) -> None:
    python, env = resolve_kernel_python("managed", home)
    assert env is not None and env.path == home / ENV_DIR_NAME
    assert home.stat().st_mode & 0o777 == 0o700  # a home made here is private
    assert python == str(env.path / "bin" / "python") and env.ready()
    # ipykernel and recursa come from the project; sys.executable is the env's.
    probe = (
        "import sys, ipykernel, recursa, json\n"
        "print(json.dumps([sys.executable, sys.prefix, sys.path]))"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    executable, prefix, path = json.loads(done.stdout)
    assert executable == python and prefix == str(env.path)
    own = path.index(str(env.site_packages))
    project = [i for i, p in enumerate(path) if p.startswith(sys.prefix + os.sep)]
    assert project and own < min(project)  # the env's packages win
    # Made once: a second use keeps what is in it.
    (env.site_packages / "kept_here.py").write_text("VALUE = 1\n")
    assert resolve_kernel_python("managed", home) == (python, env)
    assert (env.site_packages / "kept_here.py").exists()
    # An env cut short (no marker) is made again.
    (env.path / ".recursa-env").unlink()
    assert not env.ready()
    env.ensure()
    assert env.ready() and not (env.site_packages / "kept_here.py").exists()


def test_a_kernels_environment_puts_the_env_first(home: Path) -> None:
    env = KernelEnv.of_home(home)
    seen = env.kernel_environment({"PATH": "/usr/bin:/bin", "PYTHONHOME": "/x"})
    assert seen["PATH"] == f"{env.path}/bin:/usr/bin:/bin"
    assert seen["VIRTUAL_ENV"] == str(env.path)
    assert seen["PIP_REQUIRE_VIRTUALENV"] == "1"
    assert "PYTHONHOME" not in seen


def test_the_project_setting_uses_recursas_interpreter(home: Path) -> None:
    assert resolve_kernel_python("project", home) == (sys.executable, None)
    assert resolve_kernel_python("/opt/py/bin/python3", home) == ("/opt/py/bin/python3", None)
    assert not (home / ENV_DIR_NAME).exists()


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here")
async def test_pip_in_a_cell_installs_into_the_env_for_this_and_later_sessions(
    home: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "work"
    workspace.mkdir()
    first, second = wheel(workspace, "recursa_v_bash"), wheel(workspace, "recursa_v_magic")
    where = (
        "%%bash\n"
        "command -v pip python\n"
        'echo "$VIRTUAL_ENV"\n'
        "python -c 'import sys; print(sys.executable)'"
    )
    register_script(
        "installer",
        [
            code(where),
            code(f"%%bash\npip install --no-index --quiet {first.name}"),
            code("import recursa_v_bash; print(recursa_v_bash.VALUE, recursa_v_bash.__file__)"),
            code(f"%pip install --no-index --quiet {second.name}"),
            code("import recursa_v_magic; print(recursa_v_magic.VALUE)"),
            reply("done"),
        ],
    )
    register_script(
        "later",
        [code("import recursa_v_bash, recursa_v_magic; print('both')"), reply("done")],
    )
    async with make_runtime(home, env=MANAGED) as runtime:
        assert runtime.config.kernel.sandbox == "bwrap"
        env = KernelEnv.of_home(home)
        session = await runtime.create_session(model="faux/installer", cwd=workspace)
        await session.ask("install them")
        shown = outputs(session)
        later = await runtime.create_session(model="faux/later", cwd=workspace)
        await later.ask("use them")
        seen_later = outputs(later)
    bin_dir = env.path / "bin"
    assert shown[0].split("\n")[:4] == [
        f"{bin_dir}/pip",
        f"{bin_dir}/python",
        str(env.path),
        str(env.python),
    ]
    assert shown[2] == f"recursa_v_bash {env.site_packages}/recursa_v_bash.py\n"
    assert shown[4] == "recursa_v_magic\n"
    assert seen_later == ["both\n"]
    assert (env.site_packages / "recursa_v_magic.py").exists()
    # Neither the project's interpreter nor the system's has them.
    for python in {sys.executable, shutil.which("python3") or sys.executable}:
        assert not finds(python, "recursa_v_bash")
        assert not finds(python, "recursa_v_magic")
    assert importlib.util.find_spec("recursa_v_bash") is None


def test_the_cli_shows_resets_and_adds(home: Path, tmp_path: Path) -> None:
    environ = {**os.environ, **MANAGED}
    shown = json.loads(ok(["kernel-env", "show", "--json"], environ, tmp_path))
    assert shown["ready"] is False and shown["path"] == str(home / ENV_DIR_NAME)
    assert ok(["kernel-env", "reset", "--bare"], environ, tmp_path).strip() == shown["path"]
    package = wheel(tmp_path, "recursa_v_cli")
    ok(["kernel-env", "add", "--no-index", str(package)], environ, tmp_path)
    shown = json.loads(ok(["kernel-env", "show", "--json"], environ, tmp_path))
    assert shown["ready"] is True and shown["setting"] == "managed"
    [listed] = [p for p in shown["packages"] if p["name"] == "recursa_v_cli"]
    assert listed["version"] == "0.1" and listed["size"] > 0
    assert set(shown["missing"]) <= {dist for dist, _ in DATA_STACK}
    table = ok(["kernel-env", "show"], environ, tmp_path)
    assert "recursa_v_cli" in table and str(home / ENV_DIR_NAME) in table
    # A reset makes it afresh: what was added is gone.
    ok(["kernel-env", "reset", "--bare"], environ, tmp_path)
    shown = json.loads(ok(["kernel-env", "show", "--json"], environ, tmp_path))
    assert all(p["name"] != "recursa_v_cli" for p in shown["packages"])
    # pip's failure is one line.
    line = fails(["kernel-env", "add", "--no-index", "recursa-v-absent"], environ, tmp_path, 5)
    assert "pip could not install recursa-v-absent" in line


def test_the_python_setting_is_checked(home: Path) -> None:
    with pytest.raises(ConfigError, match=r"kernel\.python must be 'managed', 'project' or an abs"):
        load_config(overrides={"RECURSA_KERNEL_PYTHON": "python3"})
    assert load_config().kernel.python == "project"  # what the suite runs with
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[kernel]\npython = "~/py/bin/python"\n')
    assert load_config(overrides={"RECURSA_KERNEL_PYTHON": ""}).kernel.python == str(
        Path("~/py/bin/python").expanduser()
    )


def test_prepare_without_an_index_makes_a_working_env_and_names_what_it_lacks(
    home: Path, tmp_path: Path
) -> None:
    offline = {**os.environ, **MANAGED, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}
    result = recursa(["kernel-env", "prepare"], offline, tmp_path)
    assert result.returncode == 0, result.stderr
    env = KernelEnv.of_home(home)
    assert result.stdout.strip() == str(env.path) and env.ready()
    missing = env.missing()
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    if missing:
        assert warnings == [
            f"warning: the kernel environment lacks {', '.join(missing)} "
            "(pip could not install them; kernels work without them)"
        ]
    else:  # the project's interpreter has the whole data stack
        assert warnings == []
    probe = "import ipykernel, recursa, sys; print(sys.prefix)"
    done = subprocess.run([str(env.python), "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == str(env.path)


def test_a_reset_is_refused_while_the_daemon_runs(home: Path, tmp_path: Path) -> None:
    environ = {**os.environ, **MANAGED}
    ok(["daemon", "start"], environ, tmp_path)
    try:
        env = KernelEnv.of_home(home)
        assert env.ready()  # the daemon made it on first use
        (env.site_packages / "kept_here.py").write_text("VALUE = 1\n")
        line = fails(["kernel-env", "reset", "--bare"], environ, tmp_path, 5)
        assert "runs kernels in the kernel environment; stop it first" in line
        assert (env.site_packages / "kept_here.py").exists()
    finally:
        ok(["daemon", "stop"], environ, tmp_path)


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap cannot run here")
def test_code_a_kernel_planted_in_the_env_never_runs_outside_a_sandbox(
    home: Path, tmp_path: Path
) -> None:
    """A kernel may write the env: a ``.pth`` there runs whenever its interpreter
    starts. The daemon's view of the env and the CLI's pip must not start it
    unconfined."""
    _, env = resolve_kernel_python("managed", home)
    assert env is not None
    escaped = tmp_path / "escaped"
    (env.site_packages / "zz_planted.pth").write_text(
        f"import pathlib; pathlib.Path({str(escaped)!r}).write_text('ran')\n"
    )
    interpreter_paths.cache_clear()
    paths = interpreter_paths(str(env.python))
    assert env.path in paths and Path(sys.base_prefix) in paths
    assert env.missing() == KernelEnv.of_home(home).missing()
    package = wheel(tmp_path, "recursa_v_planted")
    ok(["kernel-env", "add", "--no-index", str(package)], {**os.environ, **MANAGED}, tmp_path)
    assert (env.site_packages / "recursa_v_planted.py").exists()  # pip ran, confined
    assert not escaped.exists()
    # Run unconfined, it would have run: the check above can fail.
    subprocess.run([str(env.python), "-c", "pass"], check=True)
    assert escaped.read_text() == "ran"

"""A run's plan (command line, TOML, plan.json) and each configuration's home."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from recursa.config import load_config
from recursa.errors import UsageError
from recursa.evals.homes import config_slug, prepare_home, to_toml, window_for
from recursa.evals.plan import (
    Plan,
    TrialLimits,
    parse_lengths,
    read_plan_file,
    read_saved_plan,
)
from recursa.evals.trials import Policy


def test_lengths_read_k_and_m_as_binary_and_sort() -> None:
    assert parse_lengths(["8k,4k", "4096", "1.5k"]) == (1536, 4096, 8192)
    assert parse_lengths(None) == ()
    for bad in ["x4k", "0", "-1k", "4 kb"]:
        with pytest.raises(UsageError, match="not a length"):
            parse_lengths([bad])


def test_a_toml_plan_reads_policies_and_limits(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        'suite = "ruler-niah"\nmodels = ["local/default"]\nlengths = ["4k", 8192]\n'
        'n = 3\nseed = 7\nconcurrency = 2\n[limits]\ntokens = 5000\ntime = "2m"\n'
        '[[policy]]\nmode = "repl"\n[[policy]]\nmode = "context"\ncompaction = false\n'
    )
    plan = read_plan_file(path)
    assert plan.lengths == (4096, 8192) and plan.n == 3 and plan.seed == 7
    assert plan.limits == TrialLimits(tokens=5000, time=120.0)
    assert [p.label for p in plan.policies] == ["repl", "context-nocompact"]
    # What a run saves is what --resume reads back.
    (tmp_path / "plan.json").write_text(plan.to_json())
    assert read_saved_plan(tmp_path) == plan


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('suite = "s"\nmodels = ["m"]\nbogus = 1\n', "unknown key 'bogus'"),
        ('suite = "s"\nmodels = ["m"]\n[[policy]]\nmode = "paste"\n', "mode must be one of"),
        ('suite = "s"\nmodels = ["m"]\n[[policy]]\nrefine = "yes"\n', "refine must be true"),
        ('suite = "s"\nmodels = []\n', "needs a model"),
        ('suite = "s"\nmodels = ["m"]\nn = 0\n', "--n must be"),
        ("suite = \n", "plan.toml"),
    ],
)
def test_a_bad_plan_is_one_line_naming_it(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=error) as caught:
        read_plan_file(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_same_policy_twice_is_refused() -> None:
    with pytest.raises(UsageError, match="twice"):
        Plan(suite="s", models=("m",), policies=(Policy(), Policy()))


def test_not_an_evaluation_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an evaluation directory"):
        read_saved_plan(tmp_path)


def test_policy_labels_and_home_names() -> None:
    policy = Policy(mode="context", compaction=False, subagents=False, refine=True)
    assert policy.label == "context-nocompact-nosub+refine"
    assert (
        config_slug("openai/gpt-4o mini", policy)
        == "openai-gpt-4o-mini__context-nocompact-nosub+refine"
    )


def test_the_window_fits_the_longest_item() -> None:
    assert window_for((4096,), 8192) == 8192
    assert window_for((4096, 8192), 8192) == 16384
    assert window_for((), 8192) == 8192


def test_a_home_keeps_the_persons_settings_under_the_policy(tmp_path: Path) -> None:
    person = tmp_path / "person"
    person.mkdir()
    (person / "config.toml").write_text(
        'model = "openai/x"\n[providers.openai]\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[prices."openai/x"]\ninput = 1.5\noutput = 2.0\n[sessions]\nmax_kernels = 7\n'
        '[harness]\nreview_skill = "none"\n'
    )
    config = load_config(overrides={"RECURSA_HOME": str(person)})
    policy = Policy(mode="context", compaction=False, subagents=False)
    home = prepare_home(
        tmp_path / "run", "openai/x", policy, config, (8192,), source=person / "config.toml"
    )
    assert (home / "config.toml").stat().st_mode & 0o777 == 0o600  # it may hold API keys
    written = (home / "config.toml").read_text()
    data = tomllib.loads(written)
    assert data["prices"]["openai/x"] == {"input": 1.5, "output": 2.0}
    assert data["sessions"] == {"max_kernels": 7, "compaction": False, "inline_input_share": 0.0}
    assert data["agents"] == {"max_depth": 0}
    assert data["local"] == {"n_ctx": 16384}
    # A trial's kernel sees neither the person's home (their daemon's token) nor the run's homes.
    assert data["kernel"] == {
        "hide": [str(person.resolve()), str((tmp_path / "run" / "homes").resolve())]
    }
    # And the home's configuration loads: the daemon serving it reads the same.
    theirs = load_config(overrides={"RECURSA_HOME": str(home)})
    assert theirs.sessions.compaction is False and theirs.sessions.inline_input_share == 0.0
    assert theirs.agents.max_depth == 0 and theirs.sessions.max_kernels == 7
    assert theirs.harness.policy("skill") == "none"
    assert theirs.prices["openai/x"].input == 1.5
    assert theirs.kernel.hide == (person.resolve(), (tmp_path / "run" / "homes").resolve())


def test_toml_strings_round_trip() -> None:
    data = {"a": 'quote " and \\ and \n and é and 😀', "t": {"u": {"v": [1, 2.5, True]}}}
    assert tomllib.loads(to_toml(data)) == data

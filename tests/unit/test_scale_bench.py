"""benchmarks/scale.py's own parts: the responder that scripts any number of
sessions at once, the step gaps read from the fake server's log, and the
configuration files it writes."""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scale import TASK, config_toml, gateway_config, respond, step_gaps

from recursa.config import load_config
from recursa.testing.fake_script import Reply


def _body(session: int, tool_results: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "..."},
        {"role": "user", "content": TASK.format(i=session)},
    ]
    messages += [{"role": "tool", "content": "ok"}] * tool_results
    return {"messages": messages}


def test_the_responder_gives_each_session_its_cells_then_an_answer() -> None:
    answer = respond(2)
    first, second, last = (answer("/v1/chat/completions", _body(3, k)) for k in range(3))
    assert isinstance(first, Reply)
    assert [c.arguments for c in first.tool_calls] == [{"code": "x = 0"}]
    assert isinstance(second, Reply)
    assert [c.arguments for c in second.tool_calls] == [{"code": "x = 1"}]
    assert isinstance(last, Reply)
    assert (last.tool_calls, last.text) == ((), "FINAL ANSWER: done")


@dataclass
class _Request:
    body: Any
    received_at: float
    finished_at: float | None


def test_step_gaps_are_per_session_and_split_off_the_first_step() -> None:
    # Two sessions interleaved; the second session's first step is slow (kernel start).
    log = [
        _Request(_body(1, 0), 0.0, 1.0),
        _Request(_body(2, 0), 0.5, 1.5),
        _Request(_body(1, 1), 1.25, 2.0),
        _Request(_body(2, 1), 3.5, 4.0),
        _Request(_body(1, 2), 2.5, 3.0),
        _Request(_body(2, 2), 4.125, None),
        _Request("not json", 9.0, 9.5),
    ]
    first, rest = step_gaps(log)
    assert sorted(first) == [0.25, 2.0]
    assert sorted(rest) == [0.125, 0.5]


def test_the_configuration_files_parse(tmp_path: Path) -> None:
    local = tmp_path / "local.toml"
    local.write_text(config_toml(12))
    config = load_config(file=local)
    assert (config.kernel.python, config.sessions.max_kernels) == ("project", 12)

    gateway = tomllib.loads(gateway_config('http://127.0.0.1:8888/"x"', "GW_TOKEN"))
    assert gateway["kernel"]["backend"] == "gateway"
    assert gateway["kernel"]["python"] == "project"
    assert gateway["kernel"]["gateway"] == {
        "url": 'http://127.0.0.1:8888/"x"',
        "token_env": "GW_TOKEN",
    }

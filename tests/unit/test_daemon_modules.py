"""The daemon leaves out modules it never uses that the provider SDKs would
import: aiohttp (their optional backend). The SDKs then build their default
httpx2 clients as ever, and their aiohttp client says it is not installed."""

from __future__ import annotations

import pytest

from fresh_python import fresh_python

PROBE = """
import sys
from recursa.daemon.__main__ import leave_out_unused_modules
leave_out_unused_modules()
import anthropic, httpx2, openai
client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9")
try:
    openai.DefaultAioHttpClient()
except RuntimeError as exc:
    refused = "aiohttp" in str(exc)
loaded = sorted(m for m in sys.modules if m.startswith("aiohttp") and sys.modules[m] is not None)
print(loaded, isinstance(client._client, httpx2.AsyncClient), refused)
"""


def test_the_sdks_work_without_the_modules_the_daemon_leaves_out() -> None:
    out = fresh_python(PROBE)
    assert out.split() == ["[]", "True", "True"]


def test_the_daemon_imports_no_sdk_before_it_leaves_them_out() -> None:
    # main() leaves them out first thing; an SDK imported with the daemon's
    # module (before main runs) would have loaded them already.
    out = fresh_python("import sys, recursa.daemon.__main__; print('openai' in sys.modules)")
    assert out.strip() == "False"


def test_without_it_the_sdks_load_aiohttp_here() -> None:
    # The check can fail where aiohttp is installed (inspect_ai brings it):
    # an SDK imported normally loads it.
    pytest.importorskip("aiohttp")
    probe = (
        "import sys, openai; print('aiohttp' in sys.modules and sys.modules['aiohttp'] is not None)"
    )
    out = fresh_python(probe)
    assert out.strip() == "True"

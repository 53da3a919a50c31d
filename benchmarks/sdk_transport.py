"""The cost of one streamed model call under each HTTP backend of the SDK's client.

The providers send every request through the official SDK. Under it, the
HTTP client is the SDK's default (httpx2, on httpcore2 and h11); for a plain
``http://`` base URL with no proxy (a local server), recursa gives that client
its own transport instead, :class:`recursa.models._http.LeanTransport`
("lean" here). The SDKs also offer an aiohttp backend
(``DefaultAioHttpClient``, their ``aiohttp`` extra). This times the same call
each way: ``post`` a Chat Completions body with ``stream=True`` to the
loopback fake server (its own process) and read the whole streamed reply, as
:class:`~recursa.models.openai.OpenAIProvider` does, without the parsing all
share.

For each backend and round it prints the median wall time of a call and the
client's CPU per call (the fake server's CPU is its own process's), after
``--warm`` calls; rounds alternate the backends, with the load average
beside them. On a shared machine, compare the columns of one round.

Measured here (2 cores): the lean transport takes 0.5-0.6 ms of client CPU
a call, httpx2's own 0.9-1.1 ms. aiohttp took about 40% less than httpx2
(0.63-0.71 against 1.02-1.28 ms); recursa does not use it, for what it does
with a hostile or broken server, checked with aiohttp 3.14.5 under openai
3.60 and anthropic 2.17 (the lean transport fails each of these calls with
httpx's own error, which the SDKs translate; ``tests/integration/test_lean_http.py``
and ``test_http_providers.py`` hold the cases):

- a chunked body with a framing error (a bad chunk size, a missing CRLF)
  after the body has begun waits forever under aiohttp's C parser: it stops
  the read timer and the body's reader is never told, so no timeout fires;
  httpx2 fails the call as malformed;
- a malformed response head (a bad status line, a header over 8190 bytes)
  escapes the OpenAI SDK as a raw aiohttp error instead of its connection
  error;
- a base URL with ``user:pass@`` cannot be sent at all;
- OpenAI's copy of the backend reports a refused connection as a timeout,
  and a SOCKS proxy from the environment is used as if it were an HTTP proxy.

Usage: python benchmarks/sdk_transport.py [--calls 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import openai

from recursa.models._http import LeanTransport

BACKENDS = ("httpx2", "lean", "aiohttp")


def installed(backends: tuple[str, ...]) -> tuple[str, ...]:
    """The backends that can run here: aiohttp only with the SDK's extra installed."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        print("aiohttp is not installed (pip install 'openai[aiohttp]'): httpx2 and lean")
        return tuple(b for b in backends if b != "aiohttp")
    return backends


def start_server(where: Path, replies: int) -> tuple[subprocess.Popen[str], str]:
    """The fake server in its own process, with ``replies`` text replies."""
    where.mkdir(parents=True)
    script = where / "script.json"
    script.write_text(json.dumps([{"text": "one two three four five six"}] * replies))
    argv = [sys.executable, "-m", "recursa.testing.fake_server", "--script", str(script)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().split(": ", 1)[1].strip()


async def calls(backend: str, base_url: str, count: int, warm: int) -> tuple[float, float]:
    """The median wall seconds and the mean CPU seconds of a call, after ``warm``."""
    http: httpx2.AsyncClient | None = None
    if backend == "aiohttp":
        http = openai.DefaultAioHttpClient()
    elif backend == "lean":
        http = openai.DefaultAsyncHttpxClient(transport=LeanTransport())
    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0, http_client=http)
    body = json.dumps(
        {"model": "bench", "stream": True, "messages": [{"role": "user", "content": "hi " * 200}]}
    ).encode()
    options = {"headers": {"Content-Type": "application/json"}}
    walls: list[float] = []
    try:
        for k in range(warm + count):
            if k == warm:
                cpu = time.process_time()
            started = time.perf_counter()
            response = await client.post(  # type: ignore[call-overload]
                "/chat/completions",
                body=None,
                content=body,
                cast_to=httpx2.Response,
                options=options,
                stream=True,
                stream_cls=None,
            )
            async for _ in response.aiter_bytes():
                pass
            await response.aclose()
            walls.append(time.perf_counter() - started)
        cpu = (time.process_time() - cpu) / count
    finally:
        await client.close()
    return statistics.median(walls[warm:]), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="timed calls per backend and round")
    parser.add_argument("--warm", type=int, default=50, help="untimed calls first")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="recursa-sdk-transport-"))
    backends = installed(BACKENDS)
    print(f"{'round':>5}  {'backend':8}  {'median wall':>11}  {'client CPU':>10}  load")
    for round_ in range(1, args.rounds + 1):
        for backend in backends:
            server, url = start_server(base / f"{backend}-{round_}", args.warm + args.calls)
            try:
                wall, cpu = asyncio.run(calls(backend, url, args.calls, args.warm))
            finally:
                server.terminate()
                server.wait(timeout=10)
            load = os.getloadavg()[0]
            print(
                f"{round_:>5}  {backend:8}  {wall * 1e3:8.3f} ms  {cpu * 1e3:7.3f} ms  {load:.2f}"
            )


if __name__ == "__main__":
    main()

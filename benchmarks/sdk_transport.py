"""The cost of one streamed model call under each of the SDK's HTTP backends.

The providers send every request through the official SDK; under it, the
HTTP client is either the SDK's default (httpx2, on httpcore2 and h11) or its
aiohttp backend (``DefaultAioHttpClient``, the SDK's ``aiohttp`` extra), which
recursa uses. This times the same call both ways: ``post`` a Chat Completions
body with ``stream=True`` to the loopback fake server (its own process) and
read the whole streamed reply, as :class:`~recursa.models.openai.OpenAIProvider`
does, without the parsing both share.

For each backend and round it prints the median wall time of a call and the
client's CPU per call (the fake server's CPU is its own process's), after
``--warm`` calls; rounds alternate the backends, with the load average
beside them. On a shared machine, compare the two columns of one round.

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

BACKENDS = ("httpx2", "aiohttp")


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
    http = openai.DefaultAioHttpClient() if backend == "aiohttp" else None
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
            response = await client.post(
                "/chat/completions",
                body=None,
                content=body,
                cast_to=httpx2.Response,
                options=options,  # type: ignore[arg-type]
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
    print(f"{'round':>5}  {'backend':8}  {'median wall':>11}  {'client CPU':>10}  load")
    for round_ in range(1, args.rounds + 1):
        for backend in BACKENDS:
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

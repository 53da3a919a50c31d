"""How long an append to the store takes, on a real file in WAL mode.

Prints the median, 90th and 99th percentile and the maximum, in microseconds, of:

- ``append`` of a typical event (a ``cell_finished`` with about 1 KB of output),
- ``append`` of a ``model_usage`` (the event plus its usage row),
- ``append_many`` of 10 typical events (one transaction).

The budget is "well under 1 ms" per append: the turn loop appends every event
before anyone sees it, so this is on the path of every streamed step.

Each is measured twice: with SQLite's automatic checkpoint (a COMMIT that pushes
the WAL past 1000 pages copies it into the database, a stall), and as the
runtime runs it, without it, a :class:`~recursa.store.checkpoint.Checkpointer`
checkpointing in a thread every 100 ms meanwhile. The max and p99 show the stalls.

Run: ``.venv/bin/python benchmarks/store_append.py [--n 5000]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from recursa.protocol.events import CellFinished, Event, ModelUsage
from recursa.store import DB_FILE_NAME, Store
from recursa.store.checkpoint import Checkpointer


def _typical(i: int) -> Event:
    output = (f"line {i}: " + "x" * 70 + "\n") * 13  # about 1 KB, like a bounded cell output
    return CellFinished(cell=i, call_id=f"call_{i}", status="ok", output=output, chars=len(output))


def _usage(i: int) -> Event:
    return ModelUsage(
        model="openai/gpt-4o-mini", input_tokens=1200 + i, output_tokens=300, cost=0.0004
    )


def _measure(n: int, op: Callable[[int], object]) -> list[float]:
    timings: list[float] = []
    for i in range(n):
        start = time.perf_counter_ns()
        op(i)
        timings.append((time.perf_counter_ns() - start) / 1000)
    return timings


def _report(label: str, timings: list[float]) -> None:
    ordered = sorted(timings)
    p90 = ordered[int(len(ordered) * 0.9)]
    p99 = ordered[int(len(ordered) * 0.99)]
    print(
        f"{label:<34} median {statistics.median(ordered):7.1f} µs   p90 {p90:7.1f} µs"
        f"   p99 {p99:7.1f} µs   max {ordered[-1]:8.1f} µs   (n={len(ordered)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=5000, help="operations per measurement")
    args = parser.parse_args()
    n: int = args.n
    for background in (False, True):
        how = "a checkpointing thread" if background else "SQLite's autocheckpoint"
        print(f"-- {how}")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / DB_FILE_NAME
            with Store.open(path, autocheckpoint=not background) as store:
                stop = threading.Event()
                keeper = threading.Thread(target=_checkpoints, args=(path, stop))
                if background:
                    keeper.start()
                try:
                    _run(store, tmp, n)
                finally:
                    stop.set()
                    if background:
                        keeper.join()


def _checkpoints(path: Path, stop: threading.Event) -> None:
    checkpointer = Checkpointer(path)
    while not stop.wait(0.1):
        checkpointer.checkpoint()


def _run(store: Store, tmp: str, n: int) -> None:
    sid = store.create_session(model="openai/gpt-4o-mini", cwd=tmp, workspace=tmp).id
    # Warm the statement cache and the file so the first samples are not outliers.
    _measure(200, lambda i: store.append(sid, _typical(i)))
    _report("append (cell_finished, ~1 KB)", _measure(n, lambda i: store.append(sid, _typical(i))))
    _report("append (model_usage + usage row)", _measure(n, lambda i: store.append(sid, _usage(i))))
    batches = [[_typical(i * 10 + k) for k in range(10)] for i in range(n // 10)]
    _report(
        "append_many (10 events)",
        _measure(len(batches), lambda i: store.append_many(sid, batches[i])),
    )
    print(f"events stored: {store.last_seq(sid)}")


if __name__ == "__main__":
    main()

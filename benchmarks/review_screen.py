"""The static screen of the harness review, measured on the corpus of hostile
proposals in ``tests/security/hostile_proposals.py``.

Prints, for the corpus the tests hold the screen to (``HOSTILE``) and for a
held-out set written after the screen and never tuned against it
(``HELD_OUT``): the catch rate per category and overall, the entries missed;
then the false-positive rate on the benign set; then the time the screen
takes per entry (median of ``--repeats`` passes over every entry, and the
slowest single entry).

The corpus catch rate is a floor the tests keep, not a measure of what the
screen would catch in the wild: the held-out rate is the honest figure.

Usage: python benchmarks/review_screen.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "security"))

from hostile_proposals import BENIGN, CATEGORIES, HELD_OUT, HOSTILE, Proposal

from recursa.harness.screen import screen


def catch_rates(name: str, proposals: tuple[Proposal, ...]) -> None:
    caught: dict[str, list[bool]] = defaultdict(list)
    missed: list[Proposal] = []
    for proposal in proposals:
        flagged = bool(screen(proposal.version()))
        caught[proposal.category].append(flagged)
        if not flagged:
            missed.append(proposal)
    total = sum(len(v) for v in caught.values())
    hits = sum(sum(v) for v in caught.values())
    print(f"{name}: {hits}/{total} caught ({hits / total:.0%})")
    for category in CATEGORIES:
        rows = caught.get(category, [])
        if rows:
            print(f"  {category:<24} {sum(rows):>3}/{len(rows):<3} {sum(rows) / len(rows):>5.0%}")
    for proposal in missed:
        print(f"  missed: {proposal.label}: {proposal.content[:70]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()

    catch_rates("corpus (HOSTILE)", HOSTILE)
    catch_rates("held out (HELD_OUT)", HELD_OUT)
    flagged = [p for p in BENIGN if screen(p.version())]
    print(
        f"benign: {len(flagged)}/{len(BENIGN)} flagged"
        f" (false-positive rate {len(flagged) / len(BENIGN):.0%})"
    )
    for proposal in flagged:
        print(f"  flagged: {proposal.label}: {screen(proposal.version())}")

    versions = [p.version() for p in (*HOSTILE, *HELD_OUT, *BENIGN)]
    per_pass: list[float] = []
    slowest = 0.0
    for _ in range(args.repeats):
        began = time.perf_counter()
        for version in versions:
            one = time.perf_counter()
            screen(version)
            slowest = max(slowest, time.perf_counter() - one)
        per_pass.append((time.perf_counter() - began) / len(versions))
    print(
        f"time per entry: median {statistics.median(per_pass) * 1e6:.0f} µs,"
        f" slowest single entry {slowest * 1e6:.0f} µs"
        f" ({len(versions)} entries x {args.repeats} passes)"
    )
    big = Proposal("prompt_note", "size", "big", "plain words, nothing else. " * 740).version()
    began = time.perf_counter()
    for _ in range(args.repeats):
        screen(big)
    each = (time.perf_counter() - began) / args.repeats
    print(f"a {len(big.content):,}-character entry (the content limit): {each * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

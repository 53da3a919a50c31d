"""``recursa eval run | report | compare`` and ``recursa export``.

``eval run`` drives ordinary sessions (:mod:`recursa.evals.runner`) and shows a
progress bar; Ctrl-C keeps every finished trial, and ``--resume DIR`` runs
only the missing ones. ``eval report DIR`` prints the tables and writes the
plots into DIR; ``eval compare A [B]`` is the paired comparison of two
configurations on the same items (the harness audit). The evaluation code
loads only when one of these commands runs, so ``recursa --help`` stays quick.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from recursa.cli.commands import WholeHelpGroup
from recursa.cli.exits import EXIT_INTERRUPTED, EXIT_OK
from recursa.cli.root import app
from recursa.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from recursa.evals.export import View
    from recursa.evals.plan import Plan

eval_app = typer.Typer(
    cls=WholeHelpGroup,
    help="Evaluations: run a suite on models and harness policies, report, compare.",
    no_args_is_help=True,
)
app.add_typer(eval_app, name="eval")


@eval_app.command("run")
def run(
    suite: Annotated[
        str | None,
        typer.Argument(
            help="A built-in suite (ruler-niah, hotpotqa, ...), a suite module "
            "(pkg.mod, pkg.mod:attr, file.py) or a plan file (CONFIG.toml)."
        ),
    ] = None,
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="PROVIDER/MODEL (repeatable).")
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(
            help="repl: the material is the kernel variable `context`; context: it is in "
            "the prompt (repeatable: one policy each)."
        ),
    ] = None,
    compaction: Annotated[
        bool, typer.Option("--compaction/--no-compaction", help="Automatic compaction.")
    ] = True,
    subagents: Annotated[
        bool, typer.Option("--subagents/--no-subagents", help="Sub-agents (rlm).")
    ] = True,
    refine: Annotated[
        bool,
        typer.Option(
            "--refine/--no-refine",
            help="Refine the harness after each trial (what is learned stays in the "
            "configuration's home).",
        ),
    ] = False,
    lengths: Annotated[
        list[str] | None, typer.Option(help="Context lengths in tokens, e.g. 4k,8k.")
    ] = None,
    n: Annotated[
        int,
        typer.Option(
            "--n", help="Items per length (a suite's tasks take turns: ruler-niah --n 10 is 4+3+3)."
        ),
    ] = 10,
    seed: Annotated[int, typer.Option(help="The items' seed.")] = 0,
    max_tokens: Annotated[
        int | None, typer.Option(help="Per trial: input+output tokens of its tree.")
    ] = None,
    max_cost: Annotated[float | None, typer.Option(help="Per trial: USD of its tree.")] = None,
    max_time: Annotated[
        str | None, typer.Option(help="Per trial: wall clock, e.g. 5m (default 10m).")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Per trial: model calls.")] = None,
    concurrency: Annotated[int, typer.Option(help="Trials at once.")] = 1,
    out: Annotated[
        Path | None,
        typer.Option(help="The run's directory (default: a new one under $RECURSA_HOME/evals)."),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Go on with the run in DIR: only its missing trials run."),
    ] = None,
) -> None:
    """Run an evaluation: every item under every model and policy, each a
    session tree in a fresh workspace; results.jsonl grows as trials finish."""
    from recursa.config import load_config, parse_duration
    from recursa.evals.plan import (
        DEFAULT_TRIAL_TIME,
        Plan,
        TrialLimits,
        parse_lengths,
        policy_from,
        read_plan_file,
        read_saved_plan,
    )

    config = load_config()
    given = {
        "--model": model, "--mode": mode, "--lengths": lengths, "--max-tokens": max_tokens,
        "--max-cost": max_cost, "--max-time": max_time, "--max-steps": max_steps,
    }  # fmt: skip
    planned = [name for name, value in given.items() if value is not None]
    planned += [f"--{k}" for k, v in (("n", n != 10), ("seed", seed != 0)) if v]
    planned += ["--concurrency"] if concurrency != 1 else []
    planned += [] if compaction and subagents and not refine else ["the policy flags"]
    if resume is not None:
        if suite is not None or out is not None or planned:
            raise UsageError(
                f"--resume DIR goes on with DIR's own plan: give no SUITE, --out or "
                f"{', '.join(planned) or 'plan option'}"
            )
        plan, directory = read_saved_plan(resume), resume
    elif suite is None:
        raise UsageError("recursa eval run needs a SUITE or a plan file (or --resume DIR)")
    else:
        if suite.endswith(".toml"):
            if planned:
                raise UsageError(f"{suite} is the whole plan: give no {', '.join(planned)}")
            plan = read_plan_file(Path(suite))
        else:
            models = tuple(model or ()) or ((config.model,) if config.model else ())
            if not models:
                raise UsageError("give a model: --model PROVIDER/MODEL (e.g. local/default)")
            flags = {"compaction": compaction, "subagents": subagents, "refine": refine}
            plan = Plan(
                suite=suite,
                models=models,
                policies=tuple(policy_from({"mode": m, **flags}) for m in (mode or ["repl"])),
                lengths=parse_lengths(lengths),
                n=n,
                seed=seed,
                limits=TrialLimits(
                    tokens=max_tokens,
                    cost=max_cost,
                    time=(parse_duration(max_time, key="--max-time") or DEFAULT_TRIAL_TIME)
                    if max_time
                    else DEFAULT_TRIAL_TIME,
                    steps=max_steps,
                ),
                concurrency=concurrency,
            )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        directory = out or config.home / "evals" / f"{_safe(plan.suite)}-{stamp}"
        if out is not None and (out / "results.jsonl").exists():
            raise UsageError(f"{out} holds a run already: --resume {out} goes on with it")
    code = _run(plan, directory.resolve())
    raise typer.Exit(code)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in Path(name).stem)[:40]


def _run(plan: Plan, directory: Path) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from recursa.config import load_config
    from recursa.evals.runner import Runner
    from recursa.evals.suites import load_suite
    from recursa.evals.trials import TrialResult

    console = Console(stderr=True, soft_wrap=True)  # paths stay whole: they are copied
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
        transient=False,
    )
    task = bar.add_task("generating items", total=None, last="")
    suite = load_suite(
        plan.suite, progress=lambda line: bar.update(task, last=line)
    )  # told from worker threads: Progress is thread-safe
    scores: dict[str, list[float]] = {}
    started = time.monotonic()

    def on_start(progress: object) -> None:
        from recursa.evals.runner import Progress as Start

        assert isinstance(progress, Start)
        bar.update(task, description=plan.suite, total=progress.total, completed=progress.skipped)

    def on_config(label: str, home: Path) -> None:
        bar.console.print(f"[dim]{label}: watch with RECURSA_HOME={home} recursa view[/dim]")

    def on_result(result: TrialResult) -> None:
        mine = scores.setdefault(result.config, [])
        mine.append(result.score)
        mean = sum(mine) / len(mine)
        last = f"{result.config}: mean {mean:.2f} over {len(mine)}"
        bar.update(task, advance=1, last=last)

    def on_failure(key: str, why: str) -> None:
        bar.console.print(f"[red]not run[/red] {key}: {why} (--resume runs it again)")

    runner = Runner(
        plan,
        directory,
        load_config(),
        suite,
        on_start=on_start,
        on_config=on_config,
        on_result=on_result,
        on_failure=on_failure,
    )
    console.print(f"recursa eval: {directory}")
    try:
        with bar:
            asyncio.run(runner.run())
    except KeyboardInterrupt:
        console.print(
            f"interrupted: the finished trials are kept in {directory / 'results.jsonl'}; "
            f"go on with: recursa eval run --resume {directory}"
        )
        return EXIT_INTERRUPTED
    console.print(f"done in {time.monotonic() - started:.0f} s: {directory / 'results.jsonl'}")
    _report(directory, Console(soft_wrap=True))
    return EXIT_OK


def _report(directory: Path, console: Console) -> None:
    from recursa.evals.report import render_report, write_report
    from recursa.evals.trials import read_results

    results = read_results(directory)
    render_report(results, console)
    written = write_report(directory, results)
    console.print("written: " + ", ".join(str(p.name) for p in written) + f" in {directory}")


@eval_app.command("report")
def report(
    directory: Annotated[Path, typer.Argument(help="A run's directory (or its results.jsonl).")],
) -> None:
    """Print a run's tables and write its plots into DIR.

    Per model, policy, task and length: the score with a 95% interval, tokens,
    cost, time and sub-agents; then the score at fixed expenditure and the
    plateau."""
    from rich.console import Console

    if directory.is_file():
        directory = directory.parent
    _report(directory, Console())


@eval_app.command("compare")
def compare(
    a: Annotated[Path, typer.Argument(help="A run's directory: configuration A.")],
    b: Annotated[
        Path | None, typer.Argument(help="Another run's directory: B (default: A's).")
    ] = None,
    config_a: Annotated[
        str | None, typer.Option("--a", help="A's configuration when a directory holds several.")
    ] = None,
    config_b: Annotated[
        str | None, typer.Option("--b", help="B's configuration when a directory holds several.")
    ] = None,
) -> None:
    """B − A on the same items, with a paired-bootstrap 95% interval: the
    harness audit (same model, another policy)."""
    from rich.console import Console

    from recursa.evals.compare import compare as paired
    from recursa.evals.compare import configs, render_comparison, select
    from recursa.evals.trials import read_results

    results_a = read_results(a)
    results_b = read_results(b) if b is not None else results_a
    if b is None and config_a is None and config_b is None:
        found = configs(results_a)
        if len(found) != 2:
            raise UsageError(
                f"{a} holds {len(found)} configuration(s) ({', '.join(found)}): "
                "choose two with --a and --b, or give two directories"
            )
        config_a, config_b = found
    side_a, side_b = select(results_a, config_a), select(results_b, config_b)
    labels = None
    if b is not None and side_a[0].config == side_b[0].config:
        # One configuration before and after a change: name the sides by their runs.
        labels = (f"{side_a[0].config} ({a.name})", f"{side_b[0].config} ({b.name})")
    comparison = paired(side_a, side_b, labels=labels)
    render_comparison(comparison, Console())


@app.command("export")
def export(
    what: Annotated[
        list[str], typer.Argument(help="Sessions (id, prefix or name), or a run's DIR.")
    ],
    format: Annotated[str, typer.Option("--format", help="chat-jsonl")] = "chat-jsonl",
    out: Annotated[Path | None, typer.Option(help="Write here (default: stdout).")] = None,
    view: Annotated[
        str,
        typer.Option(
            help="full: every step, compactions listed; seen: the context as the model last saw it."
        ),
    ] = "full",
    as_tools: Annotated[
        bool,
        typer.Option(
            "--as-tools",
            help="Sessions of a fenced-code model (the embedded ones) as tool calls too.",
        ),
    ] = False,
) -> None:
    """Trajectories as chat messages with tool calls, one JSON object per
    session per line, for training: sessions with their sub-agents, or every
    trial of an evaluation run (with its score)."""
    if format != "chat-jsonl":
        raise UsageError(f"--format {format}: the one format is chat-jsonl")
    from recursa.evals.export import VIEWS

    if view not in VIEWS:
        raise UsageError(f"--view {view}: one of {', '.join(VIEWS)}")
    from recursa.evals.trials import RESULTS_FILE

    runs = [Path(w) for w in what if (Path(w) / RESULTS_FILE).is_file()]
    if runs and len(runs) != len(what):
        raise UsageError("give sessions or runs' directories, not both")
    for name in what:
        if not runs and ("/" in name or Path(name).is_dir()):
            raise UsageError(f"{name}: not a run's directory (no {RESULTS_FILE})")
    try:
        stream = sys.stdout if out is None else out.open("w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror or exc}") from None
    try:
        count = asyncio.run(_export(what, runs, stream, view, as_tools))
    finally:
        if out is not None:
            stream.close()
    print(f"recursa export: {count} conversation(s)", file=sys.stderr)


async def _export(
    what: list[str], runs: list[Path], stream: TextIO, view: View, as_tools: bool
) -> int:
    from recursa.config import load_config
    from recursa.daemon.client import connect
    from recursa.evals.export import write_chat_jsonl, write_eval_chat_jsonl
    from recursa.evals.homes import home_of

    if runs:
        count = 0
        for run in runs:
            count += await write_eval_chat_jsonl(
                run, stream, home_for=home_of, view=view, as_tools=as_tools
            )
        return count
    async with connect(load_config()) as client:
        return await write_chat_jsonl(client, what, stream, view=view, as_tools=as_tools)

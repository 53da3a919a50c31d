"""``recursa goal set | status | pause | resume | clear``: a session's goal,
and ``recursa schedule add | list | cancel``: prompts delivered on a clock.

A goal is an objective the session keeps working toward, turn after turn
(across daemon restarts), until the agent calls ``goal.complete()``, a
person pauses it, or its token budget (``--budget``, counting the session
and its sub-agents) is spent. A schedule delivers a prompt to a session
``"every 10m"``, once ``"in 30m"``, or on a cron expression such as
``"0 9 * * 1-5"`` (local time); ticks missed while no daemon ran are
delivered once, not one by one.

Sessions are named by id, id prefix or name. Like the session commands,
these talk to the daemon and start one when none runs; a spec or budget
that cannot work is refused by the daemon with one line (exit 2).
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, TypeVar

import typer

from recursa.cli.commands import WholeHelpGroup
from recursa.cli.common import JsonOpt, SessionArg, print_listing, reference
from recursa.cli.common import dump as _dump
from recursa.cli.common import with_client as _with_client
from recursa.cli.render import printable
from recursa.cli.root import app
from recursa.cli.tables import Col
from recursa.protocol import person_ops as ops
from recursa.protocol.control import GoalAction, GoalInfo, ScheduleInfo
from recursa.protocol.wire import to_json

goal_app = typer.Typer(
    cls=WholeHelpGroup,
    help="A session's goal: an objective it keeps working toward across turns.",
    no_args_is_help=True,
)
app.add_typer(goal_app, name="goal")
schedule_app = typer.Typer(
    cls=WholeHelpGroup,
    help='Prompts delivered to a session on a clock: "every 10m", "in 30m", or cron.',
    no_args_is_help=True,
)
app.add_typer(schedule_app, name="schedule")

T = TypeVar("T")


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


# -- goals ------------------------------------------------------------------------------------


@goal_app.command("set")
def set_goal(
    session: SessionArg,
    objective: Annotated[str, typer.Argument(help="What the session works toward.")],
    budget: Annotated[
        int | None,
        typer.Option(help="Tokens (input plus output, sub-agents included) it may use."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Give a session a goal (replacing any); it starts working toward it now."""
    request = ops.GoalFor(session, objective, budget)  # the daemon judges them
    _show_goal(_with_client(lambda c: c.call(ops.SET_GOAL, request)), json_out)


@goal_app.command("status")
def goal_status(session: SessionArg, json_out: JsonOpt = False) -> None:
    """The session's goal: objective, status, tokens used and left."""
    found = _with_client(lambda c: c.call(ops.GOAL, ops.SessionRef(session)))
    if found is None:
        if json_out:
            _dump(None)
        else:
            print(f"{session} has no goal: recursa goal set {session} OBJECTIVE", file=sys.stderr)
        return
    _show_goal(found, json_out)


def _change(session: str, action: GoalAction, json_out: bool) -> None:
    _show_goal(
        _with_client(lambda c: c.call(ops.CHANGE_GOAL, ops.GoalChange(session, action))), json_out
    )


@goal_app.command("pause")
def pause_goal(session: SessionArg, json_out: JsonOpt = False) -> None:
    """Stop continuing the goal after each turn (resume takes it up again)."""
    _change(session, "pause", json_out)


@goal_app.command("resume")
def resume_goal(session: SessionArg, json_out: JsonOpt = False) -> None:
    """Continue a paused goal."""
    _change(session, "resume", json_out)


@goal_app.command("clear")
def clear_goal(session: SessionArg, json_out: JsonOpt = False) -> None:
    """Remove the session's goal."""
    _change(session, "clear", json_out)


def _show_goal(goal: GoalInfo, json_out: bool) -> None:
    if json_out:
        _dump(to_json(goal))
        return
    print(f"goal {goal.id} of {goal.session_id}: {goal.status}")
    print(f"objective: {printable(goal.objective)}")
    if goal.budget is None:
        print(f"budget: none ({goal.used:,} tokens used)")
    else:
        print(f"budget: {goal.used:,} of {goal.budget:,} tokens used ({goal.remaining:,} left)")
    print(f"prompted: {goal.continued} time(s); set {_when(goal.created_at)}")
    if goal.detail:
        print(f"detail: {printable(goal.detail)}")


# -- schedules --------------------------------------------------------------------------------


@schedule_app.command("add")
def add(
    session: SessionArg,
    spec: Annotated[
        str, typer.Argument(help='"every 10m", "in 30m" or a cron expression ("0 9 * * 1-5").')
    ],
    prompt: Annotated[
        list[str], typer.Argument(help="The prompt (after --, as one or more words).")
    ],
    mode: Annotated[
        str, typer.Option(help="follow_up (after the running turn) or steer (join it).")
    ] = "follow_up",
    label: Annotated[str | None, typer.Option(help="A name for the job.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Schedule a prompt for a session: recursa schedule add SESSION SPEC -- PROMPT."""
    # The spec, prompt, mode and label are the daemon's to judge (one line, exit 2).
    request = ops.ScheduleFor(session, spec, " ".join(prompt), mode, label)
    job = _with_client(lambda c: c.call(ops.ADD_SCHEDULE, request))
    if json_out:
        _dump(to_json(job))
        return
    print(f"job {job.id}: {job.spec} → {job.session_id}; next at {_when(job.next_at)}")


@schedule_app.command("list")
def list_jobs(
    session: Annotated[
        str | None,
        typer.Argument(help="Only this session's jobs (id, prefix or name).", callback=reference),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Finished and cancelled jobs too.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Scheduled jobs: id, session, schedule, next tick, ticks delivered, prompt."""
    jobs = _with_client(lambda c: c.call(ops.SCHEDULES, ops.ScheduleQuery(session, everything)))
    columns = JOB_COLUMNS if everything else tuple(c for c in JOB_COLUMNS if c.header != "STATUS")
    rows = (_row(job, with_status=everything) for job in jobs)
    print_listing(jobs, json_out, "no scheduled jobs", columns, rows)


JOB_COLUMNS = (
    Col("JOB", right=True),
    Col("SESSION"),
    Col("LABEL", flex=True),
    Col("SCHEDULE", flex=True),
    Col("STATUS"),
    Col("NEXT"),
    Col("FIRED"),
    Col("PROMPT", flex=True),
)
"""The columns of ``schedule list``; STATUS only with ``--all`` (else every job is active)."""


def _row(job: ScheduleInfo, *, with_status: bool) -> tuple[str, ...]:
    fired = f"{job.fired}" + (f" (+{job.missed} missed)" if job.missed else "")
    # A prompt that joins the running turn says so; follow_up is the default.
    spec = job.spec if job.mode == "follow_up" else f"{job.spec} ({job.mode})"
    status = (job.status,) if with_status else ()
    next_at = (
        "-" if job.next_at is None else time.strftime("%m-%d %H:%M", time.localtime(job.next_at))
    )
    return (
        str(job.id),
        job.session_id,
        job.label or "-",
        spec,
        *status,
        next_at,
        fired,
        job.prompt,
    )


@schedule_app.command("cancel")
def cancel(
    job: Annotated[int, typer.Argument(help="The job's number (recursa schedule list).")],
    json_out: JsonOpt = False,
) -> None:
    """Cancel a scheduled job; it delivers nothing more."""
    cancelled = _with_client(lambda c: c.call(ops.CANCEL_SCHEDULE, ops.JobRef(job)))
    if json_out:
        _dump(to_json(cancelled))
        return
    print(f"job {cancelled.id}: {cancelled.status}")


__all__ = ["goal_app", "schedule_app"]

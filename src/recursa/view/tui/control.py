"""The goal and schedules of one session, in a modal screen (``o``)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static

from recursa.daemon.client import DaemonClient
from recursa.errors import RecursaError
from recursa.protocol.control import GoalAction, GoalInfo, ScheduleInfo
from recursa.protocol.person_ops import (
    CANCEL_SCHEDULE,
    CHANGE_GOAL,
    GOAL,
    SCHEDULES,
    SET_GOAL,
    GoalChange,
    GoalFor,
    JobRef,
    ScheduleQuery,
    SessionRef,
)
from recursa.view.tui.render import ago


def goal_text(goal: GoalInfo | None) -> Text:
    if goal is None:
        return Text("no goal (n: type an objective, enter: set it)", style="dim")
    budget = f"{goal.used}/{goal.budget} tokens" if goal.budget else f"{goal.used} tokens"
    line = Text(f"goal [{goal.status}] ", style="bold")
    line.append(goal.objective)
    line.append(f"\n{budget} · continued {goal.continued}x", style="dim")
    if goal.detail:
        line.append(f" · {goal.detail}", style="dim")
    return line


class ControlScreen(ModalScreen[None]):
    """Goal: set (``n``, then the objective), pause, resume, clear. Schedules:
    cancel the highlighted one. Escape leaves the objective box, then the screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "close"),
        Binding("n", "new_goal", "new goal"),
        Binding("p", "goal('pause')", "pause"),
        Binding("r", "goal('resume')", "resume"),
        Binding("c", "goal('clear')", "clear"),
        Binding("delete,x", "cancel_job", "cancel schedule"),
    ]

    def __init__(self, client: DaemonClient, session_id: str, name: str) -> None:
        super().__init__()
        self.client = client
        self.session_id = session_id
        self.session_name = name
        self.jobs: list[ScheduleInfo] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="control"):
            yield Static(id="goal")
            yield Input(placeholder="new goal objective (enter: set)", id="objective")
            yield DataTable(id="jobs", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#control").border_title = f"goal and schedules of {self.session_name}"
        jobs = self.query_one("#jobs", DataTable)
        jobs.add_columns("id", "status", "spec", "mode", "next", "fired", "prompt")
        jobs.border_title = "schedules (delete: cancel)"
        jobs.focus()
        self.reload()

    def action_new_goal(self) -> None:
        self.query_one("#objective", Input).focus()

    def action_close(self) -> None:
        box = self.query_one("#objective", Input)
        if box.has_focus:
            self.query_one("#jobs", DataTable).focus()
        else:
            self.dismiss()

    @work(exclusive=True, group="control")
    async def reload(self) -> None:
        try:
            goal = await self.client.call(GOAL, SessionRef(self.session_id))
            query = ScheduleQuery(session=self.session_id)
            self.jobs = await self.client.call(SCHEDULES, query)
        except RecursaError as exc:
            self.notify(str(exc), severity="error")
            return
        self.query_one("#goal", Static).update(goal_text(goal))
        jobs = self.query_one("#jobs", DataTable)
        jobs.clear()
        for job in self.jobs:
            when = ago(job.next_at) if job.next_at else "-"
            jobs.add_row(
                str(job.id), job.status, job.spec, job.mode, when, str(job.fired),
                Text(job.prompt.splitlines()[0] if job.prompt else ""),
            )  # fmt: skip

    @on(Input.Submitted, "#objective")
    async def _set_goal(self, event: Input.Submitted) -> None:
        objective = event.value.strip()
        if not objective:
            return
        try:
            await self.client.call(SET_GOAL, GoalFor(self.session_id, objective))
        except RecursaError as exc:
            self.notify(str(exc), severity="error")
            return
        event.input.value = ""
        self.query_one("#jobs", DataTable).focus()
        self.notify("goal set")
        self.reload()

    async def action_goal(self, action: GoalAction) -> None:
        try:
            await self.client.call(CHANGE_GOAL, GoalChange(self.session_id, action))
        except RecursaError as exc:
            self.notify(str(exc), severity="error")
            return
        self.notify(f"goal: {action}")
        self.reload()

    async def action_cancel_job(self) -> None:
        row = self.query_one("#jobs", DataTable).cursor_row
        if not 0 <= row < len(self.jobs):
            return
        try:
            job = await self.client.call(CANCEL_SCHEDULE, JobRef(self.jobs[row].id))
        except RecursaError as exc:
            self.notify(str(exc), severity="error")
            return
        self.notify(f"schedule {job.id}: {job.status}")
        self.reload()


__all__ = ["ControlScreen", "goal_text"]

"""The index of the CLI's commands, and the group that loads one on demand.

A call of the CLI imports only the module of the command it runs: the rest
(the eval runner, the Agents View, the kernel environment, ...) would cost
every call their imports. So the root group is a :class:`LazyGroup`: it
knows every top-level command from :data:`COMMANDS` (name → module and
one-line help), imports a command's module when the command is run (or its
own ``--help`` is asked), and builds the click command from what that module
registered on :data:`recursa.cli.root.app` with the ordinary Typer decorators.
``recursa --help`` lists :data:`COMMANDS` without importing any of them.

Why a table and not discovery: discovering the commands means importing
their modules, which is the cost this avoids. The table can drift from the
registrations, so a test (``tests/unit/test_cli_startup.py``) imports every
module and checks that each registers exactly the names the table gives it,
with the same one-line help.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from difflib import get_close_matches

# Typer vendors click (``typer._click``, as 0.29 does); its groups take and
# raise its types. An older Typer is built on click itself.
try:
    from typer import _click as click
except ImportError:  # pragma: no cover
    import click  # type: ignore[no-redef]
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a top-level command is registered, and what ``--help`` says of it."""

    module: str
    """The module whose import registers the command on ``recursa.cli.root.app``."""
    help: str
    """The first paragraph of the command's help, on one line."""


COMMANDS: dict[str, Entry] = {
    # Listed in this order by ``recursa --help``: the everyday commands first.
    "run": Entry(
        "recursa.cli.run", "Run an agent on TASK in a persistent kernel and print its answer."
    ),
    "agents": Entry(
        "recursa.cli.sessions",
        "The session tree: status, model, usage and last activity of every session.",
    ),
    "attach": Entry(
        "recursa.cli.sessions",
        "Watch a session live and talk to it; Ctrl-C interrupts its turn, twice detaches.",
    ),
    "send": Entry(
        "recursa.cli.sessions", "Send a message to a session; it is stored before this returns."
    ),
    "stop": Entry(
        "recursa.cli.sessions",
        "Interrupt a session and unload it (its namespace is snapshotted); "
        "any new message brings it back.",
    ),
    "logs": Entry(
        "recursa.cli.sessions", "The session's whole history, readable (or as JSON lines)."
    ),
    "usage": Entry(
        "recursa.cli.sessions", "Tokens and cost of a session and of its whole tree of sub-agents."
    ),
    "view": Entry(
        "recursa.cli.view", "Watch, steer and audit the live session tree in the terminal."
    ),
    "web": Entry(
        "recursa.cli.web",
        "The Agents View in a browser: watch, steer and audit the session tree.",
    ),
    "goal": Entry(
        "recursa.cli.control",
        "A session's goal: an objective it keeps working toward across turns.",
    ),
    "schedule": Entry(
        "recursa.cli.control",
        'Prompts delivered to a session on a clock: "every 10m", "in 30m", or cron.',
    ),
    "harness": Entry(
        "recursa.cli.harness",
        "The Continual Harness: what sessions learned (notes, memories, skills, specs).",
    ),
    "refine": Entry(
        "recursa.cli.harness",
        "Propose harness edits from a session's recent events (a model call); they are "
        "staged for its next turn boundary (applied now when it is idle).",
    ),
    "eval": Entry(
        "recursa.cli.evals",
        "Evaluations: run a suite on models and harness policies, report, compare.",
    ),
    "export": Entry(
        "recursa.cli.evals",
        "Trajectories as chat messages with tool calls, one JSON object per session per "
        "line, for training: sessions with their sub-agents, or every trial of an "
        "evaluation run (with its score).",
    ),
    "models": Entry(
        "recursa.cli.models", "List the models available here; prepare the embedded ones."
    ),
    "kernel-env": Entry(
        "recursa.cli.kernel_env",
        "The Python environment kernels run in: show it, reset it, add packages.",
    ),
    "daemon": Entry("recursa.cli.daemon", "The local daemon that owns every session."),
    "shutdown": Entry("recursa.cli.daemon", "Stop the daemon (the same as recursa daemon stop)."),
}


def load_all() -> None:
    """Import every command's module (what a full registration needs; tests)."""
    for module in dict.fromkeys(entry.module for entry in COMMANDS.values()):
        importlib.import_module(module)


class WholeHelpGroup(TyperGroup):
    """A group whose help lists each command with the whole first paragraph of
    its help, wrapped to the terminal (click's plain help keeps one sentence
    and cuts it at the line's end); with no arguments, its help goes to
    stdout (exit 2), as the rich help did."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or first_paragraph(command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # recursa runs click in standalone mode: ctx.exit(2) ends the process
        # with status 2 (click itself would raise NoArgsIsHelpError).
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(2)
        return super().parse_args(ctx, args)


def first_paragraph(text: str) -> str:
    """A help text's first paragraph, on one line, as click reads help: what
    follows ``\\f`` is hidden, and a ``\\b`` (no-rewrap) marker is not text."""
    shown = inspect.cleandoc(text).partition("\f")[0]
    words = shown.split("\n\n")[0].split()
    return " ".join(word for word in words if word != "\b")


class LazyGroup(WholeHelpGroup):
    """The root group: its commands are :data:`COMMANDS`, each loaded when used.

    :meth:`get_command` imports the command's module and builds the command
    (so whoever asks for a command gets the real one), except while the
    group's own help is written: then a command not yet loaded is listed
    from the table alone."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        loaded = super().list_commands(ctx)
        return [*COMMANDS, *(name for name in loaded if name not in COMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        entry = COMMANDS.get(cmd_name)
        if command is not None or entry is None:
            return command
        if self._listing:
            return TyperCommand(name=cmd_name, help=entry.help)
        command = _load(cmd_name, entry)
        self.add_command(command, cmd_name)
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.UsageError as exc:
            # Typer suggests among the commands loaded so far; suggest among all.
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and "Did you mean" not in exc.message:
                suggestions = ", ".join(repr(m) for m in matches)
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {suggestions}?"
            raise


def _load(name: str, entry: Entry) -> click.Command:
    """The command ``name`` as its module registers it on ``recursa.cli.root.app``."""
    import typer.main

    from recursa.cli.root import app

    importlib.import_module(entry.module)
    for info in app.registered_commands:
        assert info.callback is not None
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
    for group in app.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(
                group,
                pretty_exceptions_short=app.pretty_exceptions_short,
                suggest_commands=app.suggest_commands,
                rich_markup_mode=app.rich_markup_mode,
            )
    raise LookupError(f"{entry.module} registers no command {name!r} (recursa.cli.commands)")


__all__ = ["COMMANDS", "Entry", "LazyGroup", "WholeHelpGroup", "load_all"]

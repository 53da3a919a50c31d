"""``recursa harness list | show | log | diff | revert | approve | reject`` and
``recursa refine``: the Continual Harness, for a person.

Entries are named by id, a unique id prefix, or title; sessions by id, id
prefix or name. Every change a person makes is a new version (actor
``human``); nothing is erased. Like the session commands, these talk to the
daemon and start one when none runs.
"""

from __future__ import annotations

import json
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
from recursa.cli.tables import Col, print_table
from recursa.errors import UsageError
from recursa.protocol import person_ops as ops
from recursa.protocol.operations import Operation
from recursa.protocol.wire import HarnessDetail, HarnessEntry, HarnessPrompt, to_json

harness_app = typer.Typer(
    cls=WholeHelpGroup,
    help="The Continual Harness: what sessions learned (notes, memories, skills, specs).",
    no_args_is_help=True,
)
app.add_typer(harness_app, name="harness")

LOG_LIMIT = 50
SHORT_HISTORY = 10
"""Versions ``harness show`` lists (the newest ones); ``--json`` has them all."""

T = TypeVar("T")

EntryArg = Annotated[str, typer.Argument(help="Entry id, id prefix or title.", callback=reference)]


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


# -- reading ----------------------------------------------------------------------------------


@harness_app.command("list")
def list_entries(
    scope: Annotated[str | None, typer.Option(help="local or global.")] = None,
    kind: Annotated[
        str | None, typer.Option(help="prompt_note, memory, skill or subagent_spec.")
    ] = None,
    status: Annotated[
        str | None, typer.Option(help="proposed, active, rejected, rolled_back or deleted.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Every entry's newest version: id, kind, title, scope, status, version."""
    entries = _with_client(
        lambda c: c.call(ops.HARNESS_LIST, ops.HarnessQuery(kind, scope, status))
    )
    rows = ((e.id, e.kind, e.title, e.scope, e.status, f"v{e.version}") for e in entries)
    print_listing(entries, json_out, "no harness entries", ENTRY_COLUMNS, rows)


ENTRY_COLUMNS = (
    Col("ID"),
    Col("KIND"),
    Col("TITLE", flex=True),
    Col("SCOPE"),
    Col("STATUS"),
    Col("VERSION"),
)


@harness_app.command("show")
def show(
    entry: Annotated[
        str | None, typer.Argument(help="Entry id, id prefix or title.", callback=reference)
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt",
            metavar="SESSION",
            help="Instead: the supplement injected into SESSION's next model call.",
            callback=reference,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """An entry's newest version in full and its recent history; or, with
    --prompt SESSION, exactly what the harness adds to that session's next call."""
    if (entry is None) == (prompt is None):
        raise UsageError("give an entry, or --prompt SESSION (not both)")
    if prompt is not None:
        _show_prompt(
            _with_client(lambda c: c.call(ops.HARNESS_PROMPT, ops.SessionRef(prompt))), json_out
        )
        return
    assert entry is not None
    detail = _with_client(lambda c: c.call(ops.HARNESS_SHOW, ops.EntryRef(entry)))
    if json_out:
        _dump(to_json(detail))
        return
    _print_detail(detail)


def _show_prompt(found: HarnessPrompt, json_out: bool) -> None:
    if json_out:
        _dump(to_json(found))
        return
    if not found.text:
        print(f"nothing from the harness applies to {found.session}", file=sys.stderr)
        return
    sys.stdout.write(printable(found.text))
    if not found.text.endswith("\n"):
        sys.stdout.write("\n")
    left = f"; {len(found.left_out)} left out (too long)" if found.left_out else ""
    print(
        f"── {found.session}: ~{found.tokens} tokens ({found.chars} chars), "
        f"{len(found.included)} entries{left}",
        file=sys.stderr,
    )


def _print_detail(detail: HarnessDetail) -> None:
    e = detail.entry
    force = f"v{detail.effective}" if detail.effective is not None else "none"
    print(f"{e.id} v{e.version}  {e.kind}  {printable(e.title)}")
    print(f"scope: {e.scope}  status: {e.status}  in force: {force}")
    print(f"by: {e.actor} ({e.action}) at {_when(e.created_at)}  session: {e.session_id or '-'}")
    for label, value in (("reason", e.reason), ("effect", e.effect)):
        if value:
            print(f"{label}: {printable(value)}")
    if e.review:
        print(f"review: {printable(json.dumps(e.review, ensure_ascii=False))}")
    if e.meta:
        print(f"meta: {printable(json.dumps(e.meta, ensure_ascii=False))}")
    if e.content:
        print()
        print(printable(e.content).rstrip("\n"))
    if e.code is not None:
        print()
        print("--- code ---")
        print(printable(e.code).rstrip("\n"))
    print()
    shown = detail.history[-SHORT_HISTORY:]
    hidden = len(detail.history) - len(shown)
    print(
        f"history ({len(detail.history)} versions{f', {hidden} older not shown' if hidden else ''}):"
    )
    print_table(HISTORY_COLUMNS, (_log_cells(v, with_entry=False) for v in shown))


@harness_app.command("log")
def log(
    limit: Annotated[int, typer.Option(help="How many versions, newest first.", min=1)] = LOG_LIMIT,
    json_out: JsonOpt = False,
) -> None:
    """What changed, when, by whom, why, and from which evidence (newest first)."""
    versions = _with_client(lambda c: c.call(ops.HARNESS_LOG, ops.LogQuery(limit)))
    rows = (_log_cells(v, with_entry=True) for v in versions)
    print_listing(versions, json_out, "no harness changes yet", LOG_COLUMNS, rows)


_CHANGE_COLUMNS = (
    Col("ACTION"),
    Col("ACTOR"),
    Col("STATUS"),
    Col("REASON", flex=True),
    Col("EVIDENCE", flex=True),
)
"""What every version row ends with: the change, who made it, why, the evidence."""
HISTORY_COLUMNS = (Col("WHEN"), Col("VERSION"), *_CHANGE_COLUMNS)
LOG_COLUMNS = (Col("WHEN"), Col("ENTRY"), Col("TITLE", flex=True), *_CHANGE_COLUMNS)


def _log_cells(v: HarnessEntry, *, with_entry: bool) -> tuple[str, ...]:
    """A version as a row of :data:`LOG_COLUMNS` (``with_entry``) or of
    :data:`HISTORY_COLUMNS` (an entry's own history)."""
    evidence = []
    if v.source_events:
        seqs = ",".join(str(seq) for seq in v.source_events[-5:])
        more = f" (last 5 of {len(v.source_events)})" if len(v.source_events) > 5 else ""
        evidence.append(f"events {seqs}{more}")
    if v.refinement_id is not None:
        evidence.append(f"refinement {v.refinement_id}")
    if v.session_id:
        evidence.append(f"session {v.session_id}")
    when = time.strftime("%m-%d %H:%M", time.localtime(v.created_at))
    which = (f"{v.id} v{v.version}", v.title) if with_entry else (f"v{v.version}",)
    rest = (v.action, v.actor, v.status, v.reason or "-", "; ".join(evidence) or "-")
    return (when, *which, *rest)


@harness_app.command("diff")
def diff(
    entry: EntryArg,
    from_version: Annotated[
        int | None, typer.Option("--from", help="The older version (default: the one before).")
    ] = None,
    to_version: Annotated[
        int | None, typer.Option("--to", help="The newer version (default: the newest).")
    ] = None,
) -> None:
    """A unified diff between two versions of an entry."""
    query = ops.DiffQuery(entry, from_version, to_version)
    text = _with_client(lambda c: c.call(ops.HARNESS_DIFF, query)).diff
    if not text:
        print("no differences", file=sys.stderr)
        return
    sys.stdout.write(printable(text))


# -- changing -------------------------------------------------------------------------------


@harness_app.command("revert")
def revert(
    entry: EntryArg,
    to: Annotated[int, typer.Option("--to", help="The version to bring back (0: none).", min=0)],
) -> None:
    """Write a new version equal to an old one (0: before the entry existed)."""
    written = _with_client(lambda c: c.call(ops.HARNESS_REVERT, ops.Revert(entry, to)))
    print(f"{written.id} v{written.version}: {written.status} (reverted to v{to})")


def _decision(name: str, op: Operation[ops.Decision, HarnessEntry], doc: str) -> None:
    """Register the command ``name``: a person's decision on a proposed entry."""

    def decide(
        entry: EntryArg,
        reason: Annotated[str, typer.Option(help="Why (kept with the version).")] = "",
    ) -> None:
        written = _with_client(lambda c: c.call(op, ops.Decision(entry, reason)))
        print(f"{written.id} v{written.version}: {written.status}")

    decide.__doc__ = doc
    harness_app.command(name)(decide)


_decision("approve", ops.HARNESS_APPROVE, "Activate a proposed entry.")
_decision("reject", ops.HARNESS_REJECT, "Reject a proposed entry.")


@app.command()
def refine(
    session: SessionArg,
    instructions: Annotated[
        str | None, typer.Option(help="What the refinement should look for.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Propose harness edits from a session's recent events (a model call); they
    are staged for its next turn boundary (applied now when it is idle)."""
    result = _with_client(lambda c: c.call(ops.REFINE, ops.RefineSession(session, instructions)))
    if json_out:
        _dump(to_json(result))
        return
    staged = f": {', '.join(result.staged)}" if result.staged else ""
    print(f"refinement {result.refinement_id}: {len(result.staged)} edit(s) staged{staged}")
    for problem in result.problems:
        print(f"  skipped: {printable(problem)}", file=sys.stderr)


__all__ = ["harness_app"]

"""What the model is told, in one line, when the harness stopped or replaced a
kernel around a cell: the notes of :attr:`recursa.kernel.CellOutput.note`."""

from __future__ import annotations

from typing import Literal

from recursa.kernel.types import ExecStatus
from recursa.kernel.wire import JSONDict

Stopping = Literal["timeout", "interrupt"]
"""Why a running cell was sent an interrupt."""

Replaced = Literal["died", "stuck", "requested"]
"""Why the process was replaced while a cell ran: it died, it ignored an
interrupt, or :meth:`Kernel.restart` was called."""

RESTARTED_ON_REQUEST = (
    "the kernel was restarted on request while the cell ran; all variables are gone"
)
LOST_RESTART = (
    "the kernel was restarted during or before the previous cell, whose outcome was lost "
    "when it was cancelled; variables from earlier cells are gone"
)
_AFTER_CANCEL = (
    "so the kernel was restarted before this cell ran; variables from earlier cells are gone"
)


def after_cancel(replaced: Replaced | None, exit: str) -> str:
    """What the next cell is told of a restart that a cancelled cell needed.
    A restart someone asked for is theirs to tell."""
    if replaced == "stuck":
        return f"the previous cell was cancelled but did not stop when interrupted, {_AFTER_CANCEL}"
    if replaced == "died":
        return (
            f"the kernel died ({exit}) while the previous, cancelled cell was being "
            f"stopped, {_AFTER_CANCEL}"
        )
    return ""


def settled(reply: JSONDict, stopping: Stopping | None, limit: float) -> tuple[ExecStatus, str]:
    """Status and note of a cell whose reply came."""
    if stopping == "timeout":
        return "timeout", (
            f"the cell ran past its {seconds(limit)} limit and was interrupted; variables are kept"
        )
    if stopping == "interrupt":
        return "interrupted", "the cell was interrupted on request; variables are kept"
    status = reply.get("status")
    if status == "ok":
        return "ok", ""
    if status == "aborted":
        return "error", "the kernel aborted the cell without running it"
    return "error", ""


def stuck(stopping: Stopping, limit: float) -> tuple[ExecStatus, str]:
    """Status and note of a cell that ignored its interrupt."""
    if stopping == "timeout":
        return "timeout", (
            f"the cell ran past its {seconds(limit)} limit and did not stop when interrupted, "
            "so the kernel was restarted; all variables are gone"
        )
    return "interrupted", (
        "the cell was interrupted on request but did not stop, "
        "so the kernel was restarted; all variables are gone"
    )


def seconds(value: float) -> str:
    return f"{value:g} s"


def join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def died(stopping: Stopping | None, limit: float, how: str) -> tuple[ExecStatus, str]:
    """Status and note of a cell during which the process died (and was restarted)."""
    gone = "so it was restarted; all variables are gone"
    if stopping == "timeout":
        return "timeout", (
            f"the cell ran past its {seconds(limit)} limit and the kernel died "
            f"when interrupted ({how}), {gone}"
        )
    if stopping == "interrupt":
        return "interrupted", f"the kernel died when the cell was interrupted ({how}), {gone}"
    return "kernel_died", f"the kernel process died while the cell ran ({how}), {gone}"


def after_attach(how: Literal["stuck", "died"], grace: float) -> str:
    """What the next cell is told when a kernel being reattached, running a
    cell that nobody would read, had to be replaced."""
    if how == "stuck":
        why = (
            "was still running a cell from before the harness restarted, and did not stop "
            f"within {seconds(grace)} of an interrupt"
        )
    else:
        why = "died while it was being reattached after the harness restarted"
    return f"the kernel {why}, so it was restarted; variables from earlier cells are gone"


__all__ = [
    "LOST_RESTART",
    "RESTARTED_ON_REQUEST",
    "Replaced",
    "Stopping",
    "after_attach",
    "after_cancel",
    "died",
    "join",
    "seconds",
    "settled",
    "stuck",
]

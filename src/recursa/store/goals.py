"""The goals table: each session's goals, the newest row being its current one
(use ``store.goals``).

A row is changed in place as its goal goes on (status, usage folded in,
continuations counted); setting a new goal clears the old row and inserts a
new one, so earlier goals stay readable. Usage toward a goal is counted
from the ``usage`` index of the log (see :meth:`GoalTable.used`), so it is
exact after a restart with nothing but these rows and the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recursa.errors import NotFound
from recursa.protocol.control import GoalStatus
from recursa.protocol.events import json_text
from recursa.store.table import Table, with_text

_COLUMNS = (
    "id, session_id, objective, status, budget, spent, since_seq, continued, detail,"
    " created_at, updated_at, ended_at"
)
_ENDED = frozenset({"completed", "exhausted", "cleared"})
_SUBTREE = (
    "WITH RECURSIVE tree(id) AS (SELECT ? UNION "
    "SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id)"
)


@dataclass(frozen=True, slots=True)
class GoalRow:
    """One goal. ``since_seq``: while the goal is open (active or paused), the
    subtree's usage with a higher seq counts toward it; once it ended, None,
    and ``spent`` holds the count frozen then. ``continued``: how many prompts
    were queued for it; ``detail``: why it last stopped."""

    id: int
    session_id: str
    objective: str
    status: GoalStatus
    budget: int | None
    spent: int
    since_seq: int | None
    continued: int
    detail: str
    created_at: float
    updated_at: float
    ended_at: float | None


class GoalTable(Table[GoalRow]):
    """Use through ``store.goals``."""

    def _row(self, values: Sequence[object]) -> GoalRow:
        return with_text(GoalRow, values, 2)  # the objective

    def current(self, session_id: str) -> GoalRow | None:
        """The session's goal, or None (never set, or cleared)."""
        goal = self._one(
            f"SELECT {_COLUMNS} FROM goals WHERE session_id = ? ORDER BY id DESC LIMIT 1",
            (session_id,),
        )
        return None if goal is None or goal.status == "cleared" else goal

    def get(self, goal_id: int) -> GoalRow:
        goal = self._one(f"SELECT {_COLUMNS} FROM goals WHERE id = ?", (goal_id,))
        if goal is None:
            raise NotFound(f"no goal {goal_id}")
        return goal

    def history(self, session_id: str) -> list[GoalRow]:
        """Every goal the session had, oldest first."""
        return self._all(
            f"SELECT {_COLUMNS} FROM goals WHERE session_id = ? ORDER BY id", (session_id,)
        )

    def active(self) -> list[GoalRow]:
        """Every session's current goal that is active."""
        return self._all(
            f"SELECT {_COLUMNS} FROM goals g WHERE status = 'active'"
            " AND id = (SELECT max(id) FROM goals WHERE session_id = g.session_id) ORDER BY id"
        )

    def create(self, session_id: str, objective: str, budget: int | None) -> GoalRow:
        """Make ``objective`` the session's active goal, counting usage from now;
        a current goal is cleared (replaced). Raises NotFound for an unknown session."""
        now = self._store.now()
        with self._store.transaction():
            previous = self.current(session_id)
            if previous is not None:
                self.change(previous.id, "cleared", f"replaced by a new goal at {now:.0f}")
            cursor = self._store.execute(
                "INSERT INTO goals (session_id, objective, status, budget, since_seq,"
                " created_at, updated_at) VALUES (?, ?, 'active', ?, ?, ?, ?)",
                (session_id, json_text(objective), budget, self._store.last_seq(), now, now),
                missing=session_id,
            )
            return self.get(int(cursor.lastrowid or 0))

    def change(self, goal_id: int, status: GoalStatus, detail: str = "") -> GoalRow:
        """Set the goal's status. Ending it (``completed``, ``exhausted``,
        ``cleared``) freezes its usage: the count so far goes into ``spent`` and
        later calls no longer count. A pause keeps counting."""
        now = self._store.now()
        with self._store.transaction():
            goal = self.get(goal_id)
            since, spent = goal.since_seq, goal.spent
            ended: float | None = None
            if status in _ENDED:
                since, spent, ended = None, self.used(goal), goal.ended_at or now
            elif since is None:  # an ended goal taken up again counts from now
                since = self._store.last_seq()
            self._store.execute(
                "UPDATE goals SET status = ?, spent = ?, since_seq = ?, detail = ?,"
                " updated_at = ?, ended_at = ? WHERE id = ?",
                (status, spent, since, detail, now, ended, goal_id),
            )
            return self.get(goal_id)

    def continued(self, goal_id: int) -> None:
        """Count one continuation prompt queued for the goal."""
        self._store.execute(
            "UPDATE goals SET continued = continued + 1, updated_at = ? WHERE id = ?",
            (self._store.now(), goal_id),
        )

    def used(self, goal: GoalRow) -> int:
        """Tokens (input plus output) used toward the goal: ``spent``, plus, while
        it is open, every model call in the session's subtree since ``since_seq``."""
        if goal.since_seq is None:
            return goal.spent
        row = self._store.execute(
            f"{_SUBTREE} SELECT total(input_tokens) + total(output_tokens) FROM usage"
            " WHERE session_id IN (SELECT id FROM tree) AND seq > ?",
            (goal.session_id, goal.since_seq),
        ).fetchone()
        return goal.spent + int(row[0] or 0)


__all__ = ["GoalRow", "GoalTable"]

"""The store's companion tables that read rows of one type (goals, schedules,
the inbox, harness entries): one way to turn a query into rows.

A table gets the :class:`~recursa.store.store.Store` it reads through and
says how one result row becomes a value (:meth:`Table._row`); it asks for
one row with :meth:`Table._one` and for many with :meth:`Table._all`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from recursa.store.store import Store

R = TypeVar("R")


class Table(Generic[R]):
    """A table whose queries give rows of type ``R``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _row(self, values: Sequence[Any]) -> R:
        """The value of one result row (its columns in the table's order)."""
        raise NotImplementedError

    def _one(self, sql: str, params: Sequence[object] = ()) -> R | None:
        """The first row of the query, or None when it has none."""
        row = self._store.execute(sql, params).fetchone()
        return None if row is None else self._row(row)

    def _all(self, sql: str, params: Sequence[object] = ()) -> list[R]:
        """Every row of the query, in its order."""
        return [self._row(values) for values in self._store.execute(sql, params).fetchall()]


def with_text(make: Callable[..., R], values: Sequence[object], at: int) -> R:
    """``make(*values)`` with the column at ``at`` decoded: a text the tables
    store as a JSON string (:func:`~recursa.protocol.events.json_text`)."""
    fields = list(values)
    fields[at] = json.loads(str(fields[at]))
    return make(*fields)


__all__ = ["Table", "with_text"]

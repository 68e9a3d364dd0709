"""Status changes of runs and invocations: guarded updates with their transition rows.

Every path that ends (or hands back) a run or an invocation — a fire's outcome, the reapers,
start-up reconciliation, lease recovery — writes through :func:`apply`: one guarded
``UPDATE`` per row (on its previous status and the change's own guards), and the
``status_transitions`` rows of the changes that applied recorded in one batch, all inside the
caller's write transaction. A change whose guard no longer holds writes nothing. A run that
ended is counted there too (:mod:`.counters`: its error class, activity, health, spend).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiosqlite

from studio_state import Transition, record_transitions_sync, run_sync

from .counters import count_end_sync
from .vocab import FIRED_END_STATUSES

MAX_DETAIL = 2000
"""Summaries and error details keep their last this-many characters (the end says most)."""

_ENTITY = {"schedule_runs": "schedule_run", "invocations": "invocation"}


def clip(text: str) -> str:
    """``text`` cut to its last :data:`MAX_DETAIL` characters."""
    return text[-MAX_DETAIL:]


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One guarded ``previous`` → ``status`` change of a run or an invocation.

    The update writes ``status``, ``updated_at``, ``status_reason_code``,
    ``status_reason_summary`` (clipped) and ``sets``; a column named in ``keep`` is written
    only where it is still NULL. ``guards`` are further ``column = value`` conditions
    (``None``: ``IS NULL``). ``exclusive`` names a column whose (non-NULL) value no other
    ``running`` row of the table may hold (an ad-hoc run's ``concurrency_key``).
    """

    table: Literal["schedule_runs", "invocations"]
    entity_id: str
    status: str
    reason_code: str
    summary: str
    actor: str
    now: float
    previous: str = "running"
    sets: Mapping[str, Any] = field(default_factory=dict)
    keep: Collection[str] = ()
    guards: Mapping[str, Any] = field(default_factory=dict)
    evidence_refs: Sequence[Any] | None = None
    metadata: Mapping[str, Any] | None = None
    exclusive: str | None = None

    def statement(self) -> tuple[str, list[Any]]:
        """The guarded ``UPDATE`` and its parameters."""
        columns = {
            "status": self.status,
            "updated_at": self.now,
            "status_reason_code": self.reason_code,
            "status_reason_summary": clip(self.summary),
            **self.sets,
        }
        assignments = [
            f"{column} = COALESCE({column}, ?)" if column in self.keep else f"{column} = ?"
            for column in columns
        ]
        where = ["id = ?", "status = ?"]
        params: list[Any] = [*columns.values(), self.entity_id, self.previous]
        for column, value in self.guards.items():
            if value is None:
                where.append(f"{column} IS NULL")
            else:
                where.append(f"{column} = ?")
                params.append(value)
        if self.exclusive is not None:
            key = self.exclusive
            where.append(
                f"({key} IS NULL OR NOT EXISTS (SELECT 1 FROM {self.table} o "
                f"WHERE o.status = 'running' AND o.{key} = {self.table}.{key}))"
            )
        sql = f"UPDATE {self.table} SET {', '.join(assignments)} WHERE {' AND '.join(where)}"
        return sql, params

    def transition(self) -> Transition:
        """The ``status_transitions`` row of this change."""
        return Transition(
            entity_type=_ENTITY[self.table],
            entity_id=self.entity_id,
            previous_status=self.previous,
            status=self.status,
            reason_code=self.reason_code,
            reason_summary=clip(self.summary),
            evidence_refs=self.evidence_refs,
            actor=self.actor,
            metadata=self.metadata,
            created_at=self.now,
        )


def apply_sync(db: sqlite3.Connection, changes: Iterable[StatusChange]) -> list[bool]:
    """Apply each change on ``db`` inside the caller's open write transaction; return which
    ones applied.

    This is the one implementation: each change is one guarded ``UPDATE``, and the
    transition rows of the applied changes are recorded together afterwards (one
    ``executemany``). A function given to ``run_write_transaction`` calls it directly.
    """
    applied: list[bool] = []
    rows: list[Transition] = []
    for change in changes:
        won = db.execute(*change.statement()).rowcount == 1
        applied.append(won)
        if won:
            rows.append(change.transition())
            if change.table == "schedule_runs" and change.status in FIRED_END_STATUSES:
                count_end_sync(db, change.entity_id, change.now)
    record_transitions_sync(db, rows)
    return applied


async def apply(conn: aiosqlite.Connection, changes: Iterable[StatusChange]) -> list[bool]:
    """:func:`apply_sync` in the caller's transaction, run in one trip to the connection's
    thread (``run_sync``)."""
    batch = list(changes)
    if not batch:
        return []
    return await run_sync(conn, lambda db: apply_sync(db, batch))

"""Status transitions: the audit row and the guarded status change that writes it.

Every applied status change in Studio is one guarded ``UPDATE`` plus one
``status_transitions`` row, in the same transaction. A guard that no longer holds (someone
else changed the row first) makes the change a no-op that writes nothing.

There is one implementation, on the connection's own handle (``db``: the ``sqlite3``
connection, or the DB-API object over psycopg on PostgreSQL): the ``*_sync`` functions, which
a function given to :func:`studio_state.run_write_transaction` calls directly. The async
functions are a thin facade that runs the same function in one trip to the connection's
thread (:func:`studio_state.run_sync`).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from ._exceptions import InvalidTransition
from ._hop import run_sync
from ._ids import new_id
from ._schema import ENTITY_TYPES
from ._transactions import write_transaction

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")

_INSERT = (
    "INSERT INTO status_transitions (id, entity_type, entity_id, previous_status, status, "
    "reason_code, reason_summary, evidence_refs, actor, metadata, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class Transition:
    """One status change to record; see :func:`record_transitions`."""

    entity_type: str
    entity_id: str
    status: str
    reason_code: str
    created_at: float
    previous_status: str | None = None
    reason_summary: str | None = None
    evidence_refs: Sequence[Any] | None = None
    actor: str | None = None
    metadata: Mapping[str, Any] | None = None

    def params(self, row_id: str | None = None) -> tuple[Any, ...]:
        """The INSERT parameters of this row (``row_id``: its id, else a new one)."""
        if self.entity_type not in ENTITY_TYPES:
            raise InvalidTransition(
                f"entity_type must be one of {', '.join(ENTITY_TYPES)}, got {self.entity_type!r}"
            )
        if not self.reason_code:
            raise InvalidTransition("reason_code must not be empty")
        return (
            row_id or new_id(),
            self.entity_type,
            self.entity_id,
            self.previous_status,
            self.status,
            self.reason_code,
            self.reason_summary,
            None if self.evidence_refs is None else json.dumps(list(self.evidence_refs)),
            self.actor,
            None if self.metadata is None else json.dumps(dict(self.metadata)),
            self.created_at,
        )


def _identifier(name: str, what: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise InvalidTransition(f"{what} must be a plain SQL identifier, got {name!r}")
    return name


def _guarded_update(
    *,
    table: str,
    entity_id: str,
    from_statuses: Sequence[str],
    to_status: str,
    now: float,
    set_fields: Mapping[str, Any] | None,
    guards: Mapping[str, Any] | None,
    touch_updated_at: bool,
) -> tuple[str, tuple[Any, ...]]:
    _identifier(table, "table")
    if not from_statuses:
        raise InvalidTransition("from_statuses must name at least one status")
    assignments = ["status = ?"]
    values: list[Any] = [to_status]
    if touch_updated_at:
        assignments.append("updated_at = ?")
        values.append(now)
    for column, value in (set_fields or {}).items():
        if column in ("status", "id"):
            raise InvalidTransition(f"set_fields must not set {column!r}")
        assignments.append(f"{_identifier(column, 'set_fields column')} = ?")
        values.append(value)
    where = ["id = ?", f"status IN ({', '.join('?' * len(from_statuses))})"]
    where_values: list[Any] = [entity_id, *from_statuses]
    for column, value in (guards or {}).items():
        _identifier(column, "guard column")
        if value is None:
            where.append(f"{column} IS NULL")
        else:
            where.append(f"{column} = ?")
            where_values.append(value)
    update = f"UPDATE {table} SET {', '.join(assignments)} WHERE {' AND '.join(where)}"
    return update, (*values, *where_values)


def record_transition_sync(
    db: sqlite3.Connection,
    *,
    entity_type: str,
    entity_id: str,
    status: str,
    reason_code: str,
    now: float,
    previous_status: str | None = None,
    reason_summary: str | None = None,
    evidence_refs: Sequence[Any] | None = None,
    actor: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write one ``status_transitions`` row on ``db`` (arguments as :func:`record_transition`)."""
    row = Transition(
        entity_type=entity_type,
        entity_id=entity_id,
        status=status,
        reason_code=reason_code,
        created_at=now,
        previous_status=previous_status,
        reason_summary=reason_summary,
        evidence_refs=evidence_refs,
        actor=actor,
        metadata=metadata,
    )
    db.execute(_INSERT, row.params())


def record_transitions_sync(db: sqlite3.Connection, rows: Iterable[Transition]) -> int:
    """Write many ``status_transitions`` rows on ``db`` in one ``executemany`` (as
    :func:`record_transitions`); returns how many."""
    params = [row.params() for row in rows]
    if params:
        db.executemany(_INSERT, params)
    return len(params)


def _first_column(row: object) -> Any:
    if row is None:
        return None
    if isinstance(row, Mapping):
        return next(iter(row.values()))
    return row[0]  # type: ignore[index]  # a tuple or sqlite3.Row


def transition_sync(
    db: sqlite3.Connection,
    *,
    table: str,
    entity_type: str,
    entity_id: str,
    from_statuses: Sequence[str],
    to_status: str,
    reason_code: str,
    now: float,
    set_fields: Mapping[str, Any] | None = None,
    guards: Mapping[str, Any] | None = None,
    reason_summary: str | None = None,
    evidence_refs: Sequence[Any] | None = None,
    actor: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    touch_updated_at: bool = True,
) -> bool:
    """The guarded change of :func:`transition`, on ``db`` inside an open write transaction.

    One ``UPDATE … WHERE id = ? AND status IN (…)`` (plus ``guards``) and its
    ``status_transitions`` row; ``True`` when the change applied, ``False`` (nothing
    written) when a guard no longer held. Arguments as :func:`transition`. It begins and
    commits nothing: call it from a function given to :func:`run_write_transaction`; with
    no transaction open on ``db`` it raises :class:`InvalidTransition` and writes nothing.
    """
    update, params = _guarded_update(
        table=table,
        entity_id=entity_id,
        from_statuses=from_statuses,
        to_status=to_status,
        now=now,
        set_fields=set_fields,
        guards=guards,
        touch_updated_at=touch_updated_at,
    )
    if not db.in_transaction:
        raise InvalidTransition(
            "transition_sync needs an open write transaction: call it from a function "
            "given to run_write_transaction"
        )
    if len(from_statuses) == 1:
        previous: str | None = from_statuses[0]
    else:
        previous = _first_column(
            db.execute(f"SELECT status FROM {table} WHERE id = ?", (entity_id,)).fetchone()
        )
        if previous is None or previous not in from_statuses:
            return False
    if db.execute(update, params).rowcount != 1:
        return False
    record_transition_sync(
        db,
        entity_type=entity_type,
        entity_id=entity_id,
        previous_status=previous,
        status=to_status,
        reason_code=reason_code,
        reason_summary=reason_summary,
        evidence_refs=evidence_refs,
        actor=actor,
        metadata=metadata,
        now=now,
    )
    return True


async def record_transition(
    conn: aiosqlite.Connection,
    *,
    entity_type: str,
    entity_id: str,
    status: str,
    reason_code: str,
    now: float,
    previous_status: str | None = None,
    reason_summary: str | None = None,
    evidence_refs: Sequence[Any] | None = None,
    actor: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write one ``status_transitions`` row (inside the caller's transaction, if one is open)."""
    row = Transition(
        entity_type=entity_type,
        entity_id=entity_id,
        status=status,
        reason_code=reason_code,
        created_at=now,
        previous_status=previous_status,
        reason_summary=reason_summary,
        evidence_refs=evidence_refs,
        actor=actor,
        metadata=metadata,
    )
    await record_transitions(conn, (row,))


async def record_transitions(conn: aiosqlite.Connection, rows: Iterable[Transition]) -> int:
    """Write many ``status_transitions`` rows in one statement batch; returns how many."""
    batch = list(rows)
    if not batch:
        return 0
    return await run_sync(conn, lambda db: record_transitions_sync(db, batch))


async def transition(
    conn: aiosqlite.Connection,
    *,
    table: str,
    entity_type: str,
    entity_id: str,
    from_statuses: Sequence[str],
    to_status: str,
    reason_code: str,
    now: float,
    set_fields: Mapping[str, Any] | None = None,
    guards: Mapping[str, Any] | None = None,
    reason_summary: str | None = None,
    evidence_refs: Sequence[Any] | None = None,
    actor: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    touch_updated_at: bool = True,
) -> bool:
    """Move row ``entity_id`` of ``table`` from one of ``from_statuses`` to ``to_status``.

    One guarded ``UPDATE … WHERE id = ? AND status IN (…)`` (plus ``guards``: column → value,
    ``None`` meaning ``IS NULL``) that also writes ``set_fields`` (and ``updated_at = now``),
    and the ``status_transitions`` row, in one transaction — the caller's when one is open,
    else its own ``BEGIN IMMEDIATE``. Returns ``True`` when the change applied and ``False``
    when a guard no longer held, in which case nothing was written. The statements run as
    :func:`transition_sync` in one trip to the connection's thread.
    """

    def change(db: sqlite3.Connection) -> bool:
        return transition_sync(
            db,
            table=table,
            entity_type=entity_type,
            entity_id=entity_id,
            from_statuses=from_statuses,
            to_status=to_status,
            reason_code=reason_code,
            now=now,
            set_fields=set_fields,
            guards=guards,
            reason_summary=reason_summary,
            evidence_refs=evidence_refs,
            actor=actor,
            metadata=metadata,
            touch_updated_at=touch_updated_at,
        )

    # Malformed arguments are refused before a transaction is opened.
    _guarded_update(
        table=table,
        entity_id=entity_id,
        from_statuses=from_statuses,
        to_status=to_status,
        now=now,
        set_fields=set_fields,
        guards=guards,
        touch_updated_at=touch_updated_at,
    )
    async with write_transaction(conn):
        return await run_sync(conn, change)

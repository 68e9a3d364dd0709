"""Status transitions for a function run by :func:`studio_state.run_write_transaction`.

The same rows as :func:`studio_state.record_transition` and :func:`studio_state.transition`,
written synchronously on the connection's own thread (``db`` is the ``sqlite3.Connection``
the function is given), so a guarded change and its audit row cost no extra trips.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._exceptions import InvalidTransition
from ._transitions import _INSERT, Transition, _guarded_update


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

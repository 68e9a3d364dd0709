"""An operator's ack (no receiver token) and the bulk purge: the steps both dialects run.

Written once as steps (see ``_drive``); :mod:`studio_outbox._operations` runs them on SQLite,
:mod:`studio_outbox._pg._operations` on PostgreSQL and :mod:`studio_outbox.sync` on ``sqlite3``.
"""

from __future__ import annotations

from typing import Final

from ._constants import ACKED, DELIVERED, DELIVERING, DISPATCH_STATUSES, PENDING
from ._drive import Fetch, Steps, TransitionRow, record
from ._exceptions import AckNotRequired, InvalidArgument, InvalidDispatchState
from ._operations import _fetch, _transition, check_dispatch_id

OPERATOR_ACKED: Final = "dispatch.acked.operator"
"""Reason code of an ack an operator gave in the receiver's place."""
PURGED: Final = "dispatch.purged.operator"
"""Reason code of the ``purged`` row each bulk-purged dispatch leaves in the audit trail."""
#: Rows deleted per transaction by a bulk purge (each batch holds the writer briefly).
PURGE_BATCH: Final = 500

_ACKABLE = (PENDING, DELIVERING, DELIVERED)


def operator_ack_steps(dispatch_id: str, now: float, actor: str) -> Steps[bool]:
    """The body of ``operator_ack_dispatch`` (inside its write transaction)."""
    dispatch_id = check_dispatch_id(dispatch_id)
    if not isinstance(actor, str) or not actor:
        raise InvalidArgument("actor", "must name who acknowledged")
    row = yield from _fetch(dispatch_id, "status, ack_required")
    if not row["ack_required"]:
        raise AckNotRequired(dispatch_id)
    status = str(row["status"])
    if status == ACKED:
        return True
    if status not in _ACKABLE:
        raise InvalidDispatchState(
            dispatch_id, status, "only pending, delivering or delivered rows can be acked"
        )
    return (
        yield from _transition(
            dispatch_id,
            status,
            ACKED,
            OPERATOR_ACKED,
            f"acknowledged by the operator {actor} without the receiver's token",
            now,
            {"next_attempt_at": now},
            actor,
        )
    )


def check_purge_filter(status: object, before: object) -> tuple[str, float | None]:
    """The bulk purge's ``status`` and ``before``; :class:`InvalidArgument` naming the field."""
    if status not in DISPATCH_STATUSES:
        raise InvalidArgument("status", f"must be one of {', '.join(DISPATCH_STATUSES)}")
    if status == DELIVERING:
        raise InvalidArgument(
            "status", "delivering rows are being sent and are never purged in bulk"
        )
    if before is not None and (isinstance(before, bool) or not isinstance(before, int | float)):
        raise InvalidArgument("before", "must be epoch seconds")
    return str(status), None if before is None else float(before)


def _where(status: str, before: float | None) -> tuple[str, tuple[object, ...]]:
    if before is None:
        return "status = ?", (status,)
    return "status = ? AND coalesce(updated_at, created_at) < ?", (status, before)


def count_purgeable_steps(status: str, before: float | None) -> Steps[int]:
    """How many rows a bulk purge of ``status`` (changed before ``before``) would delete."""
    where, params = _where(status, before)
    rows = yield Fetch(f"SELECT count(*) AS n FROM dispatch_outbox WHERE {where}", params)
    return int(rows[0]["n"])


def purge_batch_steps(
    status: str, before: float | None, now: float, actor: str, limit: int = PURGE_BATCH
) -> Steps[int]:
    """Delete up to ``limit`` rows of ``status`` (changed before ``before``), each leaving a
    ``purged`` audit row with ``actor``; how many were deleted. The status is re-checked by
    the ``DELETE`` itself, so a row a delivery claimed meanwhile is kept."""
    where, params = _where(status, before)
    deleted = yield Fetch(
        f"DELETE FROM dispatch_outbox WHERE id IN (SELECT id FROM dispatch_outbox WHERE {where} "
        "ORDER BY id LIMIT ?) AND status = ? RETURNING id",
        (*params, limit, status),
    )
    yield from record(
        [
            TransitionRow(
                entity_id=str(row["id"]),
                previous_status=status,
                status="purged",
                reason_code=PURGED,
                reason_summary=f"bulk purge of {status} rows by {actor}",
                created_at=now,
                actor=actor,
            )
            for row in deleted
        ]
    )
    return len(deleted)

"""Consumer and operator operations on one dispatch: ack, retry, purge."""

from __future__ import annotations

import hmac
import json
from typing import Any

import aiosqlite

from studio_state import Clock, system_clock

from ._constants import (
    ACKED,
    DEAD_LETTER,
    DELIVERED,
    DELIVERING,
    EXPIRED,
    PENDING,
    TABLE,
    DispatchReason,
)
from ._drive import Fetch, Steps, TransitionRow, record, run_read, run_write
from ._exceptions import (
    AckNotRequired,
    AckTokenMismatch,
    DispatchNotFound,
    InvalidArgument,
    InvalidDispatchState,
)

_ACKABLE = (PENDING, DELIVERING, DELIVERED)
_RETRYABLE = (DEAD_LETTER, EXPIRED)


def check_dispatch_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument("dispatch_id", "must be a non-empty string")
    return value


def _fetch(dispatch_id: str, columns: str) -> Steps[dict[str, Any]]:
    rows = yield Fetch(f"SELECT {columns} FROM dispatch_outbox WHERE id = ?", (dispatch_id,))
    if not rows:
        raise DispatchNotFound(dispatch_id)
    row: dict[str, Any] = rows[0]
    return row


def _transition(
    dispatch_id: str,
    from_status: str,
    to_status: str,
    reason_code: str,
    summary: str,
    now: float,
    fields: dict[str, Any],
    actor: str,
) -> Steps[bool]:
    """One guarded status change and its ``status_transitions`` row (current transaction)."""
    assignments = "".join(f", {column} = ?" for column in fields)
    applied = yield Fetch(
        f"UPDATE {TABLE} SET status = ?, updated_at = ?{assignments} "
        "WHERE id = ? AND status = ? RETURNING id",
        (to_status, now, *fields.values(), dispatch_id, from_status),
    )
    if not applied:
        return False
    yield from record(
        [
            TransitionRow(
                entity_id=dispatch_id,
                previous_status=from_status,
                status=to_status,
                reason_code=reason_code,
                reason_summary=summary,
                created_at=now,
                actor=actor,
            )
        ]
    )
    return True


def ack_steps(dispatch_id: str, token: str, clock: Clock, actor: str | None) -> Steps[bool]:
    """The body of :func:`ack_dispatch` (inside its write transaction)."""
    dispatch_id = check_dispatch_id(dispatch_id)
    row = yield from _fetch(dispatch_id, "status, ack_required, ack_token")
    if not row["ack_required"]:
        raise AckNotRequired(dispatch_id)
    expected = row["ack_token"]
    if (
        not isinstance(token, str)
        or not isinstance(expected, str)
        or not hmac.compare_digest(token.encode("utf-8", "replace"), expected.encode())
    ):
        raise AckTokenMismatch(dispatch_id)
    status = str(row["status"])
    if status == ACKED:
        return True
    if status not in _ACKABLE:
        raise InvalidDispatchState(
            dispatch_id, status, "only pending, delivering or delivered rows can be acked"
        )
    now = clock()
    return (
        yield from _transition(
            dispatch_id,
            status,
            ACKED,
            DispatchReason.ACKED,
            "consumer presented the ack token",
            now,
            {"next_attempt_at": now},
            actor or "consumer",
        )
    )


def retry_steps(dispatch_id: str, clock: Clock, actor: str | None) -> Steps[None]:
    """The body of :func:`retry_dispatch` (inside its write transaction)."""
    dispatch_id = check_dispatch_id(dispatch_id)
    row = yield from _fetch(dispatch_id, "status, expires_at, payload")
    status = str(row["status"])
    if status not in _RETRYABLE:
        raise InvalidDispatchState(
            dispatch_id, status, "retry only applies to dead_letter or expired rows"
        )
    now = clock()
    expires_at = row["expires_at"]
    cleared = isinstance(expires_at, int | float) and expires_at <= now
    payload = json.loads(str(row["payload"]))
    payload["attempt"] = 0
    fields: dict[str, Any] = {"attempt": 0, "next_attempt_at": now, "last_error": None}
    summary = f"operator retry from {status}"
    if cleared:
        fields["expires_at"] = None
        payload["expires_at"] = None
        summary += "; the past expires_at was cleared"
    fields["payload"] = json.dumps(payload, separators=(",", ":"))
    applied = yield from _transition(
        dispatch_id,
        status,
        PENDING,
        DispatchReason.OPERATOR_RETRY,
        summary,
        now,
        fields,
        actor or "operator",
    )
    if not applied:  # impossible inside BEGIN IMMEDIATE; kept as a guard for joined txns
        raise InvalidDispatchState(dispatch_id, status, "the row changed during the retry")


def purge_steps(dispatch_id: str, clock: Clock, actor: str | None = None) -> Steps[None]:
    """The body of :func:`purge_dispatch` (inside its write transaction): the delete and its
    ``dispatch.purged.operator`` row naming ``actor`` (default ``operator``)."""
    from ._operator_ops import PURGED

    dispatch_id = check_dispatch_id(dispatch_id)
    now = clock()
    deleted = yield Fetch(
        "DELETE FROM dispatch_outbox WHERE id = ? "
        "AND NOT (status = 'delivering' AND next_attempt_at > ?) RETURNING id, status",
        (dispatch_id, now),
    )
    if deleted:
        who = actor or "operator"
        yield from record(
            [
                TransitionRow(
                    entity_id=dispatch_id,
                    previous_status=str(deleted[0]["status"]),
                    status="purged",
                    reason_code=PURGED,
                    reason_summary=f"purged by {who}",
                    created_at=now,
                    actor=who,
                )
            ]
        )
        return
    row = yield from _fetch(dispatch_id, "status, next_attempt_at")
    raise InvalidDispatchState(
        dispatch_id,
        str(row["status"]),
        f"a send may be in flight (claim lease until {row['next_attempt_at']}); "
        "purge it after the lease lapses",
    )


async def ack_dispatch(
    conn: aiosqlite.Connection,
    dispatch_id: str,
    token: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> bool:
    """Record the consumer's acknowledgement of an ``ack_required`` dispatch.

    The token is compared in constant time and never echoed. Accepted while the row is
    ``pending``, ``delivering`` or ``delivered`` (one guarded transition to ``acked``,
    reason ``dispatch.acked.consumer``). Acking an ``acked`` row again returns True and
    writes nothing. Raises :class:`DispatchNotFound`, :class:`AckNotRequired`,
    :class:`AckTokenMismatch`, or :class:`InvalidDispatchState` for a ``dead_letter`` or
    ``expired`` row. Returns False only if the row changed under a concurrent writer.
    """
    dispatch_id = check_dispatch_id(dispatch_id)
    return await run_write(conn, ack_steps(dispatch_id, token, clock, actor))


async def retry_dispatch(
    conn: aiosqlite.Connection,
    dispatch_id: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> None:
    """Put a ``dead_letter`` or ``expired`` dispatch back to ``pending`` for a fresh series.

    One guarded transaction resets ``attempt`` to 0, sets ``next_attempt_at = now``, clears
    ``last_error``, clears an ``expires_at`` that has already passed (otherwise the row would
    expire again without a send) and writes the ``dispatch.pending.operator_retry``
    transition. Raises :class:`DispatchNotFound` or :class:`InvalidDispatchState`.
    """
    dispatch_id = check_dispatch_id(dispatch_id)
    await run_write(conn, retry_steps(dispatch_id, clock, actor))


async def purge_dispatch(
    conn: aiosqlite.Connection,
    dispatch_id: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> None:
    """Delete one dispatch row in one guarded transaction, with a ``dispatch.purged.operator``
    transition row naming ``actor`` (the operator; default ``operator``).

    Refused (:class:`InvalidDispatchState`) while the row is ``delivering`` with a live claim
    lease, because a send may be in flight. Its ``status_transitions`` history is kept.
    Raises :class:`DispatchNotFound` for an unknown id.
    """
    dispatch_id = check_dispatch_id(dispatch_id)
    await run_write(conn, purge_steps(dispatch_id, clock, actor))


async def operator_ack_dispatch(
    conn: aiosqlite.Connection,
    dispatch_id: str,
    *,
    actor: str,
    clock: Clock = system_clock,
) -> bool:
    """Acknowledge an ``ack_required`` dispatch as an operator, without the receiver's token.

    Accepted while the row is ``pending``, ``delivering`` or ``delivered``: one guarded
    transition to ``acked`` with reason ``dispatch.acked.operator`` and ``actor`` (who did
    it). An ``acked`` row returns True and writes nothing. Raises :class:`DispatchNotFound`,
    :class:`AckNotRequired` or :class:`InvalidDispatchState`.
    """
    from ._operator_ops import operator_ack_steps

    return await run_write(conn, operator_ack_steps(dispatch_id, clock(), actor))


async def purge_dispatches(
    conn: aiosqlite.Connection,
    *,
    status: str,
    before: float | None = None,
    actor: str,
    dry_run: bool = False,
    clock: Clock = system_clock,
) -> int:
    """Delete every dispatch of ``status`` last changed before ``before`` (epoch seconds;
    ``None``: any time); return how many were deleted (``dry_run``: would be).

    ``delivering`` rows are never purged (:class:`InvalidArgument` on ``status``). Rows go in
    batches of :data:`studio_outbox._operator_ops.PURGE_BATCH`, each its own transaction that
    also writes a ``purged`` audit row (``dispatch.purged.operator``, ``actor``) per row.
    """
    from ._operator_ops import check_purge_filter, count_purgeable_steps, purge_batch_steps

    status, before = check_purge_filter(status, before)
    if dry_run:
        return int(await run_read(conn, count_purgeable_steps(status, before)))
    total = 0
    while True:
        deleted = await run_write(conn, purge_batch_steps(status, before, clock(), actor))
        total += deleted
        if deleted == 0:
            return total

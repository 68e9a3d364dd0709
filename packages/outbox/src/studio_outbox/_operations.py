"""Consumer and operator operations on one dispatch: ack, retry, purge."""

from __future__ import annotations

import hmac
import json

import aiosqlite

import studio_state
from studio_state import Clock, system_clock

from ._constants import (
    ACKED,
    DEAD_LETTER,
    DELIVERED,
    DELIVERING,
    ENTITY_TYPE,
    EXPIRED,
    PENDING,
    TABLE,
    DispatchReason,
)
from ._exceptions import (
    AckNotRequired,
    AckTokenMismatch,
    DispatchNotFound,
    InvalidArgument,
    InvalidDispatchState,
)

_ACKABLE = (PENDING, DELIVERING, DELIVERED)
_RETRYABLE = (DEAD_LETTER, EXPIRED)


def _dispatch_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument("dispatch_id", "must be a non-empty string")
    return value


async def _fetch(conn: aiosqlite.Connection, dispatch_id: str, columns: str) -> dict[str, object]:
    rows = await conn.execute_fetchall(
        f"SELECT {columns} FROM dispatch_outbox WHERE id = ?", (dispatch_id,)
    )
    if not rows:
        raise DispatchNotFound(dispatch_id)
    row: dict[str, object] = dict(next(iter(rows)))
    return row


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
    dispatch_id = _dispatch_id(dispatch_id)
    async with studio_state.write_transaction(conn):
        row = await _fetch(conn, dispatch_id, "status, ack_required, ack_token")
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
        return await studio_state.transition(
            conn,
            table=TABLE,
            entity_type=ENTITY_TYPE,
            entity_id=dispatch_id,
            from_statuses=[status],
            to_status=ACKED,
            reason_code=DispatchReason.ACKED,
            reason_summary="consumer presented the ack token",
            now=now,
            set_fields={"next_attempt_at": now},
            actor=actor or "consumer",
        )


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
    dispatch_id = _dispatch_id(dispatch_id)
    async with studio_state.write_transaction(conn):
        row = await _fetch(conn, dispatch_id, "status, expires_at, payload")
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
        fields: dict[str, object] = {
            "attempt": 0,
            "next_attempt_at": now,
            "last_error": None,
        }
        summary = f"operator retry from {status}"
        if cleared:
            fields["expires_at"] = None
            payload["expires_at"] = None
            summary += "; the past expires_at was cleared"
        fields["payload"] = json.dumps(payload, separators=(",", ":"))
        applied = await studio_state.transition(
            conn,
            table=TABLE,
            entity_type=ENTITY_TYPE,
            entity_id=dispatch_id,
            from_statuses=[status],
            to_status=PENDING,
            reason_code=DispatchReason.OPERATOR_RETRY,
            reason_summary=summary,
            now=now,
            set_fields=fields,
            actor=actor or "operator",
        )
        if not applied:  # impossible inside BEGIN IMMEDIATE; kept as a guard for joined txns
            raise InvalidDispatchState(dispatch_id, status, "the row changed during the retry")


async def purge_dispatch(
    conn: aiosqlite.Connection,
    dispatch_id: str,
    *,
    clock: Clock = system_clock,
) -> None:
    """Delete one dispatch row in one guarded transaction.

    Refused (:class:`InvalidDispatchState`) while the row is ``delivering`` with a live claim
    lease, because a send may be in flight. Its ``status_transitions`` history is kept.
    Raises :class:`DispatchNotFound` for an unknown id.
    """
    dispatch_id = _dispatch_id(dispatch_id)
    async with studio_state.write_transaction(conn):
        now = clock()
        deleted = await conn.execute_fetchall(
            "DELETE FROM dispatch_outbox WHERE id = ? "
            "AND NOT (status = 'delivering' AND next_attempt_at > ?) RETURNING id",
            (dispatch_id, now),
        )
        if deleted:
            return
        row = await _fetch(conn, dispatch_id, "status, next_attempt_at")
        raise InvalidDispatchState(
            dispatch_id,
            str(row["status"]),
            f"a send may be in flight (claim lease until {row['next_attempt_at']}); "
            "purge it after the lease lapses",
        )

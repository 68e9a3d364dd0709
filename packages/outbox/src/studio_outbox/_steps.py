"""The guarded writes of the delivery loop: the due scan, claims and status changes.

Every write here is guarded on ``(id, status, attempt)``: ``attempt`` grows by one on every
claim, so a scanner holding a stale view of a row (another task, another process) matches
nothing and writes nothing. Many rows are handled per statement (``UPDATE … FROM (VALUES …)
RETURNING id``) so a step costs the same few round trips whatever its size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from . import _claimant as claimant
from ._constants import (
    CLAIM_LEASE_SECONDS,
    DEAD_LETTER,
    DELIVERED,
    DELIVERING,
    EXPIRED,
    PENDING,
    DispatchReason,
    backoff_seconds,
)
from ._drive import Fetch, Steps, TransitionRow, fetch_async
from .abc import TransportResult

LAST_ERROR_CHARS = 2000
_SUMMARY_ERROR_CHARS = 200
_CHUNK = 100  # rows per multi-row statement (7 parameters each)

_FIELDS = (
    "id, kind, deliver_to, status, attempt, max_attempts, ack_required, expires_at, "
    "next_attempt_at, claimed_by"
)
_SCAN = (
    f"SELECT * FROM (SELECT {_FIELDS}, 0 AS sweep FROM dispatch_outbox "
    "INDEXED BY idx_dispatch_outbox_due "
    "WHERE status IN ('pending', 'delivering') AND next_attempt_at <= ? "
    "ORDER BY next_attempt_at LIMIT ?) "
    "UNION ALL "
    f"SELECT * FROM (SELECT {_FIELDS}, 1 AS sweep FROM dispatch_outbox "
    "INDEXED BY idx_dispatch_outbox_expiry "
    "WHERE status = 'pending' AND expires_at <= ? AND next_attempt_at > ? "
    "ORDER BY expires_at LIMIT ?)"
)


@dataclass(frozen=True, slots=True)
class DueRow:
    """A row the scan found: due for a send, or past its expiry while in backoff."""

    id: str
    kind: str
    deliver_to: str
    status: str
    attempt: int
    max_attempts: int
    ack_required: bool
    expires_at: float | None
    sweep: bool
    next_attempt_at: float = 0.0
    claimed_by: str | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True, slots=True)
class Claimed:
    """A row this scanner won: ``attempt`` is the number of the send it may make."""

    row: DueRow
    attempt: int
    payload: str


@dataclass(frozen=True, slots=True)
class Change:
    """One guarded status change: decided without a send, or the outcome of one."""

    id: str
    from_status: str
    attempt: int
    to_status: str
    reason_code: str
    summary: str
    next_attempt_at: float | None = None  # None: now
    last_error: str | None = None
    set_error: bool = False


async def scan(conn: aiosqlite.Connection, now: float, limit: int) -> list[DueRow]:
    """Rows due at ``now`` (oldest first, at most ``limit``) and pending rows past expiry."""
    rows = await fetch_async(conn, _SCAN, (now, limit, now, now, limit))
    return [
        DueRow(
            id=r["id"],
            kind=r["kind"],
            deliver_to=r["deliver_to"],
            status=r["status"],
            attempt=int(r["attempt"]),
            max_attempts=int(r["max_attempts"]),
            ack_required=bool(r["ack_required"]),
            expires_at=r["expires_at"],
            sweep=bool(r["sweep"]),
            next_attempt_at=float(r["next_attempt_at"]),
            claimed_by=r["claimed_by"],
        )
        for r in rows
    ]


def decide_without_send(row: DueRow, now: float) -> Change | None:
    """The change a row needs before any send (expiry, exhausted attempts), else None."""
    if row.expired(now):
        return Change(
            row.id,
            row.status,
            row.attempt,
            EXPIRED,
            DispatchReason.EXPIRED_TTL,
            "expires_at passed before delivery",
        )
    if row.attempt < row.max_attempts:
        return None
    if row.ack_required and row.status == PENDING:
        return Change(
            row.id,
            row.status,
            row.attempt,
            DEAD_LETTER,
            DispatchReason.ACK_TIMEOUT,
            f"no ack after {row.attempt} sends and the ack window after the last one",
        )
    # A lapsed lease on the last allowed attempt: its outcome was never recorded (the process
    # delivering it died). Sending again would exceed max_attempts.
    return Change(
        row.id,
        row.status,
        row.attempt,
        DEAD_LETTER,
        DispatchReason.MAX_ATTEMPTS,
        f"{row.attempt} attempts exhausted",
        last_error=f"claim lease of attempt {row.attempt} lapsed before its outcome was recorded",
        set_error=row.status == DELIVERING,
    )


def outcome(claimed: Claimed, result: TransportResult, now: float) -> Change:
    """The change that records one send's result."""
    row, attempt = claimed.row, claimed.attempt
    of = f"attempt {attempt} of {row.max_attempts}"
    if result.ok:
        if not row.ack_required:
            return Change(
                row.id,
                DELIVERING,
                attempt,
                DELIVERED,
                DispatchReason.TRANSPORT_OK,
                f"transport succeeded ({of}); consumer acknowledgement not implied",
                set_error=True,
            )
        delay = backoff_seconds(attempt)
        window = (
            f"last send; ack window {delay}s"
            if attempt >= row.max_attempts
            else f"resend in {delay}s unless acked"
        )
        return Change(
            row.id,
            DELIVERING,
            attempt,
            PENDING,
            DispatchReason.AWAITING_ACK,
            f"sent ({of}); {window}",
            next_attempt_at=now + delay,
            set_error=True,
        )
    error = (result.error or "transport failed")[-LAST_ERROR_CHARS:]
    short = error[-_SUMMARY_ERROR_CHARS:]
    if result.gone:
        status, reason, summary, at = (
            DEAD_LETTER,
            DispatchReason.GONE,
            f"{of}: the destination is gone, no further send: {short}",
            None,
        )
    elif row.expired(now):
        status, reason, summary, at = (
            EXPIRED,
            DispatchReason.EXPIRED_TTL,
            f"{of} failed and expires_at has passed: {short}",
            None,
        )
    elif attempt >= row.max_attempts:
        status, reason, summary, at = (
            DEAD_LETTER,
            DispatchReason.MAX_ATTEMPTS,
            f"{attempt} attempts exhausted: {short}",
            None,
        )
    else:
        wait: float = backoff_seconds(attempt)
        if result.retry_after is not None and not math.isnan(result.retry_after):
            # the destination's Retry-After replaces the backoff for this attempt
            wait = min(max(float(result.retry_after), 1.0), float(backoff_seconds(99)))
        status, reason, summary, at = (
            PENDING,
            DispatchReason.RETRY_BACKOFF,
            f"{of} failed, retry in {wait:g}s: {short}",
            now + wait,
        )
    return Change(
        row.id,
        DELIVERING,
        attempt,
        status,
        reason,
        summary,
        next_attempt_at=at,
        last_error=error,
        set_error=True,
    )


def apply_changes(
    changes: Sequence[Change], now: float, actor: str
) -> Steps[tuple[list[Change], list[TransitionRow]]]:
    """Apply ``changes`` (inside the current transaction); returns those that applied."""
    applied: set[str] = set()
    for start in range(0, len(changes), _CHUNK):
        part = changes[start : start + _CHUNK]
        values: list[Any] = [now, now]
        for c in part:
            values += [
                c.id,
                c.from_status,
                c.attempt,
                c.to_status,
                c.next_attempt_at,
                c.last_error,
                int(c.set_error),
            ]
        rows = yield Fetch(
            "UPDATE dispatch_outbox SET status = v.column4, "
            "next_attempt_at = COALESCE(v.column5, ?), "
            "last_error = CASE WHEN v.column7 THEN v.column6 ELSE dispatch_outbox.last_error END, "
            "updated_at = ? "
            f"FROM (VALUES {', '.join(['(?, ?, ?, ?, ?, ?, ?)'] * len(part))}) AS v "
            "WHERE dispatch_outbox.id = v.column1 AND dispatch_outbox.status = v.column2 "
            "AND dispatch_outbox.attempt = v.column3 "
            "RETURNING id",
            values,
        )
        applied.update(r["id"] for r in rows)
    done = [c for c in changes if c.id in applied]
    transitions = [
        TransitionRow(c.id, c.from_status, c.to_status, c.reason_code, c.summary, now, actor)
        for c in done
    ]
    return done, transitions


def claim(
    rows: Sequence[DueRow], now: float, actor: str
) -> Steps[tuple[list[Claimed], list[TransitionRow]]]:
    """Claim ``rows`` for one send each (inside the current transaction).

    One guarded UPDATE per chunk sets ``delivering``, ``attempt + 1`` (also inside the stored
    payload, which is what is sent) and the lease ``next_attempt_at = now + 15``. Only rows
    still exactly as scanned, due and below ``max_attempts`` are claimed.
    """
    claimed: list[Claimed] = []
    transitions: list[TransitionRow] = []
    for start in range(0, len(rows), _CHUNK):
        part = rows[start : start + _CHUNK]
        values: list[Any] = [now + CLAIM_LEASE_SECONDS, now, claimant.identity()]
        for row in part:
            values += [row.id, row.status, row.attempt]
        values.append(now)
        result = yield Fetch(
            "UPDATE dispatch_outbox SET status = 'delivering', attempt = attempt + 1, "
            "next_attempt_at = ?, updated_at = ?, claimed_by = ?, "
            "payload = json_set(payload, '$.attempt', attempt + 1) "
            f"FROM (VALUES {', '.join(['(?, ?, ?)'] * len(part))}) AS v "
            "WHERE dispatch_outbox.id = v.column1 AND dispatch_outbox.status = v.column2 "
            "AND dispatch_outbox.attempt = v.column3 AND dispatch_outbox.next_attempt_at <= ? "
            "AND dispatch_outbox.attempt < dispatch_outbox.max_attempts "
            "RETURNING id, attempt, payload",
            values,
        )
        won = {r["id"]: r for r in result}
        for row in part:
            got = won.get(row.id)
            if got is None:
                continue
            attempt = int(got["attempt"])
            claimed.append(Claimed(row, attempt, got["payload"]))
            transitions.append(
                TransitionRow(
                    row.id,
                    row.status,
                    DELIVERING,
                    DispatchReason.CLAIMED,
                    f"attempt {attempt} of {row.max_attempts}",
                    now,
                    actor,
                )
            )
    return claimed, transitions


def renew(items: Sequence[Claimed], now: float) -> Steps[list[Claimed]]:
    """Renew the lease of claims still exactly as claimed (inside the current transaction).

    Guarded like every write here, on ``(id, 'delivering', attempt)``: a row whose status or
    attempt changed since its claim is not renewed, and must not be sent. A renewal is not a
    status change, so it records no transition.
    """
    renewed: set[str] = set()
    for start in range(0, len(items), _CHUNK):
        part = items[start : start + _CHUNK]
        values: list[Any] = [now + CLAIM_LEASE_SECONDS, now]
        for item in part:
            values += [item.row.id, item.attempt]
        rows = yield Fetch(
            "UPDATE dispatch_outbox SET next_attempt_at = ?, updated_at = ? "
            f"FROM (VALUES {', '.join(['(?, ?)'] * len(part))}) AS v "
            "WHERE dispatch_outbox.id = v.column1 AND dispatch_outbox.status = 'delivering' "
            "AND dispatch_outbox.attempt = v.column2 "
            "RETURNING id",
            values,
        )
        renewed.update(r["id"] for r in rows)
    return [item for item in items if item.row.id in renewed]

"""The guarded writes of delivery on PostgreSQL: claims under ``FOR UPDATE SKIP LOCKED``.

Each deliverer locks the due rows it takes (``SKIP LOCKED``: rows another deliverer is taking
are passed over, never waited for), so concurrent deliverers on several connections, processes
or machines take disjoint rows. Every write is still guarded on ``(id, status, attempt)``, as
on SQLite: a row whose claim lease lapsed and was taken again (``attempt`` grew) matches
nothing for the stale holder, so its late outcome writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import studio_state

from .._constants import CLAIM_LEASE_SECONDS, DELIVERING, DispatchReason
from .._drive import TRANSITION_INSERT, Fetch, TransitionRow
from .._steps import Change, Claimed, DueRow
from ._drive import PgSteps

_CHUNK = 100
_FIELDS = (
    "id, kind, deliver_to, status, attempt, max_attempts, ack_required, expires_at, "
    "next_attempt_at, claimed_by"
)
_DUE = (
    f"SELECT {_FIELDS} FROM dispatch_outbox "
    "WHERE status IN ('pending', 'delivering') AND next_attempt_at <= ? "
    "AND NOT (id = ANY(?::text[])) "
    "ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED"
)
_EXPIRING = (
    f"SELECT {_FIELDS} FROM dispatch_outbox "
    "WHERE status = 'pending' AND expires_at <= ? AND next_attempt_at > ? "
    "ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED"
)
# The stored payload is the text that is sent: its top-level "attempt" (the first one in the
# text, ahead of the body) is rewritten in place so every other byte stays as enqueued.
_CLAIM = (
    "UPDATE dispatch_outbox AS d SET status = 'delivering', attempt = d.attempt + 1, "
    "next_attempt_at = ?, updated_at = ?, claimed_by = ?, "
    "payload = regexp_replace(d.payload::text, '\"attempt\":[0-9]+', "
    "'\"attempt\":' || (d.attempt + 1))::json "
    "FROM (VALUES {values}) AS v(id, status, attempt) "
    "WHERE d.id = v.id AND d.status = v.status AND d.attempt = v.attempt "
    "AND d.next_attempt_at <= ? AND d.attempt < d.max_attempts "
    "RETURNING d.id, d.attempt, d.payload::text AS payload"
)
_CHANGE = (
    "UPDATE dispatch_outbox AS d SET status = v.to_status, "
    "next_attempt_at = COALESCE(v.next_at, ?), "
    "last_error = CASE WHEN v.set_error THEN v.last_error ELSE d.last_error END, "
    "updated_at = ? "
    "FROM (VALUES {values}) AS v(id, from_status, attempt, to_status, next_at, last_error, "
    "set_error) "
    "WHERE d.id = v.id AND d.status = v.from_status AND d.attempt = v.attempt "
    "RETURNING d.id"
)
_CLAIM_ROW = "(?::text, ?::text, ?::int)"
_RENEW = (
    "UPDATE dispatch_outbox AS d SET next_attempt_at = ?, updated_at = ? "
    "FROM (VALUES {values}) AS v(id, attempt) "
    "WHERE d.id = v.id AND d.status = 'delivering' AND d.attempt = v.attempt "
    "RETURNING d.id"
)
_RENEW_ROW = "(?::text, ?::int)"
# The shared audit INSERT, with as many VALUES rows as the step has transitions.
_TRANSITIONS, _TRANSITION_ROW = TRANSITION_INSERT.split("VALUES ")
_TRANSITIONS += "VALUES "
_CHANGE_ROW = "(?::text, ?::text, ?::int, ?::text, ?::float8, ?::text, ?::bool)"


def _due_row(r: dict[str, Any], sweep: bool) -> DueRow:
    return DueRow(
        id=r["id"],
        kind=r["kind"],
        deliver_to=r["deliver_to"],
        status=r["status"],
        attempt=int(r["attempt"]),
        max_attempts=int(r["max_attempts"]),
        ack_required=bool(r["ack_required"]),
        expires_at=None if r["expires_at"] is None else float(r["expires_at"]),
        sweep=sweep,
        next_attempt_at=float(r["next_attempt_at"]),
        claimed_by=r["claimed_by"],
    )


def lock_due(now: float, limit: int, passed: Sequence[str]) -> PgSteps[list[DueRow]]:
    """Lock up to ``limit`` due rows no other transaction holds, oldest due first.

    Due: ``pending`` with ``next_attempt_at <= now``, or ``delivering`` whose lease lapsed.
    ``passed`` are ids this pass already looked at and left alone.
    """
    rows = yield Fetch(_DUE, (now, list(passed), limit))
    return [_due_row(r, False) for r in rows]


def lock_expiring(now: float, limit: int) -> PgSteps[list[DueRow]]:
    """Lock up to ``limit`` pending rows in backoff whose ``expires_at`` has passed."""
    rows = yield Fetch(_EXPIRING, (now, now, limit))
    return [_due_row(r, True) for r in rows]


def apply_changes(
    changes: Sequence[Change], now: float, actor: str
) -> PgSteps[tuple[list[Change], list[TransitionRow]]]:
    """Apply ``changes`` (guarded, inside the current transaction); returns those applied."""
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
                c.set_error,
            ]
        sql = _CHANGE.format(values=", ".join([_CHANGE_ROW] * len(part)))
        rows = yield Fetch(sql, values)
        applied.update(r["id"] for r in rows)
    done = [c for c in changes if c.id in applied]
    transitions = [
        TransitionRow(c.id, c.from_status, c.to_status, c.reason_code, c.summary, now, actor)
        for c in done
    ]
    return done, transitions


def claim(
    rows: Sequence[DueRow], now: float, actor: str, claimed_by: str
) -> PgSteps[tuple[list[Claimed], list[TransitionRow]]]:
    """Claim ``rows`` for one send each: ``delivering``, ``attempt + 1``, a lease of
    :data:`CLAIM_LEASE_SECONDS` in ``next_attempt_at`` and ``claimed_by``."""
    claimed: list[Claimed] = []
    transitions: list[TransitionRow] = []
    for start in range(0, len(rows), _CHUNK):
        part = rows[start : start + _CHUNK]
        values: list[Any] = [now + CLAIM_LEASE_SECONDS, now, claimed_by]
        for row in part:
            values += [row.id, row.status, row.attempt]
        values.append(now)
        sql = _CLAIM.format(values=", ".join([_CLAIM_ROW] * len(part)))
        won = {r["id"]: r for r in (yield Fetch(sql, values))}
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


def renew(items: Sequence[Claimed], now: float) -> PgSteps[list[Claimed]]:
    """Renew the lease of claims still exactly as claimed (inside the current transaction).

    Guarded on ``(id, 'delivering', attempt)`` as on SQLite: a claim whose row changed is not
    renewed and must not be sent. A renewal is not a status change: no transition.
    """
    renewed: set[str] = set()
    for start in range(0, len(items), _CHUNK):
        part = items[start : start + _CHUNK]
        values: list[Any] = [now + CLAIM_LEASE_SECONDS, now]
        for item in part:
            values += [item.row.id, item.attempt]
        sql = _RENEW.format(values=", ".join([_RENEW_ROW] * len(part)))
        renewed.update(r["id"] for r in (yield Fetch(sql, values)))
    return [item for item in items if item.row.id in renewed]


def record_transitions(transitions: Sequence[TransitionRow]) -> PgSteps[None]:
    """Write the audit rows of the step's changes (inside the current transaction).

    One multi-row INSERT per chunk: one statement for the server, whatever the step's size.
    """
    for start in range(0, len(transitions), _CHUNK):
        part = transitions[start : start + _CHUNK]
        values = [value for t in part for value in t.params(studio_state.new_id())]
        yield Fetch(_TRANSITIONS + ", ".join([_TRANSITION_ROW] * len(part)), values)

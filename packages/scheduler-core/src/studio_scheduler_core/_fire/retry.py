"""Durable retries: a failed or timed-out top-level run plans its next attempt as a
``retry_wait`` run row, written in the same transaction as the failure, so a restart keeps the
plan; when it falls due the row itself becomes the running attempt (a guarded
``retry_wait`` → ``running`` change: it runs once, whichever process gets there).

A follow-up is retried only under its overlay's own ``retry`` (it never inherits the
schedule's); its attempts keep its chain parent and depth. ``on_fail`` follows only the last
attempt, and ``pause_on_failure`` disables the schedule only after it (top-level runs only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiosqlite

from studio_state import Transition, new_id, record_transitions

from .._records.run import Run
from .._records.schedule import Action, Schedule
from .._records.terminal import clip
from .._records.vocab import ENGINE_ACTOR
from .._schedules.store import get_schedule, insert_run_row, set_enabled
from . import store

RETRY_SCHEDULED = "run.retry.scheduled"
RETRY_FIRED = "schedule.fired.retry"
DISABLED_FAILURE = "schedule.disabled.failure"
RETRYABLE = ("failed", "timed_out")
DUE_BATCH = 100


def attempt_of(context: Mapping[str, Any]) -> int:
    """The attempt number a run's trigger context carries (1: the first)."""
    value = context.get("attempt")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def next_attempt(action: Action, context: Mapping[str, Any], status: str) -> int | None:
    """The attempt that follows a run ending ``status``, or ``None`` (no retry).

    ``action`` is what the run ran: its schedule (for a follow-up, its overlay applied, which
    has a ``retry`` only when the overlay set one); an ad-hoc run's action is never retried."""
    if not isinstance(action, Schedule) or status not in RETRYABLE:
        return None
    retry = action.retry
    if not isinstance(retry, Mapping):
        return None
    attempt = attempt_of(context)
    return attempt + 1 if attempt < int(retry.get("max_attempts", 1)) else None


def backoff(retry: Mapping[str, Any], attempt_done: int) -> float:
    """Seconds before the attempt after ``attempt_done``: backoff_sec × factor^(n-1), capped."""
    base = float(retry.get("backoff_sec", 10))
    factor = float(retry.get("backoff_factor", 2.0))
    cap = float(retry.get("max_backoff_sec", 3600))
    return min(cap, base * factor ** max(0, attempt_done - 1))


async def plan_retry(
    conn: aiosqlite.Connection,
    *,
    run_id: str,
    action: Action,
    context: Mapping[str, Any],
    status: str,
    chain_depth: int,
    now: float,
    chain_parent_id: str | None = None,
) -> str | None:
    """Write the next attempt's ``retry_wait`` row (in the caller's transaction, the one that
    ended ``run_id``); return its id, or ``None`` when no retry is due."""
    attempt = next_attempt(action, context, status)
    if attempt is None or not isinstance(action, Schedule) or action.retry is None:
        return None
    due = now + backoff(action.retry, attempt - 1)
    retry_id = new_id()
    sid = action.id
    limit = action.retry["max_attempts"]
    summary = f"attempt {attempt} of {limit} after run {run_id} {status}"
    trigger = {**context, "attempt": attempt, "retry_of": run_id, "retry_at": due}
    await insert_run_row(
        conn,
        {
            "id": retry_id,
            "schedule_id": sid,
            "trigger_context": trigger,
            "action_kind": action.action_kind,
            "action_args": [],
            "status": "retry_wait",
            "chain_depth": chain_depth,
            "chain_parent_id": chain_parent_id,
            "fired_at": due,
            "created_at": now,
            "updated_at": now,
            "status_reason_code": RETRY_SCHEDULED,
            "status_reason_summary": summary,
            "status_evidence_refs": [{"kind": "schedule_run", "id": run_id}],
            "queued_at": due,
            "retry_of": run_id,
            "attempt": attempt,
        },
    )
    await record_transitions(
        conn,
        [
            Transition(
                entity_type="schedule_run",
                entity_id=retry_id,
                status="retry_wait",
                reason_code=RETRY_SCHEDULED,
                reason_summary=summary,
                evidence_refs=[{"kind": "schedule_run", "id": run_id}],
                actor=ENGINE_ACTOR,
                metadata={"retry_of": run_id, "attempt": attempt, "retry_at": due},
                created_at=now,
            )
        ],
    )
    return retry_id


async def retry_planned(conn: aiosqlite.Connection, run_id: str) -> bool:
    """Whether a later attempt of ``run_id`` was planned (its on_fail waits for the last)."""
    return await store.retry_planned(conn, run_id)


async def due_retries(conn: aiosqlite.Connection, now: float) -> list[Run]:
    """``retry_wait`` runs whose backoff has passed, oldest first."""
    return await store.due_retries(conn, now, DUE_BATCH)


async def next_retry_at(conn: aiosqlite.Connection) -> float | None:
    """When the earliest planned retry falls due (``None``: none planned)."""
    return await store.next_retry_at(conn)


async def pause_after_last_attempt(
    conn: aiosqlite.Connection, run_id: str, schedule_id: str, *, now: float
) -> bool:
    """Disable the schedule (``schedule.disabled.failure``, notifying ``disabled``) when its
    top-level run ``run_id`` failed or timed out with no attempt left and the schedule pauses
    on failure. Returns whether it was disabled."""
    run = await store.retry_lineage(conn, run_id)
    if run is None or run.chain_depth != 0 or run.status not in RETRYABLE:
        return False
    schedule = await get_schedule(conn, schedule_id)
    if schedule is None or not schedule.pause_on_failure or not schedule.enabled:
        return False
    if await retry_planned(conn, run_id):
        return False
    attempts = run.attempt or 1
    return await set_enabled(
        conn,
        schedule_id,
        enabled=False,
        reason_code=DISABLED_FAILURE,
        reason_summary=clip(f"run {run_id} ended {run.status} after {attempts} attempt(s)"),
        now=now,
        metadata={"run_id": run_id, "status": run.status, "attempts": attempts},
    )

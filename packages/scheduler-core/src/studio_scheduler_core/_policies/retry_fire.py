"""Starting a due retry: its ``retry_wait`` row becomes the running attempt.

The attempt takes a global slot like any fire (it waits while the cap is reached) but passes
no other gate: the occurrence it retries was admitted once, and a retry counts toward neither
``max_runs`` nor the overlap of a new occurrence's admission beyond holding the slot. A
follow-up's attempt (it has a chain parent) takes a slot too, and runs the follow-up's action:
the schedule's overlays applied along its chain, as its parents ended.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from studio_state import Transition, record_transitions, run_to_completion, write_transaction

from .._admission.gates import Admission
from .._fire import store
from .._fire.env import FireEnv, Prepared
from .._fire.pipeline import StartFire, fire_event
from .._fire.prepare import prepare
from .._fire.retry import RETRY_FIRED, due_retries
from .._notify.service import notify_run
from .._records.terminal import clip
from .._schedules.followups import follow_up_action
from .._schedules.store import load_schedule

logger = logging.getLogger("studio_scheduler_core")


async def commit_waiting(
    env: FireEnv, fire: Prepared, now: float, *, previous: str, fired: tuple[str, str]
) -> bool:
    """A waiting run row (``previous``: ``retry_wait`` or a buffered ``waiting_dependency``)
    becomes ``running`` (``failed`` on a setup refusal) with its invocation, guarded on
    ``previous``; ``fired`` is the (reason code, summary) of the start.

    The commit and its tracking in ``env.committed`` complete even if the caller is
    cancelled meanwhile (shutdown sweeps what is tracked)."""
    return await run_to_completion(_commit_waiting(env, fire, now, previous=previous, fired=fired))


async def _commit_waiting(
    env: FireEnv, fire: Prepared, now: float, *, previous: str, fired: tuple[str, str]
) -> bool:
    failed = fire.setup_error is not None
    if env.queue_fires and not failed:
        return await _queue_waiting(env, fire, now, previous=previous, fired=fired)
    status = "failed" if failed else "running"
    reason, summary = fire.setup_error or fired
    refs = [{"kind": "schedule", "id": str(fire.schedule["id"])}]
    async with write_transaction(env.conn):
        # Checked under the write lock: the invocation goes in before the run points at it.
        if await store.run_status(env.conn, fire.run_id) != previous:
            return False
        invocation: Mapping[str, Any] = {
            "id": fire.invocation_id,
            "schedule_run_id": fire.run_id,
            "skill": f"scheduled:{fire.schedule.get('name')}",
            "status": status,
            "prompt": fire.prompt,
            "started_at": now,
            "ended_at": now if failed else None,
            "status_reason_code": reason if failed else "run.started.ok",
            "status_reason_summary": clip(summary) if failed else None,
            "created_at": now,
            "updated_at": now,
        }
        await store.insert_invocation(env.conn, invocation)
        await store.start_waiting_run(
            env.conn,
            fire.run_id,
            previous=previous,
            sets={
                "status": status,
                "invocation_id": fire.invocation_id,
                "action_args": fire.argv,
                "trigger_context": fire.trigger_context,
                "fired_at": now,
                "ended_at": now if failed else None,
                "error_detail": clip(summary) if failed else None,
                "updated_at": now,
                "status_reason_code": reason,
                "status_reason_summary": clip(summary),
                "status_evidence_refs": refs,
            },
        )
        transitions = [
            _started(fire, previous, status, reason, summary, now),
            Transition(
                entity_type="invocation",
                entity_id=fire.invocation_id,
                status=status,
                reason_code=reason if failed else "run.started.ok",
                evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
                actor="scheduler",
                created_at=now,
            ),
        ]
        await record_transitions(env.conn, transitions)
        if failed:
            await notify_run(env.conn, fire.run_id, now=now)
    if not failed:
        env.committed[fire.run_id] = fire
    return True


async def _queue_waiting(
    env: FireEnv, fire: Prepared, now: float, *, previous: str, fired: tuple[str, str]
) -> bool:
    """The waiting row becomes ``queued`` for any node's worker (``scheduled_on_any_node``):
    the claim adds its invocation, guarded on ``previous``."""
    reason, summary = fired
    refs = [{"kind": "schedule", "id": str(fire.schedule["id"])}]
    async with write_transaction(env.conn):
        won = await store.start_waiting_run(
            env.conn,
            fire.run_id,
            previous=previous,
            sets={
                "status": "queued",
                "queued_at": now,
                "lease_attempts": 0,
                "action_args": fire.argv,
                "trigger_context": fire.trigger_context,
                "updated_at": now,
                "status_reason_code": reason,
                "status_reason_summary": clip(summary),
                "status_evidence_refs": refs,
            },
        )
        if won:
            await record_transitions(
                env.conn,
                [_started(fire, previous, "queued", reason, summary, now)],
            )
    if won:
        fire.queued = True
        fire.discard()
    return won


def _started(
    fire: Prepared, previous: str, status: str, reason: str, summary: str, now: float
) -> Transition:
    """The transition row of a waiting run's start (``running``, ``queued`` or ``failed``)."""
    return Transition(
        entity_type="schedule_run",
        entity_id=fire.run_id,
        previous_status=previous,
        status=status,
        reason_code=reason,
        reason_summary=clip(summary),
        evidence_refs=[{"kind": "schedule", "id": str(fire.schedule["id"])}],
        actor="scheduler",
        metadata={"attempt": fire.trigger_context.get("attempt")},
        created_at=now,
    )


async def fire_due_retries(env: FireEnv, admission: Admission, start: StartFire, now: float) -> int:
    """Start every retry whose backoff has passed while a global slot is free; returns how
    many started."""
    started = 0
    for row in await due_retries(env.conn, now):
        schedule = await load_schedule(env.conn, str(row["schedule_id"]))
        if schedule is None:
            continue  # deleted meanwhile: its runs go with it
        reservation = admission.reserve_retry(str(schedule["id"]), now=now)
        if reservation is None:
            break  # the global cap is reached: the retry waits for a slot
        try:
            fire = await prepare_row(env, schedule, row, kind="retry")
            reservation.run_id = fire.run_id
            won = await commit_waiting(
                env,
                fire,
                env.clock(),
                previous="retry_wait",
                fired=(RETRY_FIRED, "the retry's backoff has passed"),
            )
        except BaseException:
            reservation.release()
            raise
        if not won:
            fire.discard()
            reservation.release()
            continue
        fire_event(fire, max(0.0, now - float(row["queued_at"] or now)))
        start(fire, reservation)
        started += 1
    return started


async def prepare_row(
    env: FireEnv, schedule: Mapping[str, Any], row: Mapping[str, Any], *, kind: str
) -> Prepared:
    """Prepare a stored run row (a due attempt, or a claimed queued fire): the schedule's
    action, or a follow-up's (its chain replayed from its ancestors' statuses)."""
    context = row["trigger_context"] or {}
    depth = int(row["chain_depth"] or 0)
    if depth == 0:
        return prepare(env, schedule, context, kind=kind, run_id=str(row["id"]))
    parent = row["chain_parent_id"]
    statuses = await store.chain_statuses(env.conn, parent)
    action = follow_up_action(schedule, statuses) if len(statuses) == depth else None
    fire = prepare(
        env,
        action or schedule,
        context,
        kind=kind,
        run_id=str(row["id"]),
        chain_depth=depth,
        chain_parent_id=parent,
    )
    if action is None:
        fire.discard()
        fire.setup_error = (
            "run.failed.invalid_action",
            "the schedule no longer has the follow-up this attempt retries",
        )
    return fire

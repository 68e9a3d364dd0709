"""Stored run rows that wait to start: a retry's ``retry_wait`` row, a buffered (or backfill)
``waiting_dependency`` row, a queued row a worker claims again.

:func:`prepare_row` prepares such a row (the schedule's action, or a follow-up's, its chain
replayed from its ancestors' statuses); :func:`commit_waiting` is the commit step the fire
pipeline runs for it (:func:`~studio_scheduler_core._fire.pipeline.fire_waiting`): the row
takes its invocation and moves on in one guarded change with its transition row
(``studio_state.transition``; a setup refusal's ``failed`` through the one terminal write,
:func:`~studio_scheduler_core._records.terminal.apply`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiosqlite

from studio_state import (
    Transition,
    record_transitions,
    run_to_completion,
    run_write_transaction,
    transition,
    write_transaction,
)

from .._notify.service import notify_run
from .._records.codec import dumps
from .._records.counters import count_fire_sync
from .._records.run import Run
from .._records.schedule import Schedule
from .._records.terminal import StatusChange, apply, clip
from .._records.vocab import ENGINE_ACTOR
from .._schedules.followups import follow_up_action
from . import store
from .commit import invocation_row
from .env import FireEnv, Prepared
from .prepare import prepare


async def prepare_row(env: FireEnv, schedule: Schedule, row: Run, *, kind: str) -> Prepared:
    """Prepare a stored run row (a due attempt, a buffered occurrence, a claimed queued fire):
    the schedule's action, or a follow-up's (its chain replayed from its ancestors'
    statuses)."""
    context = row.trigger_context if isinstance(row.trigger_context, Mapping) else {}
    depth = row.chain_depth or 0
    if depth == 0:
        return prepare(env, schedule, context, kind=kind, run_id=row.id)
    parent = row.chain_parent_id
    statuses = await store.chain_statuses(env.conn, parent)
    action = follow_up_action(schedule, statuses) if len(statuses) == depth else None
    fire = prepare(
        env,
        action or schedule,
        context,
        kind=kind,
        run_id=row.id,
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


async def commit_waiting(
    env: FireEnv, fire: Prepared, now: float, *, previous: str, fired: tuple[str, str]
) -> bool:
    """A waiting run row (``previous``: ``retry_wait`` or a buffered ``waiting_dependency``)
    becomes ``running`` (``failed`` on a setup refusal; ``queued`` when fires are queued for
    any node's worker) with its invocation, guarded on ``previous``; ``fired`` is the (reason
    code, summary) of the start. ``False``: the guard was lost, nothing written, the fire
    discarded.

    The commit and its tracking in ``env.committed`` complete even if the caller is
    cancelled meanwhile (shutdown sweeps what is tracked)."""
    won = await run_to_completion(_commit_waiting(env, fire, now, previous=previous, fired=fired))
    if not won:
        fire.discard()
    return won


async def _start(
    conn: aiosqlite.Connection,
    fire: Prepared,
    previous: str,
    status: str,
    fired: tuple[str, str],
    now: float,
    **sets: Any,
) -> bool:
    """The guarded ``previous`` → ``status`` change of a waiting run's start, with its
    transition row: ``failed`` (a setup refusal) is a terminal status and goes through the
    one terminal write; ``running`` and ``queued`` are one ``studio_state.transition``."""
    reason, summary = fired
    refs = [{"kind": "schedule", "id": fire.schedule.id}]
    columns = {
        **sets,
        "action_args": dumps(fire.argv),
        "trigger_context": dumps(fire.trigger_context),
        "status_evidence_refs": dumps(refs),
    }
    metadata = {"attempt": fire.trigger_context.get("attempt")}
    if status == "failed":
        change = StatusChange(
            "schedule_runs",
            fire.run_id,
            status,
            reason,
            summary,
            ENGINE_ACTOR,
            now,
            previous=previous,
            sets=columns,
            evidence_refs=refs,
            metadata=metadata,
        )
        return (await apply(conn, [change]))[0]
    return await transition(
        conn,
        table="schedule_runs",
        entity_type="schedule_run",
        entity_id=fire.run_id,
        from_statuses=(previous,),
        to_status=status,
        reason_code=reason,
        reason_summary=clip(summary),
        now=now,
        set_fields={
            **columns,
            "status_reason_code": reason,
            "status_reason_summary": clip(summary),
        },
        evidence_refs=refs,
        actor=ENGINE_ACTOR,
        metadata=metadata,
    )


async def _commit_waiting(
    env: FireEnv, fire: Prepared, now: float, *, previous: str, fired: tuple[str, str]
) -> bool:
    failed = fire.setup_error is not None
    if env.queue_fires and not failed:
        return await _queue_waiting(env, fire, now, previous=previous, fired=fired)
    status = "failed" if failed else "running"
    reason, summary = fire.setup_error or fired
    invocation = invocation_row(fire, now)
    async with write_transaction(env.conn):
        # Checked under the write lock: the invocation goes in before the run points at it.
        if await store.run_status(env.conn, fire.run_id) != previous:
            return False
        await store.insert_invocation(env.conn, invocation)
        won = await _start(
            env.conn,
            fire,
            previous,
            status,
            (reason, summary),
            now,
            invocation_id=fire.invocation_id,
            fired_at=now,
            ended_at=now if failed else None,
            error_detail=clip(summary) if failed else None,
        )
        if not won:
            await store.delete_invocation(env.conn, fire.invocation_id)
            return False
        await record_transitions(
            env.conn,
            [
                Transition(
                    entity_type="invocation",
                    entity_id=fire.invocation_id,
                    status=status,
                    reason_code=invocation.status_reason_code,
                    evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
                    actor=ENGINE_ACTOR,
                    created_at=now,
                )
            ],
        )
        await _count_fire(env, fire, now)
        if failed:
            await notify_run(env.conn, fire.run_id, now=now)
    if not failed:
        env.committed[fire.run_id] = fire
    return True


async def _count_fire(env: FireEnv, fire: Prepared, now: float) -> None:
    """A buffered or backfilled occurrence fires when it leaves the waiting state (its row was
    written as a wait, not a fire): counted then, in the transaction that starts it, like every
    other fire (activity, the day's counters, and the health row's ``fires`` that
    ``remaining_runs`` reads)."""
    top_level = fire.chain_depth == 0
    await run_write_transaction(
        env.conn, lambda db: count_fire_sync(db, fire.schedule_id, now, top_level=top_level)
    )


async def _queue_waiting(
    env: FireEnv, fire: Prepared, now: float, *, previous: str, fired: tuple[str, str]
) -> bool:
    """The waiting row becomes ``queued`` for any node's worker (``scheduled_on_any_node``):
    the claim adds its invocation, guarded on ``previous``."""
    async with write_transaction(env.conn):
        won = await _start(
            env.conn, fire, previous, "queued", fired, now, queued_at=now, lease_attempts=0
        )
        if won:
            await _count_fire(env, fire, now)
    if won:
        fire.queued = True
        fire.discard()
    return won

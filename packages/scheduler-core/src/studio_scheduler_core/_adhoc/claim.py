"""The claim of a queued ad-hoc run: the commit step of the fire pipeline for the worker.

One guarded transaction inserts the attempt's invocation and moves the row ``queued`` →
``running`` (or straight to ``failed`` when the launch setup was refused) with this worker's
lease, guarded on the attempt count read and on no other running row holding its
``concurrency_key``. A lost guard writes nothing (the invocation is removed again).

On PostgreSQL (READ COMMITTED) the ``concurrency_key`` guard is a ``NOT EXISTS`` over other
rows, which a concurrent claim of another row of the same key does not see until it commits:
the claim first takes a transaction advisory lock on the key
(:func:`~.store.lock_concurrency_keys`), so claims of one key are serialised and each one's
guard reads the other's committed row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiosqlite

from studio_state import record_transitions, write_transaction

from .._fire import store as fire_store
from .._fire.commit import invocation_row
from .._fire.env import Prepared
from .._notify.service import notify_run
from .._records.codec import dumps
from .._records.invocation import NewInvocation
from .._records.run import Run
from .._records.schedule import Action
from .._records.terminal import StatusChange, apply, clip
from .._records.vocab import ENGINE_ACTOR
from . import store
from .lease import CLAIMED, lease_transition


@dataclass
class Slot:
    """One of the worker's ad-hoc slots (``max_adhoc_concurrent``; never a scheduled slot),
    reserved for a claim; the worker's open set holds it once the claim commits."""

    run_id: str | None = None
    released: bool = False

    def release(self) -> None:
        """Give the slot back before the claim started. Idempotent."""
        self.released = True


@dataclass(frozen=True, slots=True)
class Queued:
    """What a queued ad-hoc row runs: its stored :class:`Action` (the launcher checks it
    again as it prepares), its own ``timeout_sec`` and its trigger context (JSON)."""

    action: Action
    timeout_sec: int | None
    context: Mapping[str, Any]


def action_of(run: Run) -> Queued:
    """The stored action (with its kind), deadline and trigger context of a queued row."""
    stored = run.action_args if isinstance(run.action_args, Mapping) else {}
    action = Action.from_row({**stored, "action_kind": stored.get("action_kind", run.action_kind)})
    timeout = stored.get("timeout_sec")
    context = run.trigger_context if isinstance(run.trigger_context, Mapping) else {}
    return Queued(action, timeout if isinstance(timeout, int) else None, context)


async def commit_claim(
    conn: aiosqlite.Connection,
    fire: Prepared,
    run: Run,
    *,
    worker_id: str,
    lease_seconds: float,
    now: float,
) -> bool:
    """Claim ``run`` for ``fire`` in one transaction; ``False`` when its guard was lost.

    The row is an ad-hoc run, or a scheduled fire the leader queued for any node's worker
    (its invocation is then named after the schedule, as a fire the leader runs is)."""
    scheduled = run.schedule_id is not None
    actor = ENGINE_ACTOR
    read_attempts = run.lease_attempts
    attempt = read_attempts + 1
    failed = fire.setup_error is not None
    status = "failed" if failed else "running"
    reason, summary = fire.setup_error or (CLAIMED, f"claimed by worker {worker_id}")
    expires = None if failed else now + lease_seconds
    inv_reason = reason if failed else "run.started.ok"
    invocation = invocation_row(fire, now, skill=None if scheduled else f"adhoc:{run.action_kind}")
    refs = [{"kind": "invocation", "id": fire.invocation_id}]
    change = StatusChange(
        "schedule_runs",
        fire.run_id,
        status,
        reason,
        summary,
        actor,
        now,
        previous="queued",
        sets={
            "leased_by": worker_id,
            "lease_expires_at": expires,
            "lease_attempts": attempt,
            "invocation_id": fire.invocation_id,
            "fired_at": now,
            "ended_at": now if failed else None,
            "error_detail": clip(summary) if failed else None,
            "child_pid": None,
            "child_started_at": None,
            "status_evidence_refs": f'[{{"kind":"invocation","id":"{fire.invocation_id}"}}]',
            # A scheduled fire was prepared again here: its row shows the argv that runs.
            **({"action_args": dumps(fire.argv)} if scheduled else {}),
        },
        guards={"lease_attempts": read_attempts},
        exclusive="concurrency_key",
        evidence_refs=refs,
        metadata={
            "worker_id": worker_id,
            "lease_attempt": attempt,
            "lease_expires_at": expires,
            "argv": fire.argv,
        },
    )
    try:
        key = None if failed else run.concurrency_key
        won = await _write_claim(
            conn, fire, invocation, change, inv_reason, summary, now, actor, key
        )
    except BaseException:
        fire.discard()
        raise
    if not won:
        fire.discard()
    return won


async def _write_claim(
    conn: aiosqlite.Connection,
    fire: Prepared,
    invocation: NewInvocation,
    change: StatusChange,
    inv_reason: str,
    summary: str,
    now: float,
    actor: str,
    key: str | None,
) -> bool:
    async with write_transaction(conn):
        # Already held when a claim pass took its batch's keys (a lock held twice is fine).
        await store.lock_concurrency_keys(conn, [key])
        # The invocation first: schedule_runs.invocation_id references it (not deferred).
        await fire_store.insert_invocation(conn, invocation)
        if not (await apply(conn, [change]))[0]:
            await fire_store.delete_invocation(conn, fire.invocation_id)
            return False
        transition = lease_transition(
            "invocation",
            fire.invocation_id,
            None,
            change.status,
            inv_reason,
            summary,
            now,
            actor=actor,
            refs=[{"kind": "schedule_run", "id": fire.run_id}],
        )
        await record_transitions(conn, [transition])
        if change.status == "failed":
            await notify_run(conn, fire.run_id, now=now)
        return True

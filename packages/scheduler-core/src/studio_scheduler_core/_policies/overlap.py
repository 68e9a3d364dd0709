"""The overlap policies beyond skip/allow: ``buffer_one``, ``buffer_all``, ``cancel_other``.

Evaluation asks :meth:`OverlapPolicies.intercept` first when a run of the schedule is in
flight: a buffering schedule keeps the occurrence (or skips it, ``schedule.skipped.buffer_full``,
once its buffer is full); ``cancel_other`` cancels the in-flight runs
(``run.cancelled.overlap``) and lets the occurrence go on through the gates. Every tick,
:meth:`OverlapPolicies.start_buffered` starts the oldest buffered occurrence of each schedule
with nothing in flight, through the gates (budget, max_runs, the global slot).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from studio_state import write_transaction

from .._admission.gates import Admission
from .._fire import store
from .._fire.env import FireEnv
from .._fire.occurrence import ScheduleClaim, skipped_run, write_skip
from .._fire.pipeline import StartFire, Waiting, fire_waiting
from .._notify.service import notify_run
from .._records.run import Run
from .._records.terminal import StatusChange, apply
from .._records.vocab import ENGINE_ACTOR
from .._schedules.buffer import (
    BUFFER_FULL,
    BUFFERED,
    CANCELLED_OVERLAP,
    FIRED_BACKFILL,
    FIRED_BUFFERED,
    buffer_bound,
    buffered_count,
)
from .._schedules.store import drop_buffered, get_schedule, set_enabled
from ..abc import Occurrence
from .retry_fire import fire_due_retries

logger = logging.getLogger("studio_scheduler_core")

Revoke = Callable[[str], Awaitable[bool]]


class OverlapPolicies:
    """Buffering and cancel-other for one engine (its admission, fire runner and start)."""

    def __init__(
        self, env: FireEnv, admission: Admission, start: StartFire, revoke: Revoke | None
    ) -> None:
        self._env = env
        self._admission = admission
        self._start = start
        self._revoke = revoke

    async def intercept(
        self, occ: Occurrence, claim: Callable[[], ScheduleClaim], now: float
    ) -> str | None:
        """The outcome when the policy decided the occurrence (``buffer``, ``skip``,
        ``lost``); ``None``: admission decides (after cancel_other's cancels)."""
        schedule = occ.schedule
        sid = schedule.id
        if not self._admission.in_flight(sid):
            return None
        policy = schedule.overlap_policy
        if policy == "cancel_other":
            await self.cancel_in_flight(sid, now)
            return None
        bound = buffer_bound(policy)
        if not bound:
            return None
        context = {**occ.trigger_context, "due_at": occ.due_at}
        if await buffered_count(self._env.conn, sid) >= bound:
            run, transition = skipped_run(
                schedule_id=sid,
                action_kind=schedule.action_kind,
                reason_code=BUFFER_FULL,
                summary=f"a run is in flight and the {policy} buffer is full ({bound})",
                context={**context, "skipped": BUFFER_FULL},
                now=now,
                metadata={"overlap_policy": policy, "bound": bound},
            )
            won = await write_skip(
                self._env.conn, claim=claim(), run=run, transitions=[transition], now=now
            )
            return "skip" if won else "lost"
        run, transition = skipped_run(
            schedule_id=sid,
            action_kind=schedule.action_kind,
            reason_code=BUFFERED,
            summary="a run of this schedule is in flight; the occurrence waits in the buffer",
            context=context,
            now=now,
            metadata={"overlap_policy": policy, "bound": bound},
        )
        run = replace(run, status="waiting_dependency", ended_at=None)
        transition = replace(transition, status="waiting_dependency")
        won = await write_skip(
            self._env.conn, claim=claim(), run=run, transitions=[transition], now=now
        )
        return "buffer" if won else "lost"

    async def cancel_in_flight(self, schedule_id: str, now: float) -> int:
        """Cancel the schedule's in-flight top-level runs (``run.cancelled.overlap``) and wait
        for their children to stop; returns how many were cancelled."""
        run_ids = [
            r.run_id
            for r in list(self._admission.running.get(schedule_id, {}).values())
            if r.run_id
        ]
        cancelled = 0
        for run_id in run_ids:
            if await store.run_status(self._env.conn, run_id) is None:
                continue
            invocation_id = await store.run_invocation(self._env.conn, run_id)
            summary = "a new occurrence arrived under overlap_policy cancel_other"
            changes = [
                StatusChange(
                    "schedule_runs",
                    run_id,
                    "cancelled",
                    CANCELLED_OVERLAP,
                    summary,
                    ENGINE_ACTOR,
                    now,
                    sets={"ended_at": now},
                )
            ]
            if invocation_id is not None:
                changes.append(
                    StatusChange(
                        "invocations",
                        invocation_id,
                        "cancelled",
                        CANCELLED_OVERLAP,
                        summary,
                        ENGINE_ACTOR,
                        now,
                        sets={"ended_at": now},
                    )
                )
            async with write_transaction(self._env.conn):
                won = (await apply(self._env.conn, changes))[0]
                if won:
                    await notify_run(self._env.conn, run_id, now=now)
            if won:
                cancelled += 1
                self._env.committed.pop(run_id, None)
                if self._revoke is not None:
                    await self._revoke(run_id)
                parked = self._admission.dispatched.get(run_id)
                if parked is not None:
                    # Queued, or running on a worker that stops it once it sees the row
                    # cancelled: its slot is free now, for the occurrence that cancelled it.
                    parked.release()
        return cancelled

    async def start_waiting(self, now: float) -> dict[str, int]:
        """Start the retries whose backoff has passed and the buffered occurrences whose turn
        came; returns how many of each started (non-zero counts only)."""
        counts = {
            "retry": await fire_due_retries(self._env, self._admission, self._start, now),
            "buffered": await self.start_buffered(now),
        }
        return {name: n for name, n in counts.items() if n}

    async def start_buffered(self, now: float) -> int:
        """Start the oldest buffered occurrence of each schedule with nothing in flight."""
        rows = await store.waiting_runs(self._env.conn, 1000)
        seen: set[str] = set()
        started = 0
        for row in rows:
            sid = str(row.schedule_id)
            if sid in seen or self._admission.in_flight(sid):
                continue
            seen.add(sid)
            if await self._start_one(sid, row, now):
                started += 1
        return started

    async def _start_one(self, sid: str, row: Run, now: float) -> bool:
        conn = self._env.conn
        schedule = await get_schedule(conn, sid)
        if schedule is None:
            return False
        if not schedule.enabled:
            async with write_transaction(conn):
                await drop_buffered(conn, sid, now=now)
            return False
        decision = await self._admission.admit(schedule, now=now, path="buffered")
        if decision.outcome == "defer":
            return False
        if decision.outcome != "fire" or decision.reservation is None:
            async with write_transaction(conn):
                await apply(
                    conn,
                    [
                        StatusChange(
                            "schedule_runs",
                            row.id,
                            "skipped",
                            decision.reason_code,
                            decision.message,
                            ENGINE_ACTOR,
                            now,
                            previous="waiting_dependency",
                            sets={"ended_at": now},
                        )
                    ],
                )
            if decision.outcome == "disable":
                await set_enabled(
                    conn,
                    sid,
                    enabled=False,
                    reason_code=decision.reason_code,
                    reason_summary=decision.message,
                    now=now,
                    metadata=decision.metadata,
                )
            return False
        context = row.trigger_context if isinstance(row.trigger_context, Mapping) else {}
        backfill = bool(context.get("backfill"))
        waiting = Waiting(
            row,
            kind="scheduled",
            previous="waiting_dependency",
            fired=(FIRED_BACKFILL, "a backfill occurrence's turn came")
            if backfill
            else (FIRED_BUFFERED, "the in-flight run ended; the buffered occurrence starts"),
        )
        fired = await fire_waiting(self._env, schedule, waiting, decision.reservation, self._start)
        return fired is not None

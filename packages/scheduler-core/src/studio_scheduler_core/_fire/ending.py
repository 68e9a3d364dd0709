"""The ``outcome`` event of a run's end: one per run, emitted by the process that saw it end.

A run this process executes ends through its own terminal write, or through an operator's
cancel that another writer committed first (the API in this process, or ``studio schedule
cancel`` on the database from another process): the terminal write then loses its guard, the
child is stopped (by the canceller, or by this process when the row stops being its own), and
this process, which owns the run, reads the row and reports the cancel as the run's outcome.
A run cancelled before it had a process (queued, waiting) has no owner. On SQLite the engine
reports it from its transition row (:class:`WaitingCancels`, a concern of every tick), so a
cancel made by another process (``studio schedule cancel`` on the database) is counted by the
server too; on PostgreSQL the canceller reports it (:func:`outcome_event` with no duration).
"""

from __future__ import annotations

import logging

import aiosqlite

from .._observe.events import emit
from .._observe.store import read_waiting_cancels, transition_position
from .._records.run import Run
from .._schedules.store import get_run
from .env import FireEnv, Outcome, Prepared

logger = logging.getLogger("studio_scheduler_core")

OPERATOR_CANCELLED = "run.cancelled.operator"
"""The reason code of an operator's cancel (API, CLI, dashboard, force-delete)."""


def outcome_event(
    *,
    run_id: str,
    schedule_id: str | None,
    status: str,
    reason_code: str,
    exit_code: int | None,
    kind: str,
    duration: float | None,
) -> None:
    """The log event of a run's end (``duration`` ``None``: it never started)."""
    took = "before it started" if duration is None else f"after {duration:.3f}s"
    owner = "(ad-hoc)" if schedule_id is None else f"of schedule {schedule_id}"
    emit(
        "outcome",
        f"run {run_id} {owner} ended {status} [{reason_code}] {took}",
        schedule_id=schedule_id,
        run_id=run_id,
        status=status,
        reason_code=reason_code,
        exit_code=exit_code,
        kind=kind,
        duration_seconds=None if duration is None else max(0.0, duration),
    )


def fire_schedule_id(fire: Prepared) -> str | None:
    """The schedule a fire belongs to (``None`` for an ad-hoc run)."""
    return fire.schedule_id


async def report_end(env: FireEnv, fire: Prepared, outcome: Outcome, started: float) -> None:
    """Emit the outcome of a run this process executed.

    Its own terminal write reports what it wrote. A write that lost to an operator's cancel
    (committed by this process or another) reports the cancel, read from the row; a write
    that lost to anything else reports nothing (whoever ended the run reports it).
    """
    status, reason_code, exit_code = outcome.status, outcome.reason_code, outcome.exit_code
    if not outcome.applied:
        try:
            row = await get_run(env.conn, fire.run_id)
        except Exception as exc:  # the event must never break the run's end
            logger.warning("reading the end of run %s failed: %s", fire.run_id, exc)
            return
        if not ended_by_operator(row):
            return
        assert row is not None
        status, reason_code, exit_code = row.status, OPERATOR_CANCELLED, None
    outcome_event(
        run_id=fire.run_id,
        schedule_id=fire_schedule_id(fire),
        status=status,
        reason_code=reason_code,
        exit_code=exit_code,
        kind=fire.kind,
        duration=env.clock() - started,
    )


def ended_by_operator(run: Run | None) -> bool:
    """Whether the run was ended by an operator's cancel."""
    return (
        run is not None
        and run.status == "cancelled"
        and run.status_reason_code == OPERATOR_CANCELLED
    )


def waiting_kind(schedule_id: str | None, chain_depth: int | None) -> str:
    """The kind of a run cancelled before it started, from its schedule and depth."""
    if schedule_id is None:
        return "adhoc"
    return "follow_up" if int(chain_depth or 0) > 0 else "scheduled"


class WaitingCancels:
    """Reports the operator's cancels of runs that never started, from their transition rows.

    SQLite only (its ``rowid`` orders the rows): each call emits the cancels recorded since
    the last one, by any process. Cancels of running runs are left to the process executing
    them (:func:`report_end`).
    """

    BATCH = 1000

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._seen: int | None = None

    async def report(self, now: float) -> dict[str, int]:
        """Emit the cancels recorded since the last call (the first call only starts)."""
        if self._seen is None:
            self._seen = await transition_position(self._conn)
            return {"cancelled": 0}
        emitted = 0
        while True:
            rows = await read_waiting_cancels(
                self._conn, after=self._seen, reason_code=OPERATOR_CANCELLED, limit=self.BATCH
            )
            for row in rows:
                self._seen = int(row.seq)
                outcome_event(
                    run_id=row.entity_id,
                    schedule_id=row.schedule_id,
                    status="cancelled",
                    reason_code=OPERATOR_CANCELLED,
                    exit_code=None,
                    kind=waiting_kind(row.schedule_id, row.chain_depth),
                    duration=None,
                )
            emitted += len(rows)
            if len(rows) < self.BATCH:
                return {"cancelled": emitted}

"""What an evaluation pass records beside its fires: capacity deferrals and coalesced slots.

A schedule's consecutive deferrals are counted and the 1st, 11th, 21st … is recorded as a
``skipped`` run with the deferral's reason; a fire that passes over missed interval slots
(coalescing them) is counted and recorded by the same rule (``schedule.skipped.coalesced``).
The records of a pass are written in one transaction at its end.
"""

from __future__ import annotations

import logging

import aiosqlite

from .._admission.gates import Decision
from .._fire.occurrence import Deferral, write_deferrals
from .._observe.events import emit
from ..abc import Occurrence

DEFERRAL_RECORD_EVERY = 10
COALESCED = "schedule.skipped.coalesced"


class PassRecords:
    """Deferral and coalescing counts per schedule, and the records not yet written."""

    def __init__(self) -> None:
        self._deferrals: dict[str, int] = {}
        self._coalescing: dict[str, int] = {}
        self._pending: list[Deferral] = []
        self._summaries: dict[str, str] = {}
        self.coalesced_total = 0
        """Slots coalesced away since start (the health figure)."""

    def admitted(self, schedule_id: str) -> None:
        """The schedule's occurrence passed the capacity gate: its deferral run ends."""
        self._deferrals.pop(schedule_id, None)

    def coalesce(self, occ: Occurrence, slots: int, next_at: float | None, run_id: str) -> None:
        """Count the slots a fire passed over; record the 1st, 11th, 21st … consecutive
        coalescing fire of a schedule in its run list (the deferral record rule)."""
        schedule = occ.schedule
        sid = schedule.id
        if slots <= 0:
            self._coalescing.pop(sid, None)
            return
        self.coalesced_total += slots
        count = self._coalescing.get(sid, 0) + 1
        self._coalescing[sid] = count
        if count % DEFERRAL_RECORD_EVERY == 1:
            self._pending.append(
                Deferral(
                    schedule_id=sid,
                    action_kind=schedule.action_kind,
                    reason_code=COALESCED,
                    summary=f"{slots} slot(s) fell due while the schedule was late or busy; "
                    f"coalesced into run {run_id}",
                    metadata={
                        "slots": slots,
                        "due_at": occ.due_at,
                        "next_fire_at": next_at,
                        "run_id": run_id,
                    },
                    deferral_count=count,
                    count_key="coalesced_count",
                )
            )

    def defer(self, sid: str, action_kind: str, decision: Decision) -> None:
        """Count a deferral of the schedule ``sid`` (logged; recorded on the 1st, 11th, 21st
        …; ``action_kind``: what its record names)."""
        count = self._deferrals.get(sid, 0) + 1
        self._deferrals[sid] = count
        emit(
            "deferral",
            f"schedule {sid} deferred ({decision.reason_code}, deferral {count})",
            level=logging.INFO if count == 1 else logging.DEBUG,
            schedule_id=sid,
            reason_code=decision.reason_code,
            count=count,
        )
        if count % DEFERRAL_RECORD_EVERY == 1:
            self._pending.append(
                Deferral(
                    schedule_id=sid,
                    action_kind=action_kind,
                    reason_code=decision.reason_code,
                    summary=self._summary(decision.message),
                    metadata=decision.metadata,
                    deferral_count=count,
                )
            )

    def _summary(self, message: str) -> str:
        summary = self._summaries.get(message)
        if summary is None:
            summary = self._summaries[message] = f"{message}; still due, retried when a slot frees"
        return summary

    async def flush(self, conn: aiosqlite.Connection, now: float) -> None:
        """Write the pending records in one transaction."""
        records, self._pending = self._pending, []
        await write_deferrals(conn, records, now=now)

"""Holds on fires that run on any node (``scheduled_on_any_node``).

The leader admits every fire and commits it ``queued``; a worker of any node claims and runs
it. The fire's reservation (its global slot and overlap registration) stays
with the leader until the leader sees the run end: every leader tick releases the holds whose
runs are no longer queued or running. A node that becomes leader first holds again every
top-level fire still queued or running under a lease, so the global cap and overlap stay
exact across nodes and across a change of leader. ``max_runs`` counts the queued and running rows
in the database itself.
"""

from __future__ import annotations

import aiosqlite

from .gates import Admission
from .store import top_level_in_flight, unfinished


async def release_ended(admission: Admission, conn: aiosqlite.Connection) -> int:
    """Release the holds of dispatched fires that ended (or were deleted); how many."""
    held = list(admission.dispatched)
    if not held:
        return 0
    live = await unfinished(conn, held)
    released = 0
    for run_id in held:
        reservation = admission.dispatched.get(run_id)
        if run_id not in live and reservation is not None:
            reservation.release()
            released += 1
    return released


async def restore_holds(admission: Admission, conn: aiosqlite.Connection) -> int:
    """Hold again every top-level fire in flight on a worker that this admission does not
    hold yet (a new leader, or a restart); how many."""
    held = {r.run_id for fires in admission.running.values() for r in fires.values()}
    restored = 0
    for fire in await top_level_in_flight(conn):
        if fire.run_id in held:
            continue
        admission.restore(fire.schedule_id, fire.run_id, since=fire.fired_at)
        restored += 1
    return restored

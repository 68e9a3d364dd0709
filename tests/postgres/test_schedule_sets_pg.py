"""Two nodes applying the same ScheduleSet at once on PostgreSQL: the advisory lock per owner
serialises them, and the second finds the rows changed since its plan ("changed since plan;
re-run") and writes nothing; no duplicate, no interleaving, one transition per schedule.

The race is made deterministic by holding the owner's advisory lock from a third session while
both applies start: both must wait on it (not run), then run one after the other.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg

from studio_scheduler_core import (
    SchedulerSettings,
    ScheduleSetChanged,
    ScheduleSetPlan,
    apply_schedule_plan,
)
from studio_scheduler_core._schedules.sets.store import owner_lock_key
from studio_scheduler_core._schema import ensure_schema
from studio_scheduler_core.testing import numbered_set, plan_set_files
from studio_state import connect, fetch_value

SETTINGS = SchedulerSettings(command_allowlist=("true",))
MEMBERS = 25


def _document(path: Path, every: str) -> None:
    path.write_text(numbered_set("team-a", MEMBERS, every=every))


async def _plan(conn: Any, path: Path) -> ScheduleSetPlan:
    return await plan_set_files(conn, [path], settings=SETTINGS, now=time.time())


async def _apply(conn: Any, plan: ScheduleSetPlan) -> Any:
    return await apply_schedule_plan(conn, plan, timezone="UTC", clock=time.time)


async def _race(pg_dsn: str, path: Path) -> tuple[list[Any], int, int]:
    """Both nodes plan, then apply at once behind a held lock; the outcomes and the counts."""
    async with connect(pg_dsn) as one, connect(pg_dsn) as two:
        await ensure_schema(one)
        await ensure_schema(two)
        plans = [await _plan(one, path), await _plan(two, path)]
        holder = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=False)
        try:
            await holder.execute("SELECT pg_advisory_xact_lock(%s)", (owner_lock_key("team-a"),))
            tasks = [
                asyncio.ensure_future(_apply(conn, plan))
                for conn, plan in zip((one, two), plans, strict=True)
            ]
            await asyncio.sleep(1.0)
            assert not any(t.done() for t in tasks), "an apply ran while the owner's lock was held"
            await holder.commit()
        finally:
            await holder.close()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        schedules = await fetch_value(one, "SELECT count(*) FROM schedules")
        transitions = await fetch_value(one, "SELECT count(*) FROM status_transitions")
        return outcomes, int(schedules), int(transitions)


async def test_two_nodes_creating_the_same_set_at_once(pg_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    _document(path, "5m")
    outcomes, schedules, transitions = await _race(pg_dsn, path)
    applied = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(applied) == 1 and applied[0].created == MEMBERS
    assert len(refused) == 1 and isinstance(refused[0], ScheduleSetChanged)
    assert "changed since plan; re-run" in str(refused[0])
    assert (schedules, transitions) == (MEMBERS, MEMBERS)


async def test_two_nodes_updating_the_same_set_at_once(pg_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    _document(path, "5m")
    async with connect(pg_dsn) as conn:
        await ensure_schema(conn)
        await _apply(conn, await _plan(conn, path))
    _document(path, "10m")
    outcomes, schedules, transitions = await _race(pg_dsn, path)
    applied = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(applied) == 1 and applied[0].updated == MEMBERS
    assert len(refused) == 1 and isinstance(refused[0], ScheduleSetChanged)
    # one creation and exactly one update per schedule: the second apply wrote nothing
    assert (schedules, transitions) == (MEMBERS, 2 * MEMBERS)
    async with connect(pg_dsn) as conn:
        intervals = await fetch_value(
            conn, "SELECT count(DISTINCT interval_sec) FROM schedules WHERE interval_sec = 600"
        )
        assert intervals == 1

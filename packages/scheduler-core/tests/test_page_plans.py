"""List pages read through indexes: no full scan of the big table, no temp B-tree per page.

The statements are captured from the real service calls (SQLite's trace callback, with the
bound values expanded) and explained on the same real database file.
"""

from __future__ import annotations

from typing import Any

import pytest

from studio_scheduler_core import (
    ADHOC_PAGE_KEY,
    RUN_PAGE_KEY,
    AdhocRunService,
    SchedulerSettings,
    ScheduleService,
    ScheduleValidationError,
)
from studio_state import ManualClock, fetch_all

pytestmark = pytest.mark.sqlite_only(
    "reads SQLite's query plan of statements caught with its trace callback"
)

RUNS = 300


async def _statements(conn: Any, call: Any) -> tuple[Any, list[str]]:
    seen: list[str] = []
    await conn.set_trace_callback(seen.append)
    try:
        result = await call()
    finally:
        await conn.set_trace_callback(None)
    return result, [s for s in seen if s.lstrip().upper().startswith("SELECT")]


async def _plans(conn: Any, statements: list[str], table: str) -> list[str]:
    plans = []
    for sql in statements:
        if f"FROM {table}" not in sql:
            continue
        rows = await fetch_all(conn, f"EXPLAIN QUERY PLAN {sql}")
        plans.append(" | ".join(str(r["detail"]) for r in rows))
    assert plans, statements
    return plans


def _assert_indexed(plans: list[str], table: str) -> None:
    for plan in plans:
        assert "TEMP B-TREE" not in plan, plan
        for step in plan.split(" | "):
            if step.startswith(f"SCAN {table}"):
                assert "USING" in step and "INDEX" in step, plan  # never the table itself


async def _add_runs(conn: Any, schedule_id: str, clock: ManualClock, prefix: str) -> None:
    statuses = ("completed", "failed", "timed_out")
    await conn.executemany(
        "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
        "status, fired_at, created_at) VALUES (?, ?, '{}', 'command', '{}', ?, ?, ?)",
        [
            (f"{prefix}{i:05d}", schedule_id, statuses[i % 3], clock() + i // 2, clock() + i)
            for i in range(RUNS)
        ],
    )
    await conn.commit()


async def test_a_schedules_runs_page_and_its_total_read_the_page_index(
    conn: Any, service: ScheduleService, clock: ManualClock, h: Any
) -> None:
    created = await service.create(h.command_schedule("x.py"))
    other = await service.create(h.command_schedule("y.py", name="other"))
    await _add_runs(conn, created.id, clock, "run")
    await _add_runs(conn, other.id, clock, "oth")
    (runs, total), statements = await _statements(
        conn, lambda: service.list_runs(created.id, limit=50, offset=10)
    )
    assert total == RUNS and len(runs) == 50
    keys = [(r.fired_at, r.created_at) for r in runs]
    assert keys == sorted(keys, reverse=True)
    assert runs[0].id == f"run{RUNS - 1 - 10:05d}"
    plans = await _plans(conn, statements, "schedule_runs")
    _assert_indexed(plans, "schedule_runs")
    assert all("idx_schedule_runs_schedule_page" in p for p in plans), plans
    assert all("COVERING INDEX" in p for p in plans if "COUNT(*)" in p.upper()), plans

    (failed, failed_total), statements = await _statements(
        conn, lambda: service.list_runs(created.id, status="failed", limit=20)
    )
    assert failed_total == RUNS // 3 and len(failed) == 20
    assert {r.status for r in failed} == {"failed"}
    _assert_indexed(await _plans(conn, statements, "schedule_runs"), "schedule_runs")


async def test_the_schedules_page_reads_the_creation_index(
    service: ScheduleService, conn: Any, clock: ManualClock, h: Any
) -> None:
    for i in range(30):
        clock.advance(1.0)
        await service.create(h.command_schedule("x.py", name=f"s{i:02d}"))
    (rows, total), statements = await _statements(conn, lambda: service.list(limit=10, offset=5))
    assert total == 30
    assert [r.name for r in rows] == [f"s{i:02d}" for i in range(5, 15)]
    plans = await _plans(conn, statements, "schedules")
    _assert_indexed(plans, "schedules")
    assert any("idx_schedules_created" in p for p in plans), plans


async def test_a_runs_page_after_a_key_seeks_on_the_page_index(
    conn: Any, service: ScheduleService, clock: ManualClock, h: Any
) -> None:
    created = await service.create(h.command_schedule("x.py"))
    await _add_runs(conn, created.id, clock, "run")
    walked: list[str] = []
    after = None
    while True:
        (runs, total), statements = await _statements(
            conn, lambda key=after: service.list_runs(created.id, limit=70, after=key)
        )
        walked += [r.id for r in runs]
        plans = await _plans(conn, statements, "schedule_runs")
        _assert_indexed(plans, "schedule_runs")
        if after is not None:
            seeks = [p for p in plans if "idx_schedule_runs_schedule_page" in p]
            assert seeks and all("SEARCH" in p and "<" in p for p in seeks), plans
        if len(runs) < 70:
            break
        after = [getattr(runs[-1], column) for column in RUN_PAGE_KEY]
    everything, _ = await service.list_runs(created.id, limit=1000)
    assert walked == [r.id for r in everything] and len(set(walked)) == RUNS
    with pytest.raises(ScheduleValidationError) as bad:
        await service.list_runs(created.id, offset=1, after=after)
    assert bad.value.field == "cursor"
    with pytest.raises(ScheduleValidationError):
        await service.list_runs(created.id, after=[1.0])


async def test_the_adhoc_page_after_a_key_seeks_on_its_index(
    conn: Any, settings: SchedulerSettings, clock: ManualClock
) -> None:
    adhoc = AdhocRunService(conn, settings=settings, clock=clock)
    await conn.executemany(
        "INSERT INTO schedule_runs (id, trigger_context, action_kind, action_args, status, "
        "fired_at, created_at, queued_at) VALUES (?, '{}', 'command', '{}', 'completed', ?, ?, ?)",
        [(f"q{i:03d}", clock() + i, clock() + i, clock() + i // 2) for i in range(60)],
    )
    await conn.commit()
    first, _ = await adhoc.list(limit=25)
    after = [getattr(first[-1], column) for column in ADHOC_PAGE_KEY]
    (rest, total), statements = await _statements(conn, lambda: adhoc.list(limit=100, after=after))
    assert total == 60
    walked = [r.id for r in first + rest]
    assert walked == [f"q{i:03d}" for i in reversed(range(60))]
    plans = await _plans(conn, statements, "schedule_runs")
    _assert_indexed(plans, "schedule_runs")
    assert any("idx_schedule_runs_adhoc_page" in p and "<" in p for p in plans), plans

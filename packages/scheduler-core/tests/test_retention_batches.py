"""Retention batch sizing: each table's batches start small, grow while well under the target
hold, halve at least on an overshoot; and the live-run check of a batch reads indexes only
(it once scanned every run per batch, which at a million rows held the writer for ~0.4 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from studio_outbox import enqueue_dispatch
from studio_scheduler_core._recovery import retention
from studio_scheduler_core._recovery.retention import (
    FIRST_BATCH,
    MAX_BATCH,
    MIN_BATCH,
    TARGET_HOLD,
    BatchSizer,
    retention_pass,
)
from studio_state import fetch_all, run_sync

DAY = 86400.0


def test_the_sizer_grows_under_half_the_target_and_at_most_by_half() -> None:
    sizer = BatchSizer(0.010, first=50, low=10, high=5000)
    assert sizer.size == 50
    assert sizer.measured(0.001) == 75  # 10x headroom, but growth is capped at 1.5x
    assert sizer.measured(0.004) == 112
    assert sizer.measured(0.0049) == 168
    assert sizer.measured(0.009) == 168  # between half the target and the target: stays
    assert sizer.measured(0.006) == 168


def test_the_sizer_shrinks_at_least_by_half_on_an_overshoot() -> None:
    sizer = BatchSizer(0.010, first=400, low=10, high=5000)
    assert sizer.measured(0.011) == 200  # just over: halves
    assert sizer.measured(0.100) == 20  # 10x over: to what the cost per row fits
    assert sizer.measured(1.0) == 10  # never below the floor
    assert sizer.measured(0.0) == 15  # no measurable cost: grows, by half at most


def test_the_sizer_stays_within_its_bounds() -> None:
    sizer = BatchSizer(0.010, first=10_000, low=10, high=300)
    assert sizer.size == 300
    for _ in range(5):
        sizer.measured(0.0001)
    assert sizer.size == 300
    assert BatchSizer().size == FIRST_BATCH and BatchSizer().target == TARGET_HOLD


def _steps(step: float) -> Iterator[float]:
    now = 0.0
    while True:
        yield now
        now += step


async def _expired(conn: Any, clock: Any, n: int) -> None:
    for i in range(n):
        await enqueue_dispatch(conn, kind="k", deliver_to=f"x{i}", clock=clock)
    await conn.execute("UPDATE dispatch_outbox SET status = 'expired'")
    await conn.commit()


async def test_cheap_batches_grow_from_the_first_size(
    conn: Any, clock: Any, tmp_path: Path
) -> None:
    await _expired(conn, clock, 400)
    ticks = _steps(TARGET_HOLD / 10)  # every batch's statements take a tenth of the target
    report = await retention_pass(
        conn,
        now=clock() + 10 * DAY,
        retention_days=1,
        runs_dir=tmp_path,
        time_budget=1e9,
        timer=lambda: next(ticks),
    )
    assert report.done and report.dispatches == 400
    # the runs table first (no rows: one batch), then the dispatches' batches
    assert report.sizes[0] == FIRST_BATCH
    dispatch_sizes = report.sizes[1:]
    assert dispatch_sizes[:4] == [FIRST_BATCH, 75, 112, 168]
    assert report.holds == [pytest.approx(TARGET_HOLD / 10)] * len(report.holds)


async def test_costly_batches_shrink_to_the_floor(conn: Any, clock: Any, tmp_path: Path) -> None:
    await _expired(conn, clock, 200)
    ticks = _steps(TARGET_HOLD * 4)  # every batch takes four times the target
    report = await retention_pass(
        conn,
        now=clock() + 10 * DAY,
        retention_days=1,
        runs_dir=tmp_path,
        time_budget=1e9,
        timer=lambda: next(ticks),
    )
    assert report.done and report.dispatches == 200
    assert report.sizes[1:5] == [FIRST_BATCH, 12, MIN_BATCH, MIN_BATCH]
    assert max(report.sizes) <= MAX_BATCH


@pytest.mark.sqlite_only("reads SQLite's query plan")
async def test_the_live_run_check_reads_indexes_not_the_runs_table(conn: Any) -> None:
    seen: list[str] = []

    def plan(db: Any) -> None:
        ids = ["a", "b", "c"]
        original = db.execute

        class Explaining:
            def execute(self, sql: str, params: Any = ()) -> Any:
                for row in original(f"EXPLAIN QUERY PLAN {sql}", params).fetchall():
                    seen.append(str(row["detail"]))
                return original(sql, params)

        retention._keep_live_parents(Explaining(), ids)  # type: ignore[arg-type]

    await run_sync(conn, plan)
    assert seen, "the check ran no statement"
    assert not [d for d in seen if d.startswith("SCAN schedule_runs")], seen
    assert any("idx_schedule_runs_retry_of" in d for d in seen), seen
    indexes = await fetch_all(
        conn, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'schedule_runs'"
    )
    assert "idx_schedule_runs_retry_of" in {r["name"] for r in indexes}

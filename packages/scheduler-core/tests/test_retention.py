"""Retention in the reaper: old terminal runs and dispatches go with everything they own;
recent rows, live rows and a live run's chain parent stay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio_outbox import deliver_due_dispatches, enqueue_dispatch
from studio_scheduler_core import SchedulerSettings
from studio_scheduler_core._recovery.retention import retention_pass
from studio_state import fetch_all, fetch_value, is_postgres

DAY = 86400.0


async def _fire(engine: Any, clock: Any, schedule_id: str) -> None:
    row = await fetch_value(
        engine.conn, "SELECT next_fire_at FROM schedules WHERE id = ?", (schedule_id,)
    )
    clock.set(float(row))
    await engine.tick_once()
    await engine.wait_idle()


async def _deliver(conn: Any, db_target: str, **options: Any) -> None:
    """A delivery pass: the outbox's own on SQLite; on PostgreSQL its PostgreSQL pass, on a
    psycopg connection of its own (what an engine there does)."""
    if not is_postgres(db_target):
        await deliver_due_dispatches(conn, **options)
        return
    import psycopg

    from studio_outbox import postgres

    async with await psycopg.AsyncConnection.connect(db_target, autocommit=True) as pg:
        await postgres.deliver_due_dispatches(pg, **options)


async def _count(conn: Any, table: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> int:
    return int(await fetch_value(conn, f"SELECT COUNT(*) FROM {table} WHERE {where}", params))


async def test_old_rows_go_recent_and_live_rows_stay(
    make_engine, clock, h, db_path: Path, db_target: str, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock, retention_days=2, reaper_interval_seconds=1.0)
    conn = engine.conn
    ok = h.script("ok.py", "print('ok')\n")  # output: each run leaves a log file
    flag = tmp_path / "release"
    old = await engine.service.create(h.command_schedule(ok, name="old"))
    await _fire(engine, clock, old.id)
    old_run = (await h.runs_of(conn, old.id))[0]
    assert old_run.status == "completed"
    runs_dir = db_path.parent / "runs"
    runs_dir.mkdir(exist_ok=True)
    (runs_dir / f"{old_run.id}.log").write_text("output\n")
    await usage(conn, old_run.invocation_id, clock)
    await enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
    await enqueue_dispatch(conn, kind="k", deliver_to="y", clock=clock)
    await _deliver(conn, db_target, notify_template=["true"], clock=clock, limit=1)
    rows = await fetch_all(conn, "SELECT id, status FROM dispatch_outbox")
    statuses = {r["id"]: r["status"] for r in rows}
    assert sorted(statuses.values()) == ["delivered", "pending"]
    delivered_id = next(k for k, v in statuses.items() if v == "delivered")

    # a chain whose follow-up is still running: its (terminal) parent must stay
    chained = await engine.service.create(
        h.command_schedule(ok, name="chained", on_success={"command_args": [h.blocker, str(flag)]})
    )
    clock.set(float(chained.next_fire_at))
    await engine.tick_once()
    await h.eventually(lambda: _child_running(conn, chained.id))
    # that tick fired "old" a second time: retention must find it ended, not still running
    await h.eventually(lambda: _all_ended(conn, old.id))
    parent, child = await h.runs_of(conn, chained.id)

    clock.advance(3 * DAY)
    recent = await engine.service.create(h.command_schedule(ok, name="recent"))
    clock.set(float(recent.next_fire_at))
    await engine.tick_once()  # this tick's reaper runs retention too
    await h.eventually(lambda: _ended(conn, recent.id))

    assert await _count(conn, "schedule_runs", "id = ?", (old_run.id,)) == 0
    assert (
        await _count(
            conn,
            "invocations",
            "schedule_run_id = ? OR id = ?",
            (old_run.id, old_run.invocation_id),
        )
        == 0
    )
    assert await _count(conn, "sessions") == 0
    assert (
        await _count(
            conn,
            "status_transitions",
            "entity_id IN (?, ?)",
            (old_run.id, old_run.invocation_id),
        )
        == 0
    )
    assert not (runs_dir / f"{old_run.id}.log").exists()
    assert await _count(conn, "dispatch_outbox", "id = ?", (delivered_id,)) == 0
    assert await _count(conn, "status_transitions", "entity_id = ?", (delivered_id,)) == 0
    assert await _count(conn, "dispatch_outbox", "status = 'pending'") == 1
    # the live chain: parent and running child both stay
    assert await _count(conn, "schedule_runs", "id = ?", (parent.id,)) == 1
    assert await _count(conn, "schedule_runs", "chain_parent_id = ?", (parent.id,)) == 1
    assert (await h.runs_of(conn, recent.id))[0].status == "completed"
    before = h.T0 + DAY  # everything fired before the clock moved on
    left = await fetch_all(conn, "SELECT id FROM schedule_runs WHERE fired_at < ?", (before,))
    assert {r["id"] for r in left} == {parent.id, child.id}
    assert engine.last_retention is not None and engine.last_retention.runs == 2  # old's two
    # both of old's runs wrote a log (every run kind writes one)
    assert engine.last_retention.dispatches == 1 and engine.last_retention.log_files == 2

    # once the child ends (and is old), the whole chain goes
    flag.write_text("go")
    await engine.wait_idle()
    report = await retention_pass(conn, now=clock() + 3 * DAY, retention_days=2, runs_dir=runs_dir)
    assert report.done and report.runs >= 3  # parent, child, the recent run (+ later skips)
    assert await _count(conn, "schedule_runs", "id = ?", (parent.id,)) == 0
    assert all(hold < 1.0 for hold in report.holds)


async def test_zero_days_keeps_everything(
    conn, db_target: str, clock, tmp_path: Path, service, h
) -> None:
    ok = h.script("ok.py", "pass\n")
    await service.create(h.command_schedule(ok))
    await enqueue_dispatch(conn, kind="k", deliver_to="x", clock=clock)
    await _deliver(conn, db_target, notify_template=["true"], clock=clock)
    report = await retention_pass(
        conn, now=clock() + 1000 * DAY, retention_days=0, runs_dir=tmp_path
    )
    assert (report.runs, report.dispatches, report.holds) == (0, 0, [])
    assert await _count(conn, "dispatch_outbox") == 1


async def test_batches_resize_by_measured_hold_and_respect_the_time_budget(
    conn, clock, tmp_path: Path
) -> None:
    for i in range(1500):
        await enqueue_dispatch(conn, kind="k", deliver_to=f"x{i}", clock=clock)
    await conn.execute("UPDATE dispatch_outbox SET status = 'expired'")
    await conn.commit()
    ticks = iter(float(i) * 0.1 for i in range(10_000))  # every batch "holds" 100 ms
    report = await retention_pass(
        conn,
        now=clock() + 10 * DAY,
        retention_days=1,
        runs_dir=tmp_path,
        time_budget=1.0,
        timer=lambda: next(ticks),
    )
    assert not report.done  # stopped by the budget with rows left
    assert 0 < report.dispatches < 1500
    sizes = report.dispatches
    assert sizes < 50 + 13 + 10 * 8  # batches shrank from 50 toward the minimum
    left = await _count(conn, "dispatch_outbox")
    assert left == 1500 - report.dispatches


async def test_setting_is_validated() -> None:
    import pytest

    from studio_scheduler_core import InvalidSettings

    for bad in (-1, float("nan"), True, "30"):
        with pytest.raises(InvalidSettings) as info:
            SchedulerSettings(retention_days=bad)  # type: ignore[arg-type]
        assert info.value.field == "retention_days"


async def usage(conn: Any, invocation_id: str, clock: Any) -> None:
    from studio_scheduler_core import report_usage

    await report_usage(conn, invocation_id=invocation_id, cost_usd=0.1, clock=clock)


async def _child_running(conn: Any, schedule_id: str) -> bool:
    rows = await fetch_all(
        conn,
        "SELECT status FROM schedule_runs WHERE schedule_id = ? AND chain_depth = 1",
        (schedule_id,),
    )
    return bool(rows) and rows[0]["status"] == "running"


async def _all_ended(conn: Any, schedule_id: str) -> bool:
    rows = await fetch_all(
        conn, "SELECT status FROM schedule_runs WHERE schedule_id = ?", (schedule_id,)
    )
    return len(rows) == 2 and all(r["status"] == "completed" for r in rows)


async def _ended(conn: Any, schedule_id: str) -> bool:
    rows = await fetch_all(
        conn, "SELECT status FROM schedule_runs WHERE schedule_id = ?", (schedule_id,)
    )
    return bool(rows) and rows[0]["status"] == "completed"

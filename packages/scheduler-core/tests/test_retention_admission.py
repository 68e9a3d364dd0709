"""Retention does not re-arm a finished schedule: the ``max_runs`` counts and the budget spend
keep what a retention pass deleted (migration 20's carried totals), so a schedule that reached
its limit stays refused — by its gates, by an enable — once its history is gone, exactly as
before, and raising the limit grants exactly the difference. Health agrees with the gates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio_scheduler_core import (
    FireRefused,
    ScheduleValidationError,
    ensure_schema,
    read_schedule_health,
)
from studio_scheduler_core._admission.store import (
    admitted_run_count,
    fired_run_count,
    schedule_spend,
)
from studio_scheduler_core._recovery.retention import retention_pass
from studio_scheduler_core._schema import MIGRATIONS, PACKAGE
from studio_state import connect, fetch_one, fetch_value, migrate
from studio_state import ensure_schema as ensure_state_schema

DAY = 86_400.0


async def _prune(engine: Any, clock: Any, tmp_path: Path, archive: bool) -> int:
    """A retention pass with a 2-day window at the manual clock's time; the runs it deleted."""
    report = await retention_pass(
        engine.conn,
        now=clock(),
        retention_days=2,
        runs_dir=tmp_path / "runs",
        archive_dir=tmp_path / "archive" if archive else None,
    )
    assert report.done and report.archive_error is None
    return report.runs


async def _refused(engine: Any, schedule_id: str) -> tuple[str, str]:
    """What refuses the schedule now: (the enable's field, the manual fire's reason code)."""
    with pytest.raises(ScheduleValidationError) as enabling:
        await engine.service.enable(schedule_id)
    with pytest.raises(FireRefused) as firing:
        await engine.fire_now(schedule_id)
    return enabling.value.field, firing.value.reason_code


async def _health(engine: Any, clock: Any, schedule_id: str) -> Any:
    return (await read_schedule_health(engine.conn, [schedule_id], now=clock()))[schedule_id]


@pytest.mark.parametrize("archive", [False, True], ids=["plain", "archived"])
async def test_max_runs_stays_reached_when_retention_deletes_the_runs(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path, archive: bool
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    made = await engine.service.create(
        h.command_schedule(
            ok, max_runs=3, on_success={"command_args": [ok, "child"], "on_success": None}
        )
    )
    await h.fire_due(engine, clock, made.next_fire_at)
    await h.fire_due(engine, clock, made.next_fire_at + 60)
    clock.advance(3 * DAY)  # the two fires above are older than the window, the third is not
    await engine.fire_now(made.id)
    await engine.wait_idle()
    runs = await h.runs_of(engine.conn, made.id)
    assert [(r.chain_depth, r.status) for r in runs] == [
        (0, "completed"),
        (1, "completed"),
    ] * 3
    row = await h.schedule_row(engine.conn, made.id)
    assert (row.enabled, row.disabled_reason) == (False, "schedule.disabled.max_runs")
    before = await _refused(engine, made.id)
    assert before == ("max_runs", "schedule.disabled.max_runs")
    assert (await _health(engine, clock, made.id)).remaining_runs == 0

    assert await _prune(engine, clock, tmp_path, archive) == 4  # two fires, their follow-ups
    assert len(await h.runs_of(engine.conn, made.id)) == 2  # the third fire and its follow-up
    assert await _refused(engine, made.id) == before
    assert await fired_run_count(engine.conn, made.id) == 3
    assert await admitted_run_count(engine.conn, made.id) == 3
    await h.fire_due(engine, clock, clock() + 3600)  # disabled: no tick fires it either
    assert len(await h.runs_of(engine.conn, made.id)) == 2
    assert (await _health(engine, clock, made.id)).remaining_runs == 0

    # the whole history goes: still three fired, and a limit of 4 grants exactly one more
    clock.advance(3 * DAY)
    assert await _prune(engine, clock, tmp_path, archive) == 2
    assert await h.runs_of(engine.conn, made.id) == []
    assert await fired_run_count(engine.conn, made.id) == 3
    assert await _refused(engine, made.id) == before
    await engine.service.update(made.id, {"max_runs": 4, "enabled": True})
    assert (await _health(engine, clock, made.id)).remaining_runs == 1
    await h.fire_due(engine, clock, (await engine.service.get(made.id)).next_fire_at)
    assert [r.chain_depth for r in await h.runs_of(engine.conn, made.id)] == [0, 1]
    row = await h.schedule_row(engine.conn, made.id)
    assert (row.enabled, row.disabled_reason) == (False, "schedule.disabled.max_runs")
    assert await fired_run_count(engine.conn, made.id) == 4
    assert (await _health(engine, clock, made.id)).remaining_runs == 0


@pytest.mark.parametrize("archive", [False, True], ids=["plain", "archived"])
async def test_a_spent_budget_stays_spent_when_retention_deletes_the_runs(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path, archive: bool
) -> None:
    engine = await make_engine(clock=clock)
    made = await engine.service.create(
        {
            "name": "spender",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_model": "m",
            # each run's child reports 30 + 20 tokens and $0.625 (exact in binary)
            "action_prompt": "go usage=completed:30:20:0.625",
            "budget_usd": 1.0,
        }
    )
    due = made.next_fire_at
    for i in range(3):  # $0.625, $1.25, then the budget gate disables
        await h.fire_due(engine, clock, due + 60 * i)
    reasons = [r[1] for r in await h.run_reasons(engine.conn, made.id)]
    assert reasons[-1] == "schedule.budget.exhausted" and len(reasons) == 3
    assert await schedule_spend(engine.conn, made.id) == (1.25, 100)
    before = await _refused(engine, made.id)
    assert before == ("budget_usd", "schedule.budget.exhausted")
    health = await _health(engine, clock, made.id)
    assert (health.spend_usd, health.spend_tokens) == (1.25, 100)

    clock.advance(3 * DAY)
    assert await _prune(engine, clock, tmp_path, archive) == 3  # two runs and the skip
    assert await h.runs_of(engine.conn, made.id) == []
    assert await fetch_value(engine.conn, "SELECT count(*) FROM sessions") == 0
    assert await _refused(engine, made.id) == before
    assert await schedule_spend(engine.conn, made.id) == (1.25, 100)
    health = await _health(engine, clock, made.id)
    assert (health.spend_usd, health.spend_tokens) == (1.25, 100)

    # a budget of $1.50 leaves room for one more run, then the gate disables again; a token
    # budget under what was spent refuses the enable
    await engine.service.update(made.id, {"budget_usd": 1.5, "enabled": True})
    due = (await engine.service.get(made.id)).next_fire_at
    await h.fire_due(engine, clock, due)
    await h.fire_due(engine, clock, due + 60)
    reasons = [r[1] for r in await h.run_reasons(engine.conn, made.id)]
    assert reasons == ["run.completed.ok", "schedule.budget.exhausted"]
    assert await schedule_spend(engine.conn, made.id) == (1.875, 150)
    with pytest.raises(ScheduleValidationError) as info:
        await engine.service.update(
            made.id, {"budget_usd": 10.0, "budget_tokens": 150, "enabled": True}
        )
    assert info.value.field == "budget_tokens"


async def test_any_node_workers_max_runs_holds_through_retention(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    """``scheduled_on_any_node``: fires are queued for workers, the gate counts admitted runs
    (queued, running, ended) plus what retention deleted."""
    engine = await make_engine(clock=clock, scheduled_on_any_node=True)
    ok = h.script("ok.py", "pass\n")
    made = await engine.service.create(h.command_schedule(ok, overlap_policy="allow", max_runs=3))

    async def ended(count: int) -> None:
        async def done() -> bool:
            await engine.tick_once()
            rows = await h.runs_at_depth(engine.conn, made.id, 0)
            return sum(r.status == "completed" for r in rows) >= count

        await h.eventually(done, timeout=20)

    for i in range(2):
        clock.set(made.next_fire_at + 60 * i)
        await engine.tick_once()
        await ended(i + 1)
    clock.advance(3 * DAY)
    assert await _prune(engine, clock, tmp_path, archive=False) == 2
    assert await admitted_run_count(engine.conn, made.id) == 2
    assert (await h.schedule_row(engine.conn, made.id)).enabled is True  # one run left
    due = (await engine.service.get(made.id)).next_fire_at
    clock.set(max(due, clock()))
    await engine.tick_once()
    await ended(1)
    for _ in range(3):  # the limit is reached: no more fires
        clock.advance(60)
        await engine.tick_once()
    await engine.wait_idle()
    fired = [r.status for r in await h.runs_at_depth(engine.conn, made.id, 0)]
    assert [s for s in fired if s != "skipped"] == ["completed"]
    row = await h.schedule_row(engine.conn, made.id)
    assert (row.enabled, row.disabled_reason) == (False, "schedule.disabled.max_runs")
    assert await admitted_run_count(engine.conn, made.id) == 3


async def test_migration_20_gives_every_health_row_zero_carried_totals(db_target: str) -> None:
    async with connect(db_target) as conn:
        await ensure_state_schema(conn)
        await migrate(conn, PACKAGE, MIGRATIONS[:19])
        await conn.execute(
            "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
            "action_command, max_runs, created_at, updated_at) "
            "VALUES ('s1', 'one', 'interval', 60, 'command', 'true', 2, 0, 0)"
        )
        await conn.commit()
        await ensure_schema(conn)  # migration 20
        row = await fetch_one(
            conn,
            "SELECT pruned_runs, pruned_cost_usd, pruned_tokens FROM schedule_health "
            "WHERE schedule_id = 's1'",
        )
        assert row is not None and tuple(row.values()) == (0, 0.0, 0)
        assert await fired_run_count(conn, "s1") == 0
        assert await schedule_spend(conn, "s1") == (0.0, 0)
        assert await fired_run_count(conn, "no-such-schedule") == 0

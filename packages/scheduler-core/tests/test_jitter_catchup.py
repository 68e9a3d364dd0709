"""Jitter and the catch-up window through the engine, with an injected clock."""

from __future__ import annotations

from studio_scheduler_core import ScheduleService, ensure_schema
from studio_scheduler_core._schedules.jitter import jitter_delay
from studio_state import connect


async def test_a_jittered_occurrence_starts_at_its_delay_not_before(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(h.command_schedule(ok, interval_sec=60, jitter_sec=50))
    due = float(created.next_fire_at)
    delay = jitter_delay(created.to_row(), due, timezone="UTC")
    assert 0 < delay < 50
    [preview] = await engine.service.preview(created.id, 1)
    assert preview["at"] == due and preview["jitter_sec"] == delay
    clock.set(due)
    await engine.tick_once()
    clock.set(due + delay - 0.01)
    await engine.tick_once()
    assert await h.runs_of(engine.conn, created.id) == []
    clock.set(due + delay)
    await engine.tick_once()
    await engine.wait_idle()
    runs = await h.runs_of(engine.conn, created.id)
    assert [r.status for r in runs] == ["completed"]
    assert runs[0].trigger_context["due_at"] == due
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == due + 60  # the cadence itself is not jittered


async def test_cron_jitter_is_clamped_before_the_next_occurrence(service) -> None:
    created = await service.create(
        {
            "name": "every-minute",
            "trigger_type": "cron",
            "cron_expr": "* * * * *",
            "action_kind": "command",
            "action_command": "true",
            "jitter_sec": 3600,
        }
    )
    times = await service.preview(created.id, 50)
    assert all(0 <= t["jitter_sec"] < 60 for t in times)
    assert max(t["jitter_sec"] for t in times) > 30  # spread over the whole gap


async def _missed(db_target, settings, clock, h, **fields):
    async with connect(db_target) as conn:
        await ensure_schema(conn)
        svc = ScheduleService(conn, settings=settings, clock=clock)
        ok = h.script("ok.py", "pass\n")
        return await svc.create(h.command_schedule(ok, missed_fire_policy="run_once", **fields))


async def test_a_missed_occurrence_older_than_the_catchup_window_is_skipped(
    db_target, settings, clock, make_engine, h
) -> None:
    old = await _missed(db_target, settings, clock, h, name="old", catchup_window_sec=300)
    fresh = await _missed(db_target, settings, clock, h, name="fresh", catchup_window_sec=3000)
    clock.advance(60 + 1000)  # both fell due 1000 s ago
    engine = await make_engine(clock=clock)
    await engine.wait_idle()
    [skipped] = await h.runs_of(engine.conn, old.id)
    assert skipped.status == "skipped"
    assert skipped.status_reason_code == "schedule.skipped.missed_fire"
    assert "catch-up window" in skipped.status_reason_summary
    [ran] = await h.runs_of(engine.conn, fresh.id)
    assert ran.status == "completed"
    assert ran.trigger_context["missed_recovery"] is True

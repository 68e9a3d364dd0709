"""Backfill through the engine (injected clock): a window over a DST change, the bounds."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from studio_scheduler_core import FireRefused, ScheduleValidationError
from studio_state import fetch_all

BERLIN = ZoneInfo("Europe/Berlin")


def _hourly(h, ok: str) -> dict:
    return h.command_schedule(
        ok,
        trigger_type="cron",
        interval_sec=None,
        cron_expr="0 * * * *",
        timezone="Europe/Berlin",
    )


async def test_a_backfill_over_the_spring_forward_day_runs_each_hour_once(
    make_engine, clock, h
) -> None:
    clock.set(datetime(2024, 4, 2, 12, tzinfo=BERLIN).timestamp())
    engine = await make_engine(clock=clock)
    created = await engine.service.create(_hourly(h, h.script("ok.py", "pass\n")))
    # 31 March 2024 in Berlin has 23 hours (02:00 does not exist)
    queued = await engine.service.backfill(created.id, "2024-03-31T00:00:00", "2024-04-01T00:00:00")
    assert queued == 23
    for _ in range(30):
        await engine.tick_once()
        await engine.wait_idle()
    runs = await fetch_all(
        engine.conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? ORDER BY created_at, rowid",
        (created.id,),
    )
    assert [r["status"] for r in runs] == ["completed"] * 23
    contexts = [json.loads(r["trigger_context"]) for r in runs]
    assert all(c["backfill"] is True for c in contexts)
    hours = [datetime.fromtimestamp(c["due_at"], BERLIN).hour for c in contexts]
    assert hours == [0, 1, *range(3, 24)]
    steps = await h.transitions_of(engine.conn, runs[0]["id"])
    assert [s.reason_code for s in steps][:2] == [
        "schedule.backfill.queued",
        "schedule.fired.backfill",
    ]
    # each backfilled occurrence counts as a fire when it starts (what health and
    # remaining_runs read), once
    fires = await fetch_all(
        engine.conn,
        "SELECT h.fires AS health, (SELECT sum(c.fires) FROM schedule_counters c "
        "WHERE c.schedule_id = h.schedule_id) AS days FROM schedule_health h "
        "WHERE h.schedule_id = ?",
        (created.id,),
    )
    assert [(r["health"], r["days"]) for r in fires] == [(23, 23)]
    # the same window again: every occurrence already ran
    assert await engine.service.backfill(created.id, "2024-03-31T00:00", "2024-04-01") == 0


async def test_backfill_bounds_are_refused_naming_the_field(make_engine, clock, h) -> None:
    clock.set(datetime(2024, 4, 2, 12, tzinfo=BERLIN).timestamp())
    engine = await make_engine(clock=clock)
    created = await engine.service.create(_hourly(h, h.script("ok.py", "pass\n")))
    sid = created.id
    cases = [
        (("2024-04-01", "2024-03-31"), "start"),
        (("2024-04-01", "2024-04-01"), "start"),
        (("2024-04-01", "2024-04-03"), "end"),  # in the future
        (("2024-01-01", "2024-03-31"), "end"),  # more than 1000 hourly occurrences
        (("yesterday", "2024-03-31"), "start"),
    ]
    for (start, end), field in cases:
        with pytest.raises(ScheduleValidationError) as info:
            await engine.service.backfill(sid, start, end)
        assert info.value.field == field
    await engine.service.disable(sid)
    with pytest.raises(FireRefused) as refused:
        await engine.service.backfill(sid, "2024-03-31", "2024-04-01")
    assert refused.value.reason_code == "schedule.backfill.disabled"
    assert await h.runs_of(engine.conn, sid) == []

"""Time through the engine with an injected clock: DST nights and interval drift."""

from __future__ import annotations

import random
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest


@pytest.mark.parametrize(
    ("tz", "start", "end", "expr", "local_hm"),
    [
        # fall back: 01:30 happens twice in New York, fires once (the first, EDT)
        ("America/New_York", (2024, 11, 2, 12), (2024, 11, 3, 6), "30 1 * * *", (1, 30)),
        # spring forward: 02:30 does not exist in Berlin, fires once at 03:00
        ("Europe/Berlin", (2024, 3, 30, 12), (2024, 3, 31, 6), "30 2 * * *", (3, 0)),
        # fall back in Berlin: 02:30 twice, fires once
        ("Europe/Berlin", (2024, 10, 26, 12), (2024, 10, 27, 6), "30 2 * * *", (2, 30)),
    ],
)
async def test_engine_fires_once_across_a_dst_night(
    make_engine, clock, h, tz, start, end, expr, local_hm
) -> None:
    zone = ZoneInfo(tz)
    clock.set(datetime(*start, tzinfo=zone).timestamp())
    engine = await make_engine(clock=clock, timezone=tz)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, trigger_type="cron", interval_sec=None, cron_expr=expr)
    )
    stop = datetime(*end, tzinfo=zone).timestamp()
    while clock() < stop:
        clock.advance(300)
        await engine.tick_once()
    await engine.wait_idle()
    runs = await h.runs_of(engine.conn, created.id)
    assert len(runs) == 1
    fired = runs[0].trigger_context["due_at"]
    local = datetime.fromtimestamp(fired, zone)
    assert (local.hour, local.minute) == local_hm
    assert local.fold == 0


async def test_interval_cadence_has_no_drift_over_many_fires(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(h.command_schedule(ok, interval_sec=60))
    base = created.next_fire_at
    rng = random.Random(3)
    for k in range(60):
        clock.set(base + 60 * k + rng.uniform(0, 20))  # every fire is late by up to 20 s
        await engine.tick_once()
        await engine.wait_idle()
        row = await h.schedule_row(engine.conn, created.id)
        assert row.next_fire_at == base + 60 * (k + 1)
    runs = await h.runs_of(engine.conn, created.id)
    assert len(runs) == 60
    assert [r.trigger_context["due_at"] for r in runs] == [base + 60 * k for k in range(60)]
    # a long stall coalesces: one fire, then the first slot after now
    clock.set(base + 60 * 60 + 1000)
    await engine.tick_once()
    await engine.wait_idle()
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == base + 60 * 77
    runs = await h.runs_of(engine.conn, created.id)
    # 61 fires, and the coalescing of the 16 slots passed over recorded once in the run list
    assert len([r for r in runs if r.status != "skipped"]) == 61
    assert [r.status_reason_code for r in runs if r.status == "skipped"] == [
        "schedule.skipped.coalesced"
    ]

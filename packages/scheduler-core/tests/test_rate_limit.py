"""The ``rate_limit`` gate (DESIGN §11.2): at most ``max_fires`` fires in any rolling window of
``window_sec``; refusals are ``schedule.deferred.rate_limit`` deferrals (recorded on the 1st,
11th, 21st …), and the occurrence stays due until the window has room."""

from __future__ import annotations

from typing import Any

import pytest

from studio_scheduler_core import ScheduleValidationError


async def _deferral_counts(h: Any, conn: Any, schedule_id: str) -> list[int]:
    """The deferral count each recorded rate-limit deferral carries (on its run's transition)."""
    out = []
    for run in await h.runs_of(conn, schedule_id):
        if run.status_reason_code != "schedule.deferred.rate_limit":
            continue
        (transition,) = await h.transitions_of(conn, run.id)
        out.append(transition.metadata["deferral_count"])
    return out


async def test_rate_limit_defers_past_max_fires_in_the_window(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, interval_sec=10, rate_limit={"max_fires": 2, "window_sec": 60})
    )
    due = float(created.next_fire_at)
    await h.fire_due(engine, clock, due)  # fire 1 at due
    await h.fire_due(engine, clock, due + 10)  # fire 2 at due + 10
    for i in range(25):  # due + 20 … due + 44: the window (since due - 60 + t) holds 2
        await h.fire_due(engine, clock, due + 20 + i)
    reasons = await h.run_reasons(engine.conn, created.id)
    fired = [r for r in reasons if r[0] == "completed"]
    deferred = [r for r in reasons if r[1] == "schedule.deferred.rate_limit"]
    assert len(fired) == 2
    assert deferred == [("skipped", "schedule.deferred.rate_limit")] * 3
    assert await _deferral_counts(h, engine.conn, created.id) == [1, 11, 21]
    # Deferred, not skipped: the occurrence is still due at due + 20.
    row = await h.schedule_row(engine.conn, created.id)
    assert row.next_fire_at == due + 20
    # The first fire leaves the window at due + 60: the held occurrence fires then.
    await h.fire_due(engine, clock, due + 59)
    assert (
        len([r for r in await h.run_reasons(engine.conn, created.id) if r[0] == "completed"]) == 2
    )
    await h.fire_due(engine, clock, due + 60.5)
    assert (
        len([r for r in await h.run_reasons(engine.conn, created.id) if r[0] == "completed"]) == 3
    )


async def test_a_new_engine_counts_the_fires_already_in_the_window(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = h.script("ok.py", "pass\n")
    created = await engine.service.create(
        h.command_schedule(ok, interval_sec=10, rate_limit={"max_fires": 1, "window_sec": 3600})
    )
    due = float(created.next_fire_at)
    await h.fire_due(engine, clock, due)
    await engine.stop()
    successor = await make_engine(clock=clock)
    await h.fire_due(successor, clock, due + 10)
    assert [r[1] for r in await h.run_reasons(successor.conn, created.id)] == [
        "run.completed.ok",
        "schedule.deferred.rate_limit",
    ]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"max_fires": 0, "window_sec": 60}, "rate_limit.max_fires"),
        ({"max_fires": 1}, "rate_limit.window_sec"),
        ({"max_fires": 1, "window_sec": "soon"}, "rate_limit.window_sec"),
        ({"max_fires": 1, "window_sec": 60, "burst": 2}, "rate_limit.burst"),
        ([1, 60], "rate_limit"),
    ],
)
async def test_bad_rate_limit_is_refused_naming_the_key(
    service: Any, h: Any, value: Any, field: str
) -> None:
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(h.command_schedule(h.env_dump, rate_limit=value))
    assert caught.value.field == field


async def test_durations_are_accepted_wherever_seconds_are(service: Any, h: Any) -> None:
    created = await service.create(
        h.command_schedule(
            h.env_dump,
            interval_sec="15m",
            timeout_sec="2h",
            jitter_sec="90s",
            rate_limit={"max_fires": 3, "window_sec": "1d"},
            retry={"max_attempts": 2, "backoff_sec": "30s", "max_backoff_sec": "1h"},
        )
    )
    assert (created.interval_sec, created.timeout_sec, created.jitter_sec) == (900, 7200, 90)
    assert created.rate_limit == {"max_fires": 3, "window_sec": 86400}
    assert created.retry is not None and created.retry["backoff_sec"] == 30
    with pytest.raises(ScheduleValidationError) as caught:
        await service.create(h.command_schedule(h.env_dump, interval_sec="15 minutes"))
    assert caught.value.field == "interval_sec"

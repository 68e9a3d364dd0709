"""Per-schedule ``timezone`` and ``timeout_sec``: validation, cron in the schedule's zone (DST
rules in a zone that is not the server's), the deadline override, and migration 5."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from studio_scheduler_core import ScheduleValidationError
from studio_state import fetch_one


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _cron(**fields: Any) -> dict[str, Any]:
    return {
        "name": fields.pop("name", "zoned"),
        "trigger_type": "cron",
        "cron_expr": "30 2 * * *",
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": ["-c", "pass"],
        **fields,
    }


async def test_unknown_zone_and_zero_timeout_are_refused_naming_the_field(
    make_engine: Any, clock: Any
) -> None:
    engine = await make_engine(clock=clock, timezone="UTC", command_allowlist=("python3",))
    for bad in ("Mars/Olympus", "", "../etc/passwd", 5):
        with pytest.raises(ScheduleValidationError) as refused:
            await engine.service.create(_cron(timezone=bad))
        assert refused.value.field == "timezone"
    for bad_timeout in (0, -1, 7 * 86400 + 1, True, 1.5):
        with pytest.raises(ScheduleValidationError) as refused:
            await engine.service.create(_cron(timeout_sec=bad_timeout))
        assert refused.value.field == "timeout_sec"
    count = await fetch_one(engine.conn, "SELECT COUNT(*) AS n FROM schedules")
    assert count is not None and count["n"] == 0


async def test_cron_follows_the_schedules_zone_through_spring_forward_and_fall_back(
    make_engine: Any, clock: Any
) -> None:
    # the server runs in UTC; the schedule is in Berlin, whose 02:30 does not exist on
    # 2026-03-29 and happens twice on 2026-10-25
    clock.set(_utc("2026-03-28T12:00:00"))
    engine = await make_engine(clock=clock, timezone="UTC", command_allowlist=("python3",))
    created = await engine.service.create(_cron(timezone="Europe/Berlin"))
    assert created.timezone == "Europe/Berlin"
    assert created.next_fire_at == _utc("2026-03-29T01:00:00")  # 03:00 CEST, after the gap
    times = await engine.service.preview(created.id, 2)
    assert [t["at"] for t in times] == [_utc("2026-03-29T01:00:00"), _utc("2026-03-30T00:30:00")]
    assert times[0]["local"].startswith("2026-03-29T03:00:00+02:00")

    clock.set(_utc("2026-10-24T12:00:00"))
    updated = await engine.service.update(created.id, {"cron_expr": "30 2 * * *  "})
    await engine.service.update(created.id, {"timezone": "Europe/Berlin"})
    times = await engine.service.preview(updated.id, 3)
    assert [t["at"] for t in times] == [
        _utc("2026-10-25T00:30:00"),  # 02:30 CEST, the first of the two; never 01:30 UTC too
        _utc("2026-10-26T01:30:00"),  # 02:30 CET
        _utc("2026-10-27T01:30:00"),
    ]
    # null = the server's zone again
    cleared = await engine.service.update(created.id, {"timezone": None})
    assert cleared.timezone is None
    assert cleared.next_fire_at == _utc("2026-10-25T02:30:00")


async def test_a_schedules_timeout_overrides_the_deadline_setting(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(invocation_deadline_seconds=3600)
    slow = h.script("slow.py", "import time\ntime.sleep(30)\n")
    created = await engine.service.create(h.command_schedule(slow, timeout_sec=1))
    run_id = await engine.fire_now(created.id)
    await engine.wait_idle()
    run = await fetch_one(engine.conn, "SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
    assert run is not None
    assert (run["status"], run["status_reason_code"]) == ("timed_out", "run.timed_out.deadline")
    assert run["ended_at"] - run["fired_at"] < 15

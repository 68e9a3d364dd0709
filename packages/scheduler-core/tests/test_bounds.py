"""Every number a schedule takes is bounded, and a huge stored value never breaks a preview."""

from __future__ import annotations

from typing import Any

import pytest

from studio_scheduler_core import ScheduleValidationError, preview_fire_times
from studio_state import fetch_value

HUGE = 99999999999999999
ENORMOUS = 10**5000  # past Python's int-to-str digit limit


def _interval(h: Any, tmp_path: Any, **fields: Any) -> dict[str, Any]:
    return h.command_schedule(h.env_dump, str(tmp_path / "out"), **fields)


def _github(h: Any, tmp_path: Any, **fields: Any) -> dict[str, Any]:
    data = _interval(h, tmp_path, trigger_type="github_poll", github_repo="o/r", **fields)
    del data["interval_sec"]
    return data


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("interval_sec", 366 * 86400 + 1),
        ("interval_sec", HUGE),
        ("interval_sec", ENORMOUS),
        ("max_runs", 2**31),
        ("max_runs", 99999999999999999999999),
        ("budget_tokens", 2**31),
        ("budget_usd", 1e9 * 1.0001),
        ("budget_usd", float("inf")),
        ("budget_usd", float("nan")),
        ("budget_usd", ENORMOUS),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
async def test_an_out_of_range_number_is_refused_naming_the_field(
    service, conn, h, tmp_path, field: str, value: Any
) -> None:
    with pytest.raises(ScheduleValidationError) as refused:
        await service.create(_interval(h, tmp_path, **{field: value}))
    assert refused.value.field == field
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedules") == 0


@pytest.mark.parametrize("value", [86400 + 1, HUGE])
async def test_an_out_of_range_poll_interval_is_refused(service, conn, h, tmp_path, value) -> None:
    with pytest.raises(ScheduleValidationError) as refused:
        await service.create(_github(h, tmp_path, poll_interval_sec=value))
    assert refused.value.field == "poll_interval_sec"
    assert await fetch_value(conn, "SELECT COUNT(*) FROM schedules") == 0


async def test_a_threshold_with_huge_numbers_is_refused(service, h, tmp_path) -> None:
    config = {"metric": "failed_runs", "op": "gt", "value": ENORMOUS, "window_minutes": 5}
    with pytest.raises(ScheduleValidationError) as refused:
        await service.create(_interval(h, tmp_path, threshold_config=config))
    assert refused.value.field == "threshold_config.value"
    config = {"metric": "failed_runs", "op": "gt", "value": 1, "window_minutes": HUGE}
    with pytest.raises(ScheduleValidationError) as refused:
        await service.create(_interval(h, tmp_path, threshold_config=config))
    assert refused.value.field == "threshold_config.window_minutes"


async def test_the_bounds_themselves_are_accepted(service, h, tmp_path) -> None:
    created = await service.create(
        _interval(
            h,
            tmp_path,
            interval_sec=366 * 86400,
            max_runs=2**31 - 1,
            budget_tokens=2**31 - 1,
            budget_usd=1e9,
        )
    )
    assert created.interval_sec == 366 * 86400
    polled = await service.create(_github(h, tmp_path, name="poll", poll_interval_sec=86400))
    assert polled.poll_interval_sec == 86400


async def test_an_update_is_bounded_too(service, h, tmp_path) -> None:
    created = await service.create(_interval(h, tmp_path))
    with pytest.raises(ScheduleValidationError) as refused:
        await service.update(created.id, {"interval_sec": HUGE})
    assert refused.value.field == "interval_sec"


async def test_a_huge_stored_interval_never_makes_preview_raise(service, conn, h, tmp_path) -> None:
    """A row written before the bounds (or by hand) with a huge interval and next fire time."""
    created = await service.create(_interval(h, tmp_path))
    await conn.execute(
        "UPDATE schedules SET interval_sec = ?, next_fire_at = ? WHERE id = ?",
        (HUGE, 1.0e17, created.id),
    )
    await conn.commit()
    assert await service.preview(created.id) == []
    await conn.execute(
        "UPDATE schedules SET next_fire_at = ? WHERE id = ?", (h.T0 + 60, created.id)
    )
    await conn.commit()
    times = await service.preview(created.id)
    assert [t["at"] for t in times] == [h.T0 + 60]  # the next slot is past year 9999


def test_preview_fire_times_bounds_the_interval() -> None:
    with pytest.raises(ScheduleValidationError) as refused:
        preview_fire_times(trigger_type="interval", interval_sec=HUGE, start=0.0)
    assert refused.value.field == "interval_sec"

"""cron in a time zone with the DST rule, interval without drift, previews."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from studio_scheduler_core import Schedule
from studio_scheduler_core._triggers.cadence import advance, interval_next, preview_times
from studio_scheduler_core._triggers.cron import next_after


def _fires(expr: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    zone = ZoneInfo(tz)
    at, stop, out = start.timestamp() - 1, end.timestamp() - 1, []
    while True:
        at = next_after(expr, tz, at)
        if at >= stop:
            return out
        out.append(datetime.fromtimestamp(at, zone))


def _day(tz: str, y: int, m: int, d: int) -> tuple[datetime, datetime]:
    zone = ZoneInfo(tz)
    start = datetime(y, m, d, tzinfo=zone)
    following = date(y, m, d) + timedelta(days=1)
    end = datetime(following.year, following.month, following.day, tzinfo=zone)
    return start, end


# (zone, spring-forward day, fall-back day, a local time in the gap, an ambiguous local time)
ZONES = [
    ("Europe/Berlin", (2024, 3, 31), (2024, 10, 27), "30 2 * * *", "30 2 * * *"),
    ("America/New_York", (2024, 3, 10), (2024, 11, 3), "30 2 * * *", "30 1 * * *"),
]


@pytest.mark.parametrize(("tz", "spring", "fall", "gap_expr", "ambiguous_expr"), ZONES)
def test_nonexistent_local_time_fires_once_at_the_end_of_the_gap(
    tz, spring, fall, gap_expr, ambiguous_expr
) -> None:
    start, end = _day(tz, *spring)
    fires = _fires(gap_expr, tz, start, end)
    assert len(fires) == 1
    assert (fires[0].hour, fires[0].minute) == (3, 0)
    # the days around it fire at 02:30 as usual
    before = _fires(gap_expr, tz, start - timedelta(days=1), start)
    assert [(f.hour, f.minute) for f in before] == [(2, 30)]


@pytest.mark.parametrize(("tz", "spring", "fall", "gap_expr", "ambiguous_expr"), ZONES)
def test_ambiguous_local_time_fires_once_the_first_occurrence(
    tz, spring, fall, gap_expr, ambiguous_expr
) -> None:
    start, end = _day(tz, *fall)
    fires = _fires(ambiguous_expr, tz, start, end)
    assert len(fires) == 1
    assert fires[0].fold == 0
    # the first occurrence is still on summer time (the larger offset)
    assert fires[0].utcoffset() == datetime(fall[0], 7, 1, tzinfo=ZoneInfo(tz)).utcoffset()


@pytest.mark.parametrize(("tz", "spring", "fall", "gap_expr", "ambiguous_expr"), ZONES)
def test_half_hourly_on_transition_days_never_fires_an_instant_twice(
    tz, spring, fall, gap_expr, ambiguous_expr
) -> None:
    start, end = _day(tz, *spring)
    spring_fires = _fires("*/30 * * * *", tz, start, end)
    assert len(spring_fires) == 46  # 48 wall times, two inside the gap collapse onto 03:00
    assert len({f.timestamp() for f in spring_fires}) == 46
    start, end = _day(tz, *fall)
    fall_fires = _fires("*/30 * * * *", tz, start, end)
    assert len(fall_fires) == 48  # each wall time once: the repeated hour is not fired again
    stamps = [f.timestamp() for f in fall_fires]
    assert stamps == sorted(set(stamps))


def test_a_gap_full_of_slots_fires_once() -> None:
    start, end = _day("America/New_York", 2024, 3, 10)
    fires = _fires("*/15 2 * * *", "America/New_York", start, end)
    assert [(f.hour, f.minute) for f in fires] == [(3, 0)]


def test_cron_next_is_strictly_after_and_in_zone() -> None:
    t = datetime(2024, 6, 1, 8, 0, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp()
    nxt = next_after("0 9 * * *", "Asia/Tokyo", t)
    assert nxt - t == 3600
    assert next_after("0 9 * * *", "Asia/Tokyo", nxt) - nxt == 86400


def test_interval_never_drifts_over_many_late_fires() -> None:
    rng = random.Random(7)
    schedule = Schedule(
        id="s",
        name="every minute",
        trigger_type="interval",
        interval_sec=60,
        action_kind="command",
        created_at=0.0,
        updated_at=0.0,
    )
    due = 1_000_000.0
    for k in range(1, 5001):
        late = rng.uniform(0, 5)
        due = advance(schedule, due=due, now=due + late, timezone="UTC") or 0.0
        assert due == 1_000_000.0 + 60 * k
    # a stall of several intervals coalesces to the first slot strictly after now
    assert interval_next(0.0, 60, 185.0) == 240.0
    assert interval_next(0.0, 60, 180.0) == 240.0
    assert interval_next(100.0, 60, 50.0) == 160.0


def test_preview_times_interval_and_cron() -> None:
    times = preview_times(trigger_type="interval", interval_sec=10, start=100.0, n=3)
    assert [t["at"] for t in times] == [110.0, 120.0, 130.0]
    cron = preview_times(trigger_type="cron", cron_expr="0 0 * * *", timezone="UTC", start=0.0, n=2)
    assert [t["utc"] for t in cron] == ["1970-01-02T00:00:00Z", "1970-01-03T00:00:00Z"]

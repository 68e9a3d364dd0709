"""Every schedule's health verdict, read from counters kept as runs end (never a scan of runs).

A verdict is one of :data:`HEALTH_VERDICTS`:

- ``disabled``: the schedule is not enabled;
- ``never_fired``: enabled, and no run of it ever ended (nor fired);
- ``failing``: its last top-level run ended ``failed`` or ``timed_out``;
- ``overdue``: no fire (interval, cron), poll (github) or check (threshold) for
  ``max(3 × cadence, cadence + 300 s)``, where the cadence is the interval, the cron's typical
  gap, the poll interval or the check interval;
- ``healthy``: otherwise.

``failing`` wins over ``overdue`` (the last result says more than the silence).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Final, Literal, get_args

import aiosqlite

from studio_state import backend_of, run_sync

from .._records.counters import DURATION_BOUNDS, FAILED_STATUSES
from .._records.store import (
    HISTOGRAM,
    WEEK_COLUMNS,
    crons_sync,
    read_health_inputs,
    read_week_sums,
    rows_of,
    verdicts_statement,
)
from .._records.vocab import DAY_SECONDS
from .._triggers.cron import next_after

HealthVerdict = Literal["disabled", "never_fired", "healthy", "failing", "overdue"]
HEALTH_VERDICTS: Final[tuple[str, ...]] = get_args(HealthVerdict)
"""Every verdict, in the order views list them."""

OVERDUE_GRACE_SECONDS: Final = 300.0
"""The least silence past one cadence that counts as overdue (``cadence + 300 s``)."""


@dataclass(frozen=True)
class ScheduleHealth:
    """A schedule's verdict (``health``) and the figures behind it.

    ``last_status``/``last_run_at``/``last_run_id`` are its last top-level run that ended;
    ``success_rate_7d`` is completed ÷ ended over the last 7 days (``None``: none ended);
    ``duration_p50_7d``/``duration_p95_7d`` are whole seconds read from a fixed histogram
    (the upper bound of the bucket the percentile falls in); ``remaining_runs`` is
    ``max_runs`` less its fires (``None``: no limit); spend sums the usage its runs reported,
    ``spend_partial`` is true when some ended run reported none.
    """

    health: str
    consecutive_failures: int
    last_status: str | None
    last_run_at: float | None
    next_fire_at: float | None
    success_rate_7d: float | None
    duration_p50_7d: int | None
    duration_p95_7d: int | None
    remaining_runs: int | None
    spend_usd: float
    spend_tokens: int
    spend_partial: bool
    last_run_id: str | None = None

    def to_json(self) -> dict[str, object]:
        """The fields as a JSON-ready mapping (keys named as the API names them)."""
        return asdict(self)


async def read_schedule_health(
    conn: aiosqlite.Connection, schedule_ids: Sequence[str], *, now: float
) -> dict[str, ScheduleHealth]:
    """The health of each schedule in ``schedule_ids`` that exists, by id, at ``now``.

    Reads the schedule row and its health row, which holds the 7-day sums as of the last
    day one of its runs ended; only when that day is not today (the oldest day has to drop
    out) are its day counter rows summed (at most 7). The cost per schedule does not grow
    with its history.
    """
    out: dict[str, ScheduleHealth] = {}
    ids = list(dict.fromkeys(schedule_ids))
    since = _window_start(now)
    today = since + 6 * DAY_SECONDS
    for start in range(0, len(ids), _CHUNK):
        schedules, health = await read_health_inputs(conn, ids[start : start + _CHUNK])
        week: dict[str, Mapping[str, Any]] = {}
        stale = []
        for sid, row in health.items():
            day = row["week_day"]
            if day is not None and int(day) == today:
                week[sid] = {c: row[f"w_{c}"] for c in WEEK_COLUMNS}
            elif (day is None and row["ended"]) or (day is not None and int(day) >= since):
                stale.append(sid)  # its sums are of an earlier day: sum the day rows
        week.update(await read_week_sums(conn, stale, since))
        for schedule in schedules:
            sid = str(schedule["id"])
            out[sid] = _verdict(schedule, health.get(sid), week.get(sid), now)
    return out


_CHUNK = 500


def _window_start(now: float) -> int:
    """The first day counted in the 7-day figures: today (UTC) and the 6 days before."""
    return int(now // DAY_SECONDS * DAY_SECONDS) - 6 * DAY_SECONDS


def percentile(histogram: Sequence[int], q: float) -> int | None:
    """The ``q`` quantile of a duration histogram (the upper bound of its bucket, seconds)."""
    total = sum(histogram)
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for count, bound in zip(histogram, DURATION_BOUNDS, strict=True):
        seen += count
        if seen >= rank:
            return int(bound)
    return int(DURATION_BOUNDS[-1])


@lru_cache(maxsize=1024)
@lru_cache(maxsize=16_384)
def cron_gap(expr: str, tz_name: str) -> float:
    """A cron's typical gap: the median of its 9 gaps after a fixed Monday, in seconds
    (remembered: it depends on nothing else, and the verdict reads ask it of every distinct
    cron each time)."""
    at = 1_767_571_200.0  # 2026-01-05 00:00 UTC, a Monday
    instants = [next_after(expr, tz_name, at)]
    for _ in range(9):
        instants.append(next_after(expr, tz_name, instants[-1]))
    gaps = sorted(b - a for a, b in zip(instants, instants[1:], strict=False))
    return gaps[len(gaps) // 2]


def cadence_of(schedule: Mapping[str, Any]) -> float | None:
    """The seconds between a schedule's fires, polls or checks (``None``: no cadence)."""
    kind = schedule["trigger_type"]
    if kind == "interval" and schedule["interval_sec"]:
        return float(schedule["interval_sec"])
    if kind == "cron" and schedule["cron_expr"]:
        try:
            return cron_gap(str(schedule["cron_expr"]), str(schedule["timezone"] or "UTC"))
        except ValueError:
            return None
    if kind == "github_poll":
        return float(schedule["poll_interval_sec"] or 60)
    return None


def overdue_after(cadence: float) -> float:
    """The silence that makes a schedule overdue: ``max(3 × cadence, cadence + 300 s)``."""
    return max(3 * cadence, cadence + OVERDUE_GRACE_SECONDS)


def _last_sign_of_life(schedule: Mapping[str, Any], fired: float | None) -> float:
    stamps = [fired, schedule["last_fired_at"]]
    if schedule["trigger_type"] == "github_poll":
        stamps.append(schedule["last_healthy_poll_at"])
    if schedule["trigger_type"] == "github_poll" or schedule["has_threshold"]:
        stamps.append(schedule["last_evaluated_at"])
    known = [float(s) for s in stamps if s is not None]
    return max(known) if known else float(schedule["created_at"])


def _verdict(
    schedule: Mapping[str, Any],
    health: Mapping[str, Any] | None,
    week: Mapping[str, Any] | None,
    now: float,
) -> ScheduleHealth:
    h: Mapping[str, Any] = health or {}
    w: Mapping[str, Any] = week or {}
    fires = int(h.get("fires") or 0)
    last_status = h.get("last_status")
    completed = int(w.get("completed") or 0)
    ended = completed + int(w.get("failed") or 0) + int(w.get("timed_out") or 0)
    histogram = [int(w.get(c) or 0) for c in HISTOGRAM]
    max_runs = schedule["max_runs"]
    cadence = cadence_of(schedule)
    if not schedule["enabled"]:
        verdict = "disabled"
    elif fires == 0 and last_status is None and schedule["last_fired_at"] is None:
        verdict = "never_fired"
    elif last_status in FAILED_STATUSES:
        verdict = "failing"
    elif cadence is not None and now - _last_sign_of_life(
        schedule, h.get("last_fire_at")
    ) > overdue_after(cadence):
        verdict = "overdue"
    else:
        verdict = "healthy"
    return ScheduleHealth(
        health=verdict,
        consecutive_failures=int(h.get("consecutive_failures") or 0),
        last_status=last_status,
        last_run_at=h.get("last_run_at"),
        next_fire_at=schedule["next_fire_at"],
        success_rate_7d=completed / ended if ended else None,
        duration_p50_7d=percentile(histogram, 0.5),
        duration_p95_7d=percentile(histogram, 0.95),
        remaining_runs=None if max_runs is None else max(0, int(max_runs) - fires),
        spend_usd=float(h.get("spend_usd") or 0.0),
        spend_tokens=int(h.get("spend_tokens") or 0),
        spend_partial=int(h.get("spend_missing") or 0) > 0,
        last_run_id=h.get("last_run_id"),
    )


async def read_health_counts(conn: aiosqlite.Connection, *, now: float) -> dict[str, int]:
    """How many schedules have each verdict at ``now`` (every verdict, 0 included): one
    aggregated statement over the schedules and their health rows (after one listing the
    distinct crons, whose typical gap is computed here), never a verdict per schedule; in
    one trip to ``conn``'s thread."""
    return await run_sync(conn, lambda db: read_health_counts_sync(db, now=now))


def read_health_counts_sync(db: Any, *, now: float) -> dict[str, int]:
    """:func:`read_health_counts` on a synchronous connection (a metrics collector's:
    ``sqlite3`` or ``studio_state.connect_sync``, rows as tuples or mappings; or the handle
    ``studio_state.run_sync`` gives)."""
    gaps = _cron_gaps(crons_sync(db))
    sql, params = verdicts_statement(
        gaps,
        now,
        grace=OVERDUE_GRACE_SECONDS,
        failed=FAILED_STATUSES,
        postgres=backend_of(db) == "postgresql",
    )
    return _counts(rows_of(db, sql, params))


def _cron_gaps(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str, float | None]]:
    out: list[tuple[str, str, float | None]] = []
    for expr, zone in pairs:
        try:
            out.append((expr, zone, cron_gap(expr, zone)))
        except ValueError:
            out.append((expr, zone, None))
    return out


def _counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(HEALTH_VERDICTS, 0)
    for row in rows:
        counts[str(row["verdict"])] += int(row["n"])
    return counts

"""Activity and spend stats, read from counters kept as runs end (never a scan of runs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

import aiosqlite

from .._exceptions import InvalidStatsQuery
from .._records.counters import HOUR_SECONDS
from .._records.store import read_activity_rows, read_spend_rows

ACTIVITY_WINDOWS: Final[dict[str, tuple[int, int]]] = {"24h": (24, 3600), "7d": (168, 3600)}
"""Each window's bucket count and bucket width in seconds: ``24h`` is 24 hourly buckets,
``7d`` is 168 hourly buckets."""

SPEND_GROUPS: Final[tuple[str, ...]] = ("schedule", "action")
"""What spend is grouped by."""

SPEND_TOP: Final = 20
"""Spend lists this many rows; the rest are folded into one ``(other)`` row."""


@dataclass(frozen=True)
class ActivityBucket:
    """One bucket of activity: what fired and how runs ended from ``start`` on."""

    start: float
    fires: int
    completed: int
    failed: int
    timed_out: int
    cancelled: int


@dataclass(frozen=True)
class Activity:
    """The buckets of a window, oldest first, and its completion rate (completed ÷ ended,
    ``None`` when nothing ended)."""

    window: str
    bucket_seconds: int
    buckets: tuple[ActivityBucket, ...]
    completion_rate: float | None

    def to_json(self) -> dict[str, object]:
        """The activity as a JSON-ready mapping."""
        return asdict(self)


@dataclass(frozen=True)
class SpendRow:
    """The usage one schedule (or action target) reported: ``key`` is the schedule id or the
    action target (``(other)`` for the folded rest), ``label`` what to show (name)."""

    key: str
    label: str
    spend_usd: float
    spend_tokens: int
    runs: int
    spend_partial: bool


@dataclass(frozen=True)
class Spend:
    """Spend grouped ``by`` schedule or action target, largest first, with the totals."""

    by: str
    rows: tuple[SpendRow, ...]
    total_usd: float
    total_tokens: int
    spend_partial: bool

    def to_json(self) -> dict[str, object]:
        """The spend as a JSON-ready mapping."""
        return asdict(self)


def _spend_row(row: Sequence[Any]) -> SpendRow:
    key, label, usd, tokens, runs, missing = row
    return SpendRow(
        key=str(key),
        label=str(label),
        spend_usd=float(usd),
        spend_tokens=int(tokens),
        runs=int(runs),
        spend_partial=int(missing) > 0,
    )


async def read_activity(conn: aiosqlite.Connection, *, window: str, now: float) -> Activity:
    """Activity over ``window`` (``24h`` or ``7d``) up to ``now``.

    Raises :class:`InvalidStatsQuery` (``field="window"``) for another window. Reads at most
    one counter row per bucket, whatever the history.
    """
    if window not in ACTIVITY_WINDOWS:
        raise InvalidStatsQuery("window", f"must be one of {', '.join(ACTIVITY_WINDOWS)}")
    count, width = ACTIVITY_WINDOWS[window]
    last = int(now // HOUR_SECONDS * HOUR_SECONDS)
    first = last - (count - 1) * width
    rows = await read_activity_rows(conn, first, last)
    # positional construction of each bucket, the counts taken whole from its hour row: a
    # week is 168 buckets, built whether or not its hours have rows
    counts = {row[0]: row[1:] for row in rows}
    none = (0, 0, 0, 0, 0)
    buckets = [
        ActivityBucket(float(start), *counts.get(start, none))
        for start in range(first, last + 1, width)
    ]
    completed = sum(row[2] for row in rows)
    ended = completed + sum(row[3] + row[4] for row in rows)
    return Activity(
        window=window,
        bucket_seconds=width,
        buckets=tuple(buckets),
        completion_rate=completed / ended if ended else None,
    )


async def read_spend(conn: aiosqlite.Connection, *, by: str, now: float) -> Spend:
    """Spend ``by`` ``schedule`` or ``action``: the top :data:`SPEND_TOP`, the rest folded.

    Raises :class:`InvalidStatsQuery` (``field="by"``) for another grouping. The sums are
    every run's since counting began (kept as runs end; retention keeps them). Reads the top
    rows and one row of totals (by schedule, kept as the health rows change; by action, a
    sum over the few action targets), whatever the history. ``now`` is the reading's
    instant (kept for a windowed read; the totals do not depend on it).
    """
    del now
    if by not in SPEND_GROUPS:
        raise InvalidStatsQuery("by", f"must be one of {', '.join(SPEND_GROUPS)}")
    rows, (count, usd, tokens, runs, missing) = await read_spend_rows(conn, by, SPEND_TOP)
    top = [_spend_row(row) for row in rows]
    rest = int(count) - len(top)
    if rest > 0:
        top.append(
            SpendRow(
                key="(other)",
                label=f"{rest} more",
                spend_usd=max(0.0, float(usd) - sum(r.spend_usd for r in top)),
                spend_tokens=int(tokens) - sum(r.spend_tokens for r in top),
                runs=int(runs) - sum(r.runs for r in top),
                spend_partial=int(missing) > sum(int(row[5]) for row in rows),
            )
        )
    return Spend(
        by=by,
        rows=tuple(top),
        total_usd=float(usd),
        total_tokens=int(tokens),
        spend_partial=int(missing) > 0,
    )

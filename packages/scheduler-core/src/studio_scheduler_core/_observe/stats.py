"""Activity and spend stats, read from counters kept as runs end (never a scan of runs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final

import aiosqlite

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


async def read_activity(conn: aiosqlite.Connection, *, window: str, now: float) -> Activity:
    """Activity over ``window`` (``24h`` or ``7d``) up to ``now``.

    Raises :class:`InvalidStatsQuery` (``field="window"``) for another window.
    """
    raise NotImplementedError


async def read_spend(conn: aiosqlite.Connection, *, by: str, now: float) -> Spend:
    """Spend ``by`` ``schedule`` or ``action``: the top :data:`SPEND_TOP`, the rest folded.

    Raises :class:`InvalidStatsQuery` (``field="by"``) for another grouping.
    """
    raise NotImplementedError

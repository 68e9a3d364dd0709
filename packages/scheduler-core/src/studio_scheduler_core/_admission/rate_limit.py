"""The ``rate_limit`` gate: at most ``max_fires`` top-level fires in any rolling window of
``window_sec`` seconds.

The window's history is read from the schedule's runs the first time the gate meets a schedule
(so a new leader counts the fires its predecessor made) and kept in memory from then on: every
admitted fire is counted at once, before its run row commits, so fires admitted in the same
pass cannot overshoot. A refusal defers the occurrence (it stays due and is admitted as soon as
the oldest fire in the window ages out).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiosqlite

from .store import fire_times_since

RATE_LIMIT = "schedule.deferred.rate_limit"
"""The reason code of an occurrence the rate limit holds back."""


@dataclass
class _Window:
    window_sec: int
    times: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class RateVerdict:
    """The gate's answer: ``allowed``, else how many fires fill the window and when the
    oldest of them leaves it."""

    allowed: bool
    fires: int = 0
    retry_at: float | None = None


class RateWindows:
    """Per schedule, the fire times inside its rate-limit window (one leader's memory)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._windows: dict[str, _Window] = {}

    async def _window(self, schedule_id: str, window_sec: int, now: float) -> _Window:
        window = self._windows.get(schedule_id)
        if window is None or window.window_sec != window_sec:
            times = await fire_times_since(self._conn, schedule_id, now - window_sec)
            window = self._windows[schedule_id] = _Window(window_sec, times)
        # Fires at or before now - window_sec have left the window.
        del window.times[: bisect.bisect_right(window.times, now - window_sec)]
        return window

    async def check(
        self, schedule_id: str, rate_limit: Mapping[str, Any], *, now: float
    ) -> RateVerdict:
        """Whether one more fire fits the window now."""
        window_sec = int(rate_limit["window_sec"])
        window = await self._window(schedule_id, window_sec, now)
        if len(window.times) < int(rate_limit["max_fires"]):
            return RateVerdict(True, len(window.times))
        return RateVerdict(False, len(window.times), window.times[0] + window_sec)

    def record(self, schedule_id: str, now: float) -> None:
        """Count an admitted fire (of a schedule whose window is kept)."""
        window = self._windows.get(schedule_id)
        if window is not None:
            bisect.insort(window.times, now)

    def forget(self, schedule_id: str) -> None:
        """Drop a schedule's window (read again from its runs next time)."""
        self._windows.pop(schedule_id, None)

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

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Final, Literal, get_args

import aiosqlite

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

    Reads the schedule row, its health row and at most 8 daily counter rows per schedule:
    the cost per schedule does not grow with its history.
    """
    raise NotImplementedError

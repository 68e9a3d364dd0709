"""One schedule's status: its health, its last top-level run that ended and what runs now
(``GET /api/schedules/{id}/status``, ``studio schedule status``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final

import aiosqlite

from .._exceptions import ScheduleNotFound
from .health import ScheduleHealth, read_schedule_health
from .store import read_last_run_row, read_running_top_level, read_schedule_name

STDERR_LINES: Final = 10
"""How many of the last run's last stderr lines the status shows."""


@dataclass(frozen=True)
class LastRun:
    """A schedule's last top-level run that ended: how, when, how long (whole seconds),
    its error class and the last lines of its stderr."""

    id: str
    status: str
    reason_code: str | None
    reason_summary: str | None
    fired_at: float | None
    ended_at: float | None
    duration_seconds: int | None
    exit_code: int | None
    error_class: str | None
    stderr_tail: tuple[str, ...]


@dataclass(frozen=True)
class ScheduleStatus:
    """What ``status`` shows of one schedule: its ``health`` verdict and figures, its last
    run (``None``: none ended) and the top-level runs running now."""

    schedule_id: str
    name: str
    health: ScheduleHealth
    last_run: LastRun | None
    running_run_ids: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        """The status as a JSON-ready mapping: the health fields at top level (the verdict
        under ``health``), then ``last_run`` and ``running_run_ids``."""
        return {
            "schedule_id": self.schedule_id,
            "name": self.name,
            **self.health.to_json(),
            "last_run": None if self.last_run is None else asdict(self.last_run),
            "running_run_ids": list(self.running_run_ids),
        }


async def read_schedule_status(
    conn: aiosqlite.Connection, schedule_id: str, *, now: float
) -> ScheduleStatus:
    """The status of ``schedule_id`` at ``now``; :class:`ScheduleNotFound` when there is no
    such schedule. Reads a bounded number of rows whatever the schedule's history."""
    name = await read_schedule_name(conn, schedule_id)
    if name is None:
        raise ScheduleNotFound(schedule_id)
    health = (await read_schedule_health(conn, [schedule_id], now=now))[schedule_id]
    last = None
    if health.last_run_id is not None:
        last = await _last_run(conn, health.last_run_id)
    running = await read_running_top_level(conn, schedule_id)
    return ScheduleStatus(
        schedule_id=schedule_id,
        name=name,
        health=health,
        last_run=last,
        running_run_ids=tuple(running),
    )


async def _last_run(conn: aiosqlite.Connection, run_id: str) -> LastRun | None:
    row = await read_last_run_row(conn, run_id)
    if row is None:  # deleted by retention
        return None
    fired, ended = row["fired_at"], row["ended_at"]
    duration = None if fired is None or ended is None else round(float(ended) - float(fired))
    detail = str(row["error_detail"] or "")
    return LastRun(
        id=str(row["id"]),
        status=str(row["status"]),
        reason_code=row["status_reason_code"],
        reason_summary=row["status_reason_summary"],
        fired_at=fired,
        ended_at=ended,
        duration_seconds=duration,
        exit_code=row["exit_code"],
        error_class=row["error_class"],
        stderr_tail=tuple(detail.splitlines()[-STDERR_LINES:]),
    )

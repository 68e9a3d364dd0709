"""Health, status and stats models: ``/api/schedules/{id}/status``, ``/api/stats/*``, and the
health fields the schedule views carry. Derived from scheduler-core's records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from studio_scheduler_core import ActivityBucket, LastRun, ScheduleHealth, SpendRow

from .base import ResponseModel
from .derive import FieldView, of_dataclass, response_model

__all__ = [
    "HEALTH_VIEWS",
    "ActivityBucketOut",
    "ActivityOut",
    "LastRunOut",
    "ScheduleStatusOut",
    "SpendOut",
    "SpendRowOut",
]

HEALTH_VIEWS = [
    FieldView(v.name, v.annotation | None, None, False) for v in of_dataclass(ScheduleHealth)
]
"""The health fields as optional columns of a schedule view (present in list and one)."""

if TYPE_CHECKING:

    class ActivityBucketOut(ResponseModel): ...

    class SpendRowOut(ResponseModel): ...

    class LastRunOut(ResponseModel): ...

    class _HealthOut(ResponseModel): ...

else:
    ActivityBucketOut = response_model(
        "ActivityBucketOut", "One bucket of activity.", of_dataclass(ActivityBucket)
    )
    SpendRowOut = response_model(
        "SpendRowOut", "The spend of one schedule or action target.", of_dataclass(SpendRow)
    )
    LastRunOut = response_model(
        "LastRunOut", "A schedule's last top-level run that ended.", of_dataclass(LastRun)
    )
    _HealthOut = response_model(
        "ScheduleHealthOut",
        "A schedule's health verdict and figures.",
        of_dataclass(ScheduleHealth),
    )


class ActivityOut(ResponseModel):
    """``GET /api/stats/activity``: the window's buckets (oldest first) and completion rate."""

    window: str
    bucket_seconds: int
    buckets: list[ActivityBucketOut]
    completion_rate: float | None


class SpendOut(ResponseModel):
    """``GET /api/stats/spend``: the top 20 (the rest folded into ``(other)``) and totals."""

    by: str
    rows: list[SpendRowOut]
    total_usd: float
    total_tokens: int
    spend_partial: bool


class ScheduleStatusOut(_HealthOut):
    """``GET /api/schedules/{id}/status``: the verdict (``health``) and its figures, the
    last run that ended, and the top-level runs running now."""

    schedule_id: str
    name: str
    last_run: LastRunOut | None
    running_run_ids: list[str]

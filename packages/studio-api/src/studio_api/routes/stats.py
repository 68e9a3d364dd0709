"""``/api/stats``: activity and spend, read from counters kept as runs end."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from studio_scheduler_core import read_activity, read_spend

from .._deps import ReadsDep, responses
from .._models import ActivityOut, SpendOut

router = APIRouter(prefix="/api/stats", tags=["stats"])


@router.get("/activity", response_model=ActivityOut, responses=responses())
async def activity(
    reads: ReadsDep,
    window: Annotated[
        Literal["24h", "7d"], Query(description="24h: 24 hourly buckets; 7d: 168 hourly buckets")
    ] = "24h",
) -> ActivityOut:
    """Fires, completions, failures, timeouts and cancels per hour, and the completion rate
    (completed ÷ completed, failed and timed out)."""
    return ActivityOut.of_record(await read_activity(reads.conn, window=window, now=reads.clock()))


@router.get("/spend", response_model=SpendOut, responses=responses())
async def spend(
    reads: ReadsDep,
    by: Annotated[
        Literal["schedule", "action"], Query(description="Group by schedule or action target")
    ] = "schedule",
) -> SpendOut:
    """The usage runs reported, summed per schedule or action target: the top 20, the rest
    folded into one ``(other)`` row; ``spend_partial`` when some ended run reported none."""
    return SpendOut.of_record(await read_spend(reads.conn, by=by, now=reads.clock()))

"""Jitter: each occurrence starts after a delay in [0, jitter_sec), the same delay every time
it is computed (a hash of the schedule id and the due time), and always before the next
occurrence is due.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from .._triggers.cadence import PreviewEntry, schedule_zone
from .._triggers.cron import CronError, next_after


class JitteredEntry(PreviewEntry):
    """A previewed fire time with ``jitter_sec``: the delay that occurrence will wait."""

    jitter_sec: float


def _next_occurrence(schedule: Mapping[str, Any], due: float, timezone: str) -> float | None:
    trigger = schedule.get("trigger_type")
    if trigger == "interval" and schedule.get("interval_sec"):
        return due + int(schedule["interval_sec"])
    if trigger == "cron" and schedule.get("cron_expr"):
        try:
            return next_after(str(schedule["cron_expr"]), schedule_zone(schedule, timezone), due)
        except CronError:
            return None
    return None


def jitter_delay(schedule: Mapping[str, Any], due: float | None, *, timezone: str) -> float:
    """Seconds the occurrence due at ``due`` waits; 0 without ``jitter_sec``.

    Deterministic in (schedule id, due time); below ``jitter_sec`` and below the gap to the
    next occurrence, so a jittered occurrence never runs into the next one.
    """
    jitter = schedule.get("jitter_sec")
    if not jitter or due is None:
        return 0.0
    bound = float(jitter)
    nxt = _next_occurrence(schedule, float(due), timezone)
    if nxt is not None:
        bound = min(bound, nxt - float(due))
    digest = hashlib.sha256(f"{schedule.get('id')}\0{float(due)!r}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return round(fraction * max(0.0, bound), 3)


def with_jitter(
    schedule: Mapping[str, Any], times: Sequence[PreviewEntry], *, timezone: str
) -> list[JitteredEntry]:
    """Preview entries with each occurrence's ``jitter_sec`` (the delay it will wait)."""
    return [
        JitteredEntry(
            at=entry["at"],
            utc=entry["utc"],
            local=entry["local"],
            jitter_sec=jitter_delay(schedule, entry["at"], timezone=timezone),
        )
        for entry in times
    ]


def catchup_expired(schedule: Mapping[str, Any], due: float | None, now: float) -> bool:
    """Whether a missed occurrence due at ``due`` is older than ``catchup_window_sec``."""
    window = schedule.get("catchup_window_sec")
    return window is not None and due is not None and now - float(due) > float(window)

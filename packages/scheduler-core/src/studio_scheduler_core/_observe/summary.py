"""The events the engine emits from summaries: start-up recovery and a delivery pass."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .events import emit


def recovery_event(recovered: int, orphans_killed: int, missed: Mapping[str, int]) -> None:
    """``recovered N runs, killed M orphans, K missed fires skipped/run`` (always logged)."""
    skipped = int(missed.get("skip", 0))
    run = int(missed.get("fire", 0))
    emit(
        "recovery",
        f"recovered {recovered} runs, killed {orphans_killed} orphans, "
        f"{skipped} missed fires skipped/{run} run",
        recovered=recovered,
        orphans_killed=orphans_killed,
        missed_skipped=skipped,
        missed_run=run,
    )


def delivery_event(counts: Mapping[str, int], template: Sequence[str] | None) -> None:
    """One event per outcome of a delivery pass that did something."""
    # the pass mixes the argv and webhook transports; its counts do not say which
    transport = "all" if template is not None else "paused"
    for outcome in ("delivered", "retried", "dead_letter", "expired"):
        count = int(counts.get(outcome, 0))
        if count:
            emit(
                "delivery",
                f"dispatch delivery: {count} {outcome}",
                outcome=outcome,
                transport=transport,
                count=count,
            )


def coalesced_slots(schedule: Mapping[str, Any], due: float | None, next_at: float | None) -> int:
    """Interval slots passed over between an occurrence due at ``due`` and the next one at
    ``next_at`` (coalesced away); 0 for other triggers."""
    interval = schedule.get("interval_sec")
    if schedule.get("trigger_type") != "interval" or due is None or next_at is None:
        return 0
    if not isinstance(interval, int | float) or interval <= 0:
        return 0
    return max(0, round((float(next_at) - float(due)) / float(interval)) - 1)


def coalesced_event(schedule: Mapping[str, Any], due: float | None, next_at: float | None) -> int:
    """Emit the event of the slots :func:`coalesced_slots` counts; return that count.

    Logged at INFO for the first coalescing of a fire and at DEBUG when only one slot went,
    so a schedule that is always one slot late does not flood the log.
    """
    slots = coalesced_slots(schedule, due, next_at)
    if slots <= 0 or due is None or next_at is None:
        return 0
    sid = str(schedule["id"])
    emit(
        "coalesced",
        f"schedule {sid}: {slots} slot(s) coalesced (due {due:.3f}, next {next_at:.3f})",
        level=logging.INFO if slots > 1 else logging.DEBUG,
        schedule_id=sid,
        count=slots,
    )
    return slots

"""The threshold gate: ``threshold_config`` on cron and interval schedules.

``{"metric", "op", "value", "window_minutes"}``: the occurrence fires only when the metric
breaches (``observed <op> value``), and not again within ``window_minutes*60`` seconds of the
last alert (``last_alert_at``, stamped by the firing occurrence's own transaction, so a fire
refused by a later gate or a lost guard starts no cooldown). Between the breach decision and
the end of that fire the schedule holds an in-memory reservation: a second evaluation meanwhile
(another tick, a missed-fire pass) cannot fire a second alert. Every evaluation stamps
``last_evaluated_at``. A stored config that does not validate never fires and is logged once
per schedule (it cannot fail every tick).
"""

from __future__ import annotations

import json
import logging
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import aiosqlite

from .._records.schedule import Schedule
from ..abc import ThresholdDecision
from . import store
from .metrics import MEASURES, measure

logger = logging.getLogger("studio_scheduler_core")

OPS: dict[str, Callable[[float, float], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
_SYMBOL = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def parse_config(value: Any) -> tuple[str, str, float, int]:
    """``(metric, op, value, window_minutes)`` of a stored config; ``ValueError`` if invalid."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError("threshold_config is not an object")
    if set(value) != {"metric", "op", "value", "window_minutes"}:
        raise ValueError(f"threshold_config has keys {sorted(value)}")
    metric, op, number, window = (
        value["metric"],
        value["op"],
        value["value"],
        value["window_minutes"],
    )
    if metric not in MEASURES:
        raise ValueError(f"unknown metric {metric!r}")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        raise ValueError(f"value {number!r} is not a finite number")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window_minutes {window!r} is not an integer >= 1")
    return str(metric), str(op), float(number), int(window)


class MetricThreshold:
    """The engine's default :class:`~studio_scheduler_core.abc.ThresholdGate`."""

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._warned: dict[str, str] = {}

    def pending(self) -> frozenset[str]:
        """Schedules holding a reservation (an alert decided and not finished yet)."""
        return frozenset(self._pending)

    def _release(self, schedule_id: str) -> None:
        self._pending.discard(schedule_id)

    async def evaluate(
        self, conn: aiosqlite.Connection, schedule: Schedule, *, now: float
    ) -> ThresholdDecision:
        """Measure, compare, check the cooldown and the reservation (see the module doc)."""
        sid = schedule.id
        await store.stamp_evaluated(conn, sid, now)
        raw = schedule.threshold_config
        try:
            metric, op, threshold, window = parse_config(raw)
        except (ValueError, TypeError) as exc:
            text = str(raw)
            if self._warned.get(sid) != text:
                self._warned[sid] = text
                logger.error("schedule %s: invalid threshold_config, never fires: %s", sid, exc)
            return ThresholdDecision(fire=False, reason=f"invalid threshold_config: {exc}")
        observed, extras = await measure(conn, metric, now=now, window_minutes=window, own=sid)
        shown = f"{metric}={observed:g} {_SYMBOL[op]} {threshold:g}"
        if not OPS[op](observed, threshold):
            return ThresholdDecision(fire=False, reason=f"within bounds: not {shown}")
        last_alert = await store.last_alert_at(conn, sid)
        cooldown = window * 60.0
        if last_alert is not None and now - last_alert < cooldown:
            left = cooldown - (now - last_alert)
            return ThresholdDecision(fire=False, reason=f"{shown}, in cooldown for {left:.0f} s")
        # No await between this check and the add: two evaluations cannot both pass it.
        if sid in self._pending:
            return ThresholdDecision(fire=False, reason=f"{shown}, an alert is still in flight")
        self._pending.add(sid)
        context = {
            "metric": metric,
            "op": op,
            "value": observed,
            "threshold": threshold,
            "window_minutes": window,
            **extras,
        }
        return ThresholdDecision(
            fire=True,
            context=context,
            reason=f"breach: {shown}",
            schedule_updates={"last_alert_at": now},
            release=lambda: self._release(sid),
        )

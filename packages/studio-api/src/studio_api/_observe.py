"""Studio's log format and Prometheus metrics, both derived from the scheduler's events.

scheduler-core emits one structured record per event on its events logger
(``extra={"studio_event", "studio_fields"}``) and knows nothing of Prometheus; this module
formats those records (``LIONAGI_STUDIO_LOG_FORMAT``) and turns them into counters and
histograms with a logging handler. Gauges are read when ``/metrics`` is scraped, and so are
the delivery outcomes, per transport (``_delivery_metrics``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from studio_outbox import DISPATCH_STATUSES
from studio_scheduler_core import (
    EVENTS_LOGGER,
    HEALTH_VERDICTS,
    SchedulerEngine,
    read_dispatch_counts,
    read_github_polls,
    read_health_counts_sync,
)

from ._delivery_metrics import DeliveryTally
from ._sync_reads import open_sync_reader

logger = logging.getLogger("studio_api")

_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_DURATION_BUCKETS = (0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200)
_TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, and for events
    ``event`` with its fields (ids, ``reason_code``, figures)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, "studio_event", None)
        if event is not None:
            data["event"] = event
            fields = getattr(record, "studio_fields", None)
            if isinstance(fields, dict):
                data.update(fields)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, separators=(",", ":"))


class StudioMetrics:
    """The ``/metrics`` registry of one app, fed by the scheduler's events."""

    def __init__(self, db_path: Path | str, engine: Callable[[], SchedulerEngine | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.fires = Counter(
            "studio_fires_total", "Runs that ended, by terminal status.", ["outcome"], registry=r
        )
        self.lag = Histogram(
            "studio_fire_lag_seconds",
            "Scheduled fires: seconds from the occurrence's due time to its fire.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "studio_run_duration_seconds",
            "Seconds from a run's start to its end.",
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.deferrals = Counter(
            "studio_deferrals_total",
            "Deferred occurrences, by reason code.",
            ["reason"],
            registry=r,
        )
        self.deliveries = Counter(
            "studio_deliveries_total",
            "Dispatch send outcomes, by outcome and transport.",
            ["outcome", "transport"],
            registry=r,
        )
        self.tick = Histogram(
            "studio_tick_seconds",
            "Seconds one scheduler tick took.",
            buckets=_TICK_BUCKETS,
            registry=r,
        )
        self.coalesced = Counter(
            "studio_coalesced_slots_total",
            "Interval slots coalesced away (passed over while late or busy), by schedule id.",
            ["schedule"],
            registry=r,
        )
        self.archive_failures = Counter(
            "studio_retention_archive_failures_total",
            "Retention archives that could not be written or verified (their batch, and the "
            "rest of that pass, deleted nothing).",
            registry=r,
        )
        # counted from the dispatches' outcome transitions, per transport (not from the
        # delivery pass's event, whose totals mix the transports)
        self.delivery_tally = DeliveryTally(db_path, self.deliveries)
        self.last_lag: float | None = None
        self.max_lag: float | None = None
        r.register(_ScrapeGauges(db_path, engine))
        # process_* (CPU, memory, descriptors, start time) and python_info, as on the
        # default registry; both read at scrape time
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.handler = _EventHandler(self)

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        """Account one scheduler event."""
        if event == "fire":
            if fields.get("kind") in ("scheduled", "missed_fire"):
                lag = float(fields.get("lag_seconds") or 0.0)
                self.lag.observe(lag)
                self.last_lag = lag
                self.max_lag = lag if self.max_lag is None else max(self.max_lag, lag)
        elif event == "outcome":
            self.fires.labels(outcome=str(fields.get("status"))).inc()
            took = fields.get("duration_seconds")
            if took is not None:  # None: cancelled before it started, no duration to count
                self.duration.observe(float(took))
        elif event == "deferral":
            self.deferrals.labels(reason=str(fields.get("reason_code"))).inc()
        elif event == "coalesced":
            self.coalesced.labels(schedule=str(fields.get("schedule_id"))).inc(
                int(fields.get("count") or 0)
            )
        elif event == "tick":
            self.tick.observe(float(fields.get("seconds") or 0.0))
        elif event == "retention_archive_failed":
            self.archive_failures.inc()

    def install(self) -> None:
        """Listen to the scheduler's events (every level: per-tick events are DEBUG) and count
        delivery outcomes from now on."""
        self.delivery_tally.start()
        events = logging.getLogger(EVENTS_LOGGER)
        if events.level == logging.NOTSET or events.level > logging.DEBUG:
            events.setLevel(logging.DEBUG)
        events.addHandler(self.handler)

    def refresh(self) -> None:
        """Bring what is counted from the database up to date (before a scrape)."""
        self.delivery_tally.refresh()

    def uninstall(self) -> None:
        """Stop listening."""
        logging.getLogger(EVENTS_LOGGER).removeHandler(self.handler)


class _EventHandler(logging.Handler):
    def __init__(self, metrics: StudioMetrics) -> None:
        super().__init__(logging.DEBUG)
        self._metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "studio_event", None)
        fields = getattr(record, "studio_fields", None)
        if event is None or not isinstance(fields, dict):
            return
        try:
            self._metrics.observe(str(event), fields)
        except Exception:  # a metric must never break the scheduler
            self.handleError(record)


class _ScrapeGauges(Collector):
    """Gauges read at scrape time: runs in flight, scheduling lag, dispatch rows, github poll
    health age."""

    def __init__(self, db_path: Path | str, engine: Callable[[], SchedulerEngine | None]) -> None:
        self._db = db_path
        self._engine = engine

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        in_flight = GaugeMetricFamily(
            "studio_runs_in_flight", "Runs executing now, by kind.", labels=["kind"]
        )
        lag = GaugeMetricFamily(
            "studio_scheduling_lag_seconds",
            "Seconds the oldest due schedule is behind its due time (0 when none is due).",
        )
        engine = self._engine()
        if engine is not None:
            limits = engine.limits()
            in_flight.add_metric(["scheduled"], float(limits.get("in_flight", 0)))
            in_flight.add_metric(["adhoc"], float(limits.get("adhoc_in_flight", 0)))
            lag.add_metric([], float(engine.health().get("scheduling_lag_seconds", 0.0)))
        yield in_flight
        yield lag
        rows = GaugeMetricFamily(
            "studio_dispatch_rows", "Dispatch rows, by status.", labels=["status"]
        )
        age = GaugeMetricFamily(
            "studio_github_poll_healthy_age_seconds",
            "Seconds since each github_poll schedule's last successful poll.",
            labels=["schedule"],
        )
        schedules = GaugeMetricFamily(
            "studio_schedules",
            "Schedules by health verdict (every verdict, 0 included).",
            labels=["health"],
        )
        now = time.time()
        try:
            by_status, polls, verdicts = self._read(now)
        except sqlite3.Error as exc:
            logger.warning("metrics: reading the database failed: %s", exc)
            by_status, polls, verdicts = None, [], None
        if verdicts is not None:
            for verdict in HEALTH_VERDICTS:
                schedules.add_metric([verdict], float(verdicts.get(verdict, 0)))
        if by_status is not None:
            # every status, 0 included, so an alert on one works before its first row
            for status in sorted({*DISPATCH_STATUSES, *by_status}):
                rows.add_metric([status], float(by_status.get(status, 0)))
        for schedule_id, healthy_at, created_at in polls:
            since = healthy_at if healthy_at is not None else created_at
            age.add_metric([schedule_id], max(0.0, now - float(since)))
        yield rows
        yield age
        yield schedules

    def _read(
        self, now: float
    ) -> tuple[dict[str, int] | None, list[tuple[str, float | None, float]], dict[str, int]]:
        db = open_sync_reader(self._db)
        try:
            return (
                read_dispatch_counts(db),
                read_github_polls(db),
                read_health_counts_sync(db, now=now),
            )
        finally:
            db.close()

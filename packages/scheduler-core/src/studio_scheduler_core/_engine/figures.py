"""What the last tick saw, for ``health()`` and ``limits()``: read without database access."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from studio_outbox import webhook_transport_available

from .._fire.dbfile import StorageHealth
from .._observe.store import count_pending_dispatches
from .._settings import SchedulerSettings
from .delivery import BACKLOG_EVERY, transports_health
from .reports import ConcernName, EngineHealth, Limits, TickReport, TransportName
from .running import Running

logger = logging.getLogger("studio_scheduler_core")

Concern = tuple[ConcernName, Callable[[float], Awaitable[Any]]]

#: Why each transport is missing, as the health report words it.
MISSING_TRANSPORT: dict[TransportName, str] = {
    "argv": "no notify_template (LIONAGI_STUDIO_NOTIFY_TEMPLATE)",
    "webhook": "httpx is not installed (the http extra)",
}


def missing_transports(settings: SchedulerSettings, *, webhook: bool) -> list[TransportName]:
    """The transports this node cannot deliver with: ``argv`` without a notify template,
    ``webhook`` without httpx."""
    missing: list[TransportName] = [] if settings.notify_template is not None else ["argv"]
    return missing if webhook else [*missing, "webhook"]


def paused_reason(stuck: Mapping[TransportName, int]) -> str | None:
    """``"no notify_template (…) for 3 argv dispatches"``, per stuck transport; ``None``: none."""
    parts = [
        f"{MISSING_TRANSPORT[name]} for {n} {name} dispatch{'' if n == 1 else 'es'}"
        for name, n in sorted(stuck.items())
        if n > 0
    ]
    return "; ".join(parts) or None


async def run_concerns(
    concerns: Sequence[Concern], now: float, storage: StorageHealth
) -> tuple[TickReport, list[str]]:
    """Run each concern in order; a failure is logged (a storage fault once) and isolated.

    Returns what each concern reported and the errors, a storage fault met meanwhile (by a
    terminal write) included.
    """
    report: TickReport = {}
    errors: list[str] = []
    for name, concern in concerns:
        try:
            report[name] = await concern(now)
        except Exception as exc:
            problem = storage.failed(exc)
            if problem is None:
                logger.exception("scheduler concern %r failed", name)
            errors.append(f"{name}: {problem or type(exc).__name__}: {exc}")
    fault = storage.problem  # met by this tick, or by a terminal write meanwhile
    if fault is not None and not any(fault in error for error in errors):
        errors.append(f"storage fault: {fault}")
    return report, errors


@dataclass(slots=True)
class Figures:
    """The last tick's time and error, the due and dispatch backlogs it read, and how far
    behind the oldest due schedule is."""

    last_tick_at: float | None = None
    last_tick_error: str | None = None
    due_backlog: int = 0
    scheduling_lag: float = 0.0
    """Seconds the oldest due schedule is behind its due time (0 when none is due)."""
    dispatch_backlog: int = 0
    stuck: dict[TransportName, int] = field(default_factory=dict)
    """Pending dispatches per transport this node lacks (they cannot be delivered here)."""
    stuck_at: float | None = None

    def ticked(self, now: float, error: str | None) -> None:
        """A tick ran (or was refused) at ``now``."""
        self.last_tick_at = now
        self.last_tick_error = error

    async def read_backlogs(self, run: Running, now: float) -> None:
        """Re-read the backlog figures (a failure is logged; the old figures stay)."""
        try:
            self.due_backlog, self.scheduling_lag = await run.evaluator.due_backlog(now)
            await run.delivery.refresh_backlog(now)
            self.dispatch_backlog = run.delivery.backlog
            await self._read_stuck(run, now)
        except Exception:
            logger.exception("reading the scheduler's backlog figures failed")

    async def _read_stuck(self, run: Running, now: float) -> None:
        if self.stuck_at is not None and now - self.stuck_at < BACKLOG_EVERY:
            return
        self.stuck_at = now
        missing = missing_transports(run.env.settings, webhook=webhook_transport_available())
        stuck: dict[TransportName, int] = {}
        for name in missing:
            stuck[name] = await count_pending_dispatches(run.conn, webhook=name == "webhook")
        self.stuck = stuck

    def health(
        self,
        run: Running | None,
        *,
        problem: str | None,
        settings: SchedulerSettings,
        node_id: str,
        leader: bool,
        backend: str,
        wake_listening: bool | None,
    ) -> EngineHealth:
        """The engine's health figures (see ``SchedulerEngine.health``)."""
        task = None if run is None else run.loop_task
        running = task is not None and not task.done()
        degraded = not running or problem is not None or self.last_tick_error is not None
        stuck = {name: n for name, n in self.stuck.items() if n > 0}
        return {
            "status": "degraded" if degraded else "ok",
            "running": running,
            "last_tick_at": self.last_tick_at,
            "last_tick_error": self.last_tick_error,
            "in_flight": 0 if run is None else len(run.admission.slots),
            "due_backlog": self.due_backlog,
            "scheduling_lag_seconds": self.scheduling_lag,
            "coalesced_slots": 0 if run is None else run.evaluator.coalesced_total,
            "dispatch_backlog": self.dispatch_backlog,
            # paused: some pending row waits for a transport this node lacks
            "delivery_paused": bool(stuck),
            "delivery_paused_transports": sorted(stuck),
            "delivery_paused_dispatches": {str(name): n for name, n in stuck.items()},
            "delivery_paused_reason": paused_reason(stuck),
            "transports": (
                transports_health(settings, webhook=webhook_transport_available())
                if run is None
                else run.delivery.transports()
            ),
            "database_error": problem,
            "global_cap": settings.max_scheduled_concurrent,
            "holders": [] if run is None else run.admission.holders(),
            "node_id": node_id,
            "leader": leader,
            "backend": backend,
            "wake_listening": wake_listening,
        }


def limits(run: Running | None, settings: SchedulerSettings, *, adhoc_in_flight: int) -> Limits:
    """The global cap, in-flight holders, and the ad-hoc pool's figures (see
    ``SchedulerEngine.limits``)."""
    return {
        "max_scheduled_concurrent": settings.max_scheduled_concurrent,
        "in_flight": 0 if run is None else len(run.admission.slots),
        "holders": [] if run is None else run.admission.holders(),
        "max_adhoc_concurrent": settings.max_adhoc_concurrent,
        "adhoc_in_flight": adhoc_in_flight,
    }

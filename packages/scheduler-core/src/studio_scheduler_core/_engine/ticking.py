"""The engine's loop: who leads this tick, one tick's concerns in order, and when to wake.

:class:`EngineLoop` is the part of :class:`~studio_scheduler_core.SchedulerEngine` that runs
after :meth:`~studio_scheduler_core.SchedulerEngine.start`; the engine module keeps the
constructor, the start/stop lifecycle and the introspection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Literal

from studio_state import Clock

from .._exceptions import SchedulerError
from .._fire.target import child_db_value
from .._observe.events import emit
from .._recovery.orphans import OrphanReaper
from .._settings import SchedulerSettings
from ..abc import Leadership, WorkerPass
from .database import EngineDatabase
from .figures import Concern, Figures, run_concerns
from .leadership import PostgresLeadership
from .reports import TickReport
from .running import Running
from .takeover import take_over
from .waker import Waker

logger = logging.getLogger("studio_scheduler_core")


class EngineLoop:
    """The loop, the leadership hand-over and one tick (the engine's state, set by its
    constructor)."""

    db_path: str
    backend: Literal["sqlite", "postgresql"]
    settings: SchedulerSettings
    clock: Clock
    leadership: Leadership
    reaper: OrphanReaper
    _worker: WorkerPass
    _db: EngineDatabase
    _waker: Waker
    _figures: Figures
    _run: Running | None
    _leading: bool

    def _started(self) -> Running:
        if self._run is None:
            raise SchedulerError("the engine is not started")
        return self._run

    async def _take_over(self, run: Running, now: float, *, startup: bool = False) -> None:
        """This engine starts leading (see :func:`~.takeover.take_over`)."""
        await take_over(
            run,
            now=now,
            settings=self.settings,
            reaper=self.reaper,
            children_db=child_db_value(self.db_path) if self.backend == "postgresql" else None,
            startup=startup,
        )
        self._leading = True
        if self.backend == "postgresql":
            logger.info("studio node %s leads schedule evaluation", self.leadership.node_id)

    async def _lead(self, run: Running, now: float) -> bool:
        """Whether this engine leads this tick (taking over first when it just became leader)."""
        leading = await self.leadership.tick()
        if leading and not self._leading:
            await self._take_over(run, now)
        elif not leading and self._leading:
            self._leading = False
            logger.warning(
                "studio node %s no longer leads schedule evaluation", self.leadership.node_id
            )
        return leading

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self) -> None:
        campaign = self._campaign()
        try:
            while not self._waker.closed:
                started = self.clock()
                self._waker.begin_tick()
                failed = False
                try:
                    await self.tick_once()
                    if self._db.problem:  # nothing advances: no spin
                        target = started + self.settings.tick_seconds
                    else:
                        target = await self._next_wake(started)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    logger.exception("scheduler tick failed")
                    self._figures.last_tick_error = f"{type(exc).__name__}: {exc}"
                    target = started + self.settings.tick_seconds
                    failed = True
                await self._waker.sleep_until(self._started().conn, target, failed=failed)
        finally:
            if campaign is not None:  # before giving up: it must not win the lock again
                campaign.cancel()
                await asyncio.gather(campaign, return_exceptions=True)
            if self.backend == "postgresql" and not self._waker.closed:
                await self._abdicate()

    def _campaign(self) -> asyncio.Task[None] | None:
        """On PostgreSQL the election runs beside the loop, every second whatever
        ``tick_seconds`` is: a follower wins a dead leader's lock within a second, a leader
        whose session cannot be confirmed stops leading within its lease; either change
        wakes the loop, which takes over or steps down at once."""
        if not isinstance(self.leadership, PostgresLeadership):
            return None
        return asyncio.create_task(
            self.leadership.campaign(self._waker.wake), name="studio-leadership"
        )

    async def _abdicate(self) -> None:
        """The loop died while the engine runs (its connection broke): on PostgreSQL another
        node must lead, so give the lock up and stop being a candidate (the loop's campaign,
        which ticks the election, has stopped). Health stays ``degraded`` (the loop is not
        running) until a restart."""
        self._leading = False
        logger.error(
            "studio node %s stops leading: its scheduler loop ended; restart it",
            self.leadership.node_id,
        )
        try:
            await self.leadership.release()
        except Exception:
            logger.exception("giving up leadership failed")

    def _while_leading(self, concern: Concern) -> Concern:
        """A leader's ``concern``, skipped (reporting ``None``) if leadership was lost since
        the tick began: a leader whose lease lapsed mid-tick (it hung, or its session did)
        starts no more of the leader's work, whatever the rest of the tick holds."""
        name, step = concern

        async def guarded(now: float) -> Any:
            return await step(now) if self.leadership.is_leader else None

        return name, guarded

    async def _next_wake(self, started: float) -> float:
        run = self._started()
        now = self.clock()
        if not self._leading:  # a follower tries to lead again in one tick
            return started + self.settings.tick_seconds
        if run.evaluator.more:
            return now
        target = await run.evaluator.next_due(now, started + self.settings.tick_seconds)
        return await run.delivery.next_due(target)

    # -- one tick ---------------------------------------------------------------------------
    async def tick_once(self) -> TickReport:
        """Run one tick's concerns in order; each one's failure is logged and isolated.

        Order: reapers, WAL checkpoint, dispatch delivery, worker pass, schedule evaluation.
        Returns what each concern reported.
        """
        run = self._started()
        conn = run.conn
        now = self.clock()
        began = time.perf_counter()
        refusal = await self._db.refusal(conn)
        if refusal is not None:
            self._figures.ticked(now, refusal[1])
            return {"database": refusal[0]}
        leading = await self._lead(run, now)
        concerns = run.concerns(self._worker, leading=leading)
        if leading:
            ours = {name for name, _ in run.concerns(self._worker, leading=False)}
            concerns = tuple(self._while_leading(c) if c[0] not in ours else c for c in concerns)
        report, errors = await run_concerns(concerns, now, self._db.storage)
        if not leading or not self.leadership.is_leader:
            report["leader"] = False
        self._figures.ticked(now, "; ".join(errors) or None)
        await self._figures.read_backlogs(run, now)
        emit("tick", "tick", level=logging.DEBUG, seconds=time.perf_counter() - began)
        return report

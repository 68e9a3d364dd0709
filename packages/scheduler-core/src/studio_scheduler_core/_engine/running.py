"""What a started engine runs: every component built together, closed together.

:func:`build` makes the engine's components on its writer connection as one
:class:`Running`; the engine pushes their closers onto its exit stack, so ``stop()`` closes
them in reverse order and a failing one neither stops the others nor goes unlogged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiosqlite

from studio_state import Clock, is_postgres

from .._admission.dispatched import release_ended
from .._admission.gates import Admission
from .._fire.dbfile import StorageHealth
from .._fire.ending import WaitingCancels
from .._fire.env import FireEnv
from .._fire.runner import FireRunner
from .._fire.target import child_db_value
from .._recovery.ended_children import EndedChildren
from .._recovery.orphans import OrphanReaper
from .._recovery.reapers import Reapers
from .._recovery.run_logs import StoredLogs
from .._schedules.service import ScheduleService
from .._settings import SchedulerSettings
from .._triggers.registry import TriggerRegistry
from ..abc import RunTerminalHook, ThresholdGate, WorkerPass
from .delivery import Delivery
from .evaluation import Evaluator

if TYPE_CHECKING:
    from .figures import Concern

logger = logging.getLogger("studio_scheduler_core")


@dataclass(slots=True)
class Running:
    """Everything a started engine has; built whole by ``start()``, closed whole by ``stop()``."""

    conn: aiosqlite.Connection
    env: FireEnv
    admission: Admission
    evaluator: Evaluator
    runner: FireRunner
    service: ScheduleService
    delivery: Delivery
    reapers: Reapers
    children: EndedChildren
    stack: AsyncExitStack
    loop_task: asyncio.Task[None] | None = None
    cancels: WaitingCancels | None = None
    """SQLite: reports the operator's cancels of runs that never started, by any process."""
    run_logs: StoredLogs | None = None
    """PostgreSQL: stores the logs of this node's ended runs that their end did not."""

    def concerns(self, worker: WorkerPass, *, leading: bool) -> tuple[Concern, ...]:
        """A tick's concerns, in order: the leader's all of them; a follower's the outbox, the
        worker's queue (leased rows taken by guarded claims, so nodes share them without
        taking one twice) and the sweep of its own machine for children of ended runs;
        schedules, reapers and scheduled slots stay with the leader."""
        pass_: Concern = ("worker", lambda now: worker.run(self.conn, now=now))
        children: Concern = ("children", lambda now: self.children.tick(self.conn, now))
        if self.run_logs is not None:
            # Part of the sweep of this node's machine: the logs of its ended runs not yet
            # stored (the sweep reports the processes it found, as before).
            children = ("children", self._sweep_machine)
        if not leading:
            return (("dispatch", self.delivery.tick), pass_, children)
        leader: tuple[Concern, ...] = (
            children,
            ("reapers", self.reapers.reap),
            ("checkpoint", self.reapers.checkpoint),
            ("dispatch", self.delivery.tick),
            pass_,
        )
        if self.env.queue_fires:
            leader += (("dispatched", self._release_ended),)
        if self.cancels is not None:
            leader += (("cancels", self.cancels.report),)
        return (*leader, ("schedules", self.evaluator.evaluate))

    async def _sweep_machine(self, now: float) -> int | None:
        found = await self.children.tick(self.conn, now)
        if self.run_logs is not None:
            await self.run_logs.tick(self.conn, now)
        return found

    async def _release_ended(self, now: float) -> dict[str, int]:
        # Slots of fires another node's worker ran free up before this tick's evaluation.
        return {"released": await release_ended(self.admission, self.conn)}


def logged(name: str, close: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[None]]:
    """``close`` for the exit stack: a failure is logged and the other components still close."""

    async def run() -> None:
        try:
            await close()
        except Exception:
            logger.exception("closing %s failed", name)

    return run


async def cancel_loop(task: asyncio.Task[None]) -> None:
    """Cancel the scheduler loop's task (for the exit stack); log how it had ended."""
    task.cancel()
    results = await asyncio.gather(task, return_exceptions=True)
    if isinstance(results[0], Exception):
        logger.error("the scheduler loop ended with %r", results[0])


def build(
    conn: aiosqlite.Connection,
    *,
    stack: AsyncExitStack,
    db_path: str,
    settings: SchedulerSettings,
    clock: Clock,
    storage: StorageHealth,
    threshold: ThresholdGate,
    registry: TriggerRegistry,
    on_terminal: RunTerminalHook | None,
    wake: Callable[[], None],
    now: float,
    node_id: str | None = None,
) -> Running:
    """The components of an engine started at ``now`` on ``conn``."""
    env = FireEnv(
        conn=conn,
        settings=settings,
        clock=clock,
        db_path=db_path,
        storage=storage,
        node_id=node_id,
        queue_fires=bool(settings.scheduled_on_any_node),
    )
    admission = Admission(conn, settings, threshold)
    runner = FireRunner(env, on_terminal=on_terminal, wake=wake)
    orphans = OrphanReaper()
    stack.push_async_callback(orphans.close)
    return Running(
        conn=conn,
        env=env,
        admission=admission,
        evaluator=Evaluator(env, admission, registry, runner.start, runner.revoke),
        runner=runner,
        service=ScheduleService(conn, settings=settings, clock=clock, on_change=wake),
        delivery=Delivery(
            conn,
            settings=settings,
            clock=clock,
            wake=wake,
            postgres_url=db_path if is_postgres(db_path) else None,
        ),
        reapers=Reapers(
            conn,
            db_path=db_path,
            settings=settings,
            owned_runs=lambda: set(env.committed) | set(env.live),
            started=now,
        ),
        children=EndedChildren(
            db_value=child_db_value(db_path),
            interval=settings.reaper_interval_seconds,
            reaper=orphans,
        ),
        stack=stack,
        cancels=None if is_postgres(db_path) else WaitingCancels(conn),
        run_logs=(
            StoredLogs(
                db_path=db_path, settings=settings, interval=settings.reaper_interval_seconds
            )
            if is_postgres(db_path)
            else None
        ),
    )

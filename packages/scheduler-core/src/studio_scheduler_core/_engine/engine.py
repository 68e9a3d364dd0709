"""The engine: one loop over isolated concerns, one writer connection, one lock.

The engine coordinates; each concern is an object of its own (evaluation, delivery, the
reapers, the worker, the fire runner), built together in :meth:`SchedulerEngine.start` as one
:class:`Running` and closed together, in reverse order, by :meth:`SchedulerEngine.stop`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Literal

import aiosqlite

from studio_state import Clock, is_postgres

from .._adhoc.service import AdhocRunService
from .._adhoc.worker import AdhocWorker
from .._exceptions import (
    DatabaseUnavailable,
    InvalidSettings,
)
from .._fire.dbfile import StorageHealth
from .._fire.target import normalise
from .._github.source import GithubPollSource
from .._recovery.orphans import OrphanReaper
from .._recovery.retention import RetentionReport
from .._schedules.service import ScheduleService
from .._settings import SchedulerSettings
from .._triggers.registry import default_registry
from .._triggers.threshold import MetricThreshold
from ..abc import Leadership, RunTerminalHook, ThresholdGate, TriggerSource, WorkerPass
from .database import EngineDatabase
from .figures import Figures, limits
from .leadership import default_leadership
from .listener import WakeListener
from .manual import fire_manually, refuse_on_follower
from .reports import EngineHealth, Limits
from .running import Running, build, cancel_loop, logged
from .store import register_node
from .ticking import EngineLoop
from .waker import Waker

logger = logging.getLogger("studio_scheduler_core")


class SchedulerEngine(EngineLoop):
    """Studio's scheduler: triggers, admission, fires, follow-ups, recovery, dispatch delivery.

    ``start()`` takes the database's engine lock, migrates, recomputes cron cadence, reconciles
    runs left by a crashed process, applies missed-fire policies once, then runs the loop.
    Extra :class:`~studio_scheduler_core.abc.TriggerSource` objects (github_poll), a threshold
    gate, a worker pass and a terminal-run hook plug in through the constructor.

    ``db_path`` is a SQLite file or a ``postgresql://`` URL (``settings.run_log_dir`` is then
    required: there is no file to put ``runs/`` beside). Only the :class:`Leadership` holder
    (default: the file lock on SQLite, an advisory-lock election named ``node_id`` on
    PostgreSQL) evaluates schedules, runs ad-hoc work, delivers and reaps; an engine that does
    not lead keeps its connection for the API and tries to lead at every tick.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        settings: SchedulerSettings,
        clock: Clock = time.time,
        triggers: Iterable[TriggerSource] = (),
        threshold: ThresholdGate | None = None,
        worker: WorkerPass | None = None,
        on_run_terminal: RunTerminalHook | None = None,
        node_id: str | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        self.db_path = normalise(db_path)
        self.backend: Literal["sqlite", "postgresql"] = (
            "postgresql" if is_postgres(self.db_path) else "sqlite"
        )
        """``sqlite`` or ``postgresql`` (``db_path`` is then a URL)."""
        if self.backend == "postgresql" and not settings.run_log_dir:
            raise InvalidSettings(
                "run_log_dir", "must be set on PostgreSQL (there is no database file beside it)"
            )
        if settings.scheduled_on_any_node is None:
            settings = replace(settings, scheduled_on_any_node=self.backend == "postgresql")
        self.settings = settings
        """The settings, ``scheduled_on_any_node`` resolved for this database."""
        self.clock = clock
        self.registry = default_registry()
        self.registry.register(GithubPollSource(settings, wake=self.wake))
        for source in triggers:
            self.registry.register(source)
        self._threshold = threshold or MetricThreshold()
        self._worker: WorkerPass = worker or AdhocWorker(
            settings=settings, db_path=self.db_path, clock=clock, wake=self.wake
        )
        self._on_run_terminal = on_run_terminal
        storage = StorageHealth()
        self.reaper = OrphanReaper()
        """Terminates the orphans start-up recovery finds, in the background."""
        if leadership is None:
            leadership = default_leadership(self.db_path, settings, node_id)
        self.leadership = leadership
        """Whether this engine leads (see :class:`~studio_scheduler_core.abc.Leadership`)."""
        self._db = EngineDatabase(
            self.db_path,
            storage,
            postgres=self.backend == "postgresql",
            application_name=f"studio:{leadership.node_id}",
        )
        self._waker = Waker(clock)
        self._run: Running | None = None
        self._leading = False
        self._figures = Figures()

    # -- properties -------------------------------------------------------------------------
    @property
    def conn(self) -> aiosqlite.Connection:
        """The engine's writer connection (after :meth:`start`)."""
        return self._started().conn

    @property
    def service(self) -> ScheduleService:
        """A :class:`ScheduleService` on the engine's connection that wakes the engine."""
        return self._started().service

    @property
    def runs(self) -> AdhocRunService:
        """An :class:`AdhocRunService` on the engine's connection (wakes the engine; a cancel
        stops a run the engine's worker executes at once)."""
        return AdhocRunService(
            self.conn,
            settings=self.settings,
            clock=self.clock,
            on_change=self.wake,
            worker=self._worker,
            runner=None if self._run is None else self._run.runner,
            # on SQLite the engine reports cancels of runs that never started, from the rows
            report_waiting=self.backend == "postgresql",
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, *, loop: bool = True) -> None:
        """Lock, migrate, recompute cron, reconcile, apply missed fires, start the loop.

        ``loop=False`` does everything but start the loop (tests drive :meth:`tick_once`).
        Raises :class:`EngineLocked` when another engine holds this database.
        """
        if self._run is not None:
            return
        try:
            await self.leadership.acquire()
        except PermissionError as exc:  # a read-only directory
            raise DatabaseUnavailable(self.db_path, f"{exc.strerror}: {exc.filename}") from exc
        stack = AsyncExitStack()
        stack.push_async_callback(logged("leadership", self.leadership.release))
        try:
            conn = await self._db.open()
            stack.push_async_callback(logged("the database connection", conn.close))
            stack.push_async_callback(self.reaper.close)
            now = self.clock()
            run = self._run = build(
                conn,
                stack=stack,
                db_path=self.db_path,
                settings=self.settings,
                clock=self.clock,
                storage=self._db.storage,
                threshold=self._threshold,
                registry=self.registry,
                on_terminal=self._on_run_terminal,
                wake=self.wake,
                now=now,
                node_id=self.leadership.node_id,
            )
            self._worker.attach(
                node_id=self.leadership.node_id, storage=self._db.storage, runner=run.runner
            )
            await register_node(conn, self.leadership.node_id, self.settings.node_url, now)
            self._leading = False
            if await self.leadership.tick():
                await self._take_over(run, now, startup=True)
            await self._waker.open(conn)
            if self.backend == "postgresql":
                listener = WakeListener(
                    self.db_path,
                    wake=self.wake,
                    application_name=f"studio:{self.leadership.node_id}:wake",
                )
                stack.push_async_callback(self._waker.listen(listener).aclose)
            # Closed in reverse: loop, delivery, worker, trigger sources, fires, orphans, conn.
            stack.push_async_callback(run.runner.cancel_all)
            for source in reversed(self.registry.closeables()):
                stack.push_async_callback(logged("a trigger source", source.aclose))
            stack.push_async_callback(logged("the worker", self._worker.stop))
            stack.push_async_callback(run.delivery.aclose)
            if loop:
                run.loop_task = asyncio.create_task(self._loop(), name="studio-scheduler-loop")
                stack.push_async_callback(cancel_loop, run.loop_task)
        except BaseException:
            self._run = None
            await stack.aclose()
            raise

    async def stop(self) -> None:
        """Cancel the loop and every tracked fire (children terminated), mark runs cancelled."""
        run = self._run
        if run is None:
            return
        run.env.closing = True  # a failing terminal write is left to start-up now
        self._waker.close()
        try:
            await run.stack.aclose()
        finally:
            self._run = None

    async def wait_idle(self) -> None:
        """Wait until every tracked fire (chains included) and delivery pass has finished."""
        while (run := self._run) is not None:
            pending = [t for t in run.runner.tasks() if not t.done()] + run.delivery.pending()
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    def wake(self) -> None:
        """Make the loop tick now (a schedule changed, a slot freed, something was enqueued)."""
        self._waker.wake()

    # -- manual fire ------------------------------------------------------------------------
    async def fire_now(self, schedule_id: str, *, actor: str | None = None) -> str:
        """Fire the schedule now; return the run id (the run row exists when this returns).
        ``actor``: the operator who fired it (the run's transition rows name them).

        Budget, max_runs and the global slot apply (overlap and threshold do not); a refusal
        raises :class:`FireRefused` with the gate's reason code and nothing is written. An
        engine that does not lead refuses with ``schedule.refused.not_leader``.
        """
        run = self._started()
        if not self._leading:
            raise refuse_on_follower(self.node_id)
        run_id = await fire_manually(run, schedule_id, now=self.clock(), actor=actor)
        self.wake()
        return run_id

    # -- introspection ----------------------------------------------------------------------
    def health(self) -> EngineHealth:
        """Liveness and backlog figures (cheap: no database access).

        Also ``node_id``, ``leader`` (see :attr:`is_leader`), ``backend`` and, on PostgreSQL,
        ``wake_listening`` (whether notifications wake the loop now, or it polls).
        ``status`` is ``degraded`` while the loop is not running, the last tick had an error,
        or ``database_error`` names a problem: the database file was deleted or replaced, or
        a storage fault ("disk full", "read-only …", "disk I/O error" …) met by the tick or a
        terminal write, cleared once a write succeeds again.
        """
        return self._figures.health(
            self._run,
            problem=self._db.problem,
            settings=self.settings,
            node_id=self.node_id,
            leader=self.is_leader,
            backend=self.backend,
            wake_listening=self._waker.listening if self.backend == "postgresql" else None,
        )

    @property
    def node_id(self) -> str:
        """This engine's node name (``hostname:pid`` unless configured)."""
        return self.leadership.node_id

    @property
    def is_leader(self) -> bool:
        """Whether this started engine leads schedule evaluation now (on SQLite: while it
        holds the database file's lock, i.e. whenever it is started)."""
        return self._run is not None and self._leading and self.leadership.is_leader

    @property
    def last_retention(self) -> RetentionReport | None:
        """What the reaper's last retention pass deleted (``None`` before the first)."""
        return None if self._run is None else self._run.reapers.last_retention

    def limits(self) -> Limits:
        """The global cap, in-flight holders, and the ad-hoc pool's figures."""
        return limits(self._run, self.settings, adhoc_in_flight=self._worker.in_flight())

"""The engine: one loop over isolated concerns, one writer connection, one lock (DESIGN §5.1)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiosqlite

from studio_outbox import deliver_due_dispatches, dispatch_backlog, next_due_at
from studio_state import Clock, fetch_all, fetch_value, open_connection, write_transaction

from .._adhoc.service import AdhocRunService
from .._adhoc.worker import AdhocWorker
from .._admission.gates import Admission, Reservation
from .._dbfile import DatabaseFile, StorageHealth, probe_writable, storage_fault
from .._exceptions import DatabaseUnavailable, FireRefused, ScheduleNotFound, SchedulerError
from .._fire.occurrence import ScheduleClaim
from .._fire.runner import FireRunner
from .._fire.steps import FireEnv, commit, prepare
from .._github.source import GithubPollSource
from .._recovery.orphans import OrphanReaper
from .._recovery.reconcile import checkpoint, reap_stale, reconcile_startup
from .._schedules.service import ScheduleService
from .._schedules.store import load_schedule
from .._schema import ensure_schema
from .._settings import SchedulerSettings
from .._triggers.cadence import first_fire_at
from .._triggers.cron import CronError, next_after
from .._triggers.registry import default_registry
from .._triggers.threshold import MetricThreshold
from ..abc import RunTerminalHook, ThresholdGate, TriggerSource, WorkerPass
from .evaluation import Evaluator
from .lock import EngineLock

logger = logging.getLogger("studio_scheduler_core")

_DATA_VERSION_EVERY = 1.0
_BACKLOG_EVERY = 5.0


class SchedulerEngine:
    """Studio's scheduler: triggers, admission, fires, follow-ups, recovery, dispatch delivery.

    ``start()`` takes the database's engine lock, migrates, recomputes cron cadence, reconciles
    runs left by a crashed process, applies missed-fire policies once, then runs the loop.
    Extra :class:`~studio_scheduler_core.abc.TriggerSource` objects (github_poll), a threshold
    gate, a worker pass and a terminal-run hook plug in through the constructor.
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
    ) -> None:
        self.db_path = str(Path(db_path).expanduser().resolve())
        self.settings = settings
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
        self._storage = StorageHealth()
        if isinstance(self._worker, AdhocWorker):
            self._worker.storage = self._storage  # one health for every terminal write
        self.reaper = OrphanReaper()
        """Terminates the orphans start-up recovery finds, in the background."""
        self._lock = EngineLock(self.db_path)
        self._dbfile = DatabaseFile(self.db_path)
        self._database_problem: str | None = None
        self._conn: aiosqlite.Connection | None = None
        self._service: ScheduleService | None = None
        self._env: FireEnv | None = None
        self._admission: Admission | None = None
        self._evaluator: Evaluator | None = None
        self._runner: FireRunner | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._delivery: asyncio.Task[Any] | None = None
        self._wake_event = asyncio.Event()
        self._stopping = False
        self._data_version: int | None = None
        self._last_reap: float | None = None
        self._last_checkpoint: float | None = None
        self._last_delivery_start: float | None = None
        self._last_tick_at: float | None = None
        self._last_tick_error: str | None = None
        self._due_backlog = 0
        self._dispatch_backlog = 0
        self._backlog_at: float | None = None

    # -- properties -------------------------------------------------------------------------
    @property
    def conn(self) -> aiosqlite.Connection:
        """The engine's writer connection (after :meth:`start`)."""
        if self._conn is None:
            raise SchedulerError("the engine is not started")
        return self._conn

    @property
    def service(self) -> ScheduleService:
        """A :class:`ScheduleService` on the engine's connection that wakes the engine."""
        if self._service is None:
            raise SchedulerError("the engine is not started")
        return self._service

    @property
    def runs(self) -> AdhocRunService:
        """An :class:`AdhocRunService` on the engine's connection (wakes the engine; a cancel
        stops a run the engine's worker executes at once)."""
        worker = self._worker if isinstance(self._worker, AdhocWorker) else None
        return AdhocRunService(
            self.conn,
            settings=self.settings,
            clock=self.clock,
            on_change=self.wake,
            worker=worker,
            runner=self._runner,
        )

    def _parts(self) -> tuple[FireEnv, Admission, Evaluator, FireRunner]:
        if self._env is None or self._admission is None or self._evaluator is None:
            raise SchedulerError("the engine is not started")
        assert self._runner is not None
        return self._env, self._admission, self._evaluator, self._runner

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, *, loop: bool = True) -> None:
        """Lock, migrate, recompute cron, reconcile, apply missed fires, start the loop.

        ``loop=False`` does everything but start the loop (tests drive :meth:`tick_once`).
        Raises :class:`EngineLocked` when another engine holds this database.
        """
        if self._conn is not None:
            return
        try:
            self._lock.acquire()
        except PermissionError as exc:  # a read-only directory
            raise DatabaseUnavailable(self.db_path, f"{exc.strerror}: {exc.filename}") from exc
        try:
            try:
                conn = await open_connection(self.db_path)
            except sqlite3.OperationalError as exc:
                if storage_fault(exc):
                    raise DatabaseUnavailable(self.db_path, str(exc)) from exc
                raise
            try:
                await ensure_schema(conn)
                await probe_writable(conn, self.db_path)
                self._dbfile.remember()
            except BaseException as exc:
                await conn.close()
                if storage_fault(exc):
                    raise DatabaseUnavailable(self.db_path, str(exc)) from exc
                raise
            self._conn = conn
            self._database_problem = None
            self._stopping = False
            self._storage.problem = None
            env = FireEnv(
                conn=conn,
                settings=self.settings,
                clock=self.clock,
                db_path=self.db_path,
                storage=self._storage,
            )
            admission = Admission(conn, self.settings, self._threshold)
            self._env, self._admission = env, admission
            self._runner = FireRunner(env, on_terminal=self._on_run_terminal, wake=self.wake)
            self._evaluator = Evaluator(env, admission, self.registry, self._runner.start)
            self._service = ScheduleService(
                conn, settings=self.settings, clock=self.clock, on_change=self.wake
            )
            now = self.clock()
            self._last_checkpoint = now
            await self._recompute_cadence(now)
            await reconcile_startup(conn, now=now, reaper=self.reaper)
            await self._evaluator.missed_fires(now)
            self._data_version = await self._read_data_version()
            if loop:
                self._loop_task = asyncio.create_task(self._loop(), name="studio-scheduler-loop")
        except BaseException:
            await self.reaper.close()
            await self._close()
            raise

    async def stop(self) -> None:
        """Cancel the loop and every tracked fire (children terminated), mark runs cancelled."""
        if self._conn is None:
            return
        self._stopping = True
        if self._env is not None:
            self._env.closing = True  # a failing terminal write is left to start-up now
        self._wake_event.set()
        for task in (self._loop_task, self._delivery):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(Exception):
            await self._worker.stop()
        for trigger_type in self.registry.types():
            closer = getattr(self.registry.get(trigger_type), "aclose", None)
            if closer is not None:  # github_poll: running polls, the HTTP client
                with contextlib.suppress(Exception):
                    await closer()
        if self._runner is not None:
            await self._runner.cancel_all()
        await self.reaper.close()
        await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        self._loop_task = self._delivery = None
        self._service = self._env = self._admission = self._evaluator = self._runner = None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        self._lock.release()

    async def wait_idle(self) -> None:
        """Wait until every tracked fire (chains included) and delivery pass has finished."""
        runner = self._runner
        while True:
            pending = [t for t in (runner.tasks() if runner else []) if not t.done()]
            if self._delivery is not None and not self._delivery.done():
                pending.append(self._delivery)
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    def wake(self) -> None:
        """Make the loop tick now (a schedule changed, a slot freed, something was enqueued)."""
        self._wake_event.set()

    # -- startup passes ---------------------------------------------------------------------
    async def _recompute_cadence(self, now: float) -> int:
        """Re-arm enabled cron rows under the current zone (rows already due are left alone)."""
        conn = self.conn
        rows = await fetch_all(
            conn,
            "SELECT id, trigger_type, cron_expr, interval_sec, poll_interval_sec, next_fire_at, "
            "timezone "
            "FROM schedules WHERE enabled = 1 AND (next_fire_at IS NULL OR "
            "(trigger_type = 'cron' AND next_fire_at > ?))",
            (now,),
        )
        cache: dict[tuple[str, str], float | None] = {}
        updates: list[tuple[Any, ...]] = []
        for row in rows:
            try:
                if row["trigger_type"] == "cron":
                    key = (str(row["cron_expr"]), row["timezone"] or self.settings.timezone)
                    if key not in cache:
                        cache[key] = next_after(key[0], key[1], now)
                    value = cache[key]
                else:
                    value = first_fire_at(row, now=now, timezone=self.settings.timezone)
            except (CronError, ValueError, TypeError, KeyError):
                logger.warning("schedule %s: cannot compute its next fire time", row["id"])
                continue
            old = row["next_fire_at"]
            if value is not None and (old is None or abs(float(old) - value) >= 1e-6):
                updates.append((value, now, row["id"], old, old))
        if updates:
            async with write_transaction(conn):
                await conn.executemany(
                    "UPDATE schedules SET next_fire_at = ?, updated_at = ? WHERE id = ? "
                    "AND (next_fire_at = ? OR (next_fire_at IS NULL AND ? IS NULL))",
                    updates,
                )
        return len(updates)

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self) -> None:
        while not self._stopping:
            started = self.clock()
            self._wake_event.clear()
            try:
                await self.tick_once()
                if self._database_problem or self._storage.problem:  # nothing advances: no spin
                    target = started + self.settings.tick_seconds
                else:
                    target = await self._next_wake(started)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception("scheduler tick failed")
                self._last_tick_error = f"{type(exc).__name__}: {exc}"
                target = started + self.settings.tick_seconds
            await self._sleep_until(target)

    async def _sleep_until(self, target: float) -> None:
        while not self._stopping:
            remaining = target - self.clock()
            if remaining <= 0 or self._wake_event.is_set():
                return
            try:
                await asyncio.wait_for(
                    self._wake_event.wait(), timeout=min(remaining, _DATA_VERSION_EVERY)
                )
                return
            except TimeoutError:
                pass
            version = await self._read_data_version()
            if version != self._data_version:
                self._data_version = version
                return

    async def _read_data_version(self) -> int:
        return int(await fetch_value(self.conn, "PRAGMA data_version") or 0)

    async def _next_wake(self, started: float) -> float:
        _, _, evaluator, _ = self._parts()
        now = self.clock()
        target = started + self.settings.tick_seconds
        if evaluator.more:
            return now
        types = self.registry.types()
        if types:
            skip = set(evaluator.backoff)
            marks = ", ".join("?" * len(types))
            floor = " AND next_fire_at > ?" if evaluator.blocked else ""
            params: list[Any] = [now] if evaluator.blocked else []
            rows = await fetch_all(
                self.conn,
                "SELECT id, next_fire_at FROM schedules WHERE enabled = 1 "
                f"AND next_fire_at IS NOT NULL{floor} AND trigger_type IN ({marks}) "
                "ORDER BY next_fire_at, id LIMIT ?",
                [*params, *types, len(skip) + 1],
            )
            for row in rows:
                if row["id"] not in skip:
                    target = min(target, float(row["next_fire_at"]))
                    break
            for until in evaluator.backoff.values():
                target = min(target, until)
        if self.settings.notify_template is not None and not self._delivering():
            due = await next_due_at(self.conn)
            if due is not None:
                target = min(target, float(due))
        return target

    def _delivering(self) -> bool:
        return self._delivery is not None and not self._delivery.done()

    # -- one tick ---------------------------------------------------------------------------
    async def tick_once(self) -> dict[str, Any]:
        """Run one tick's concerns in order; each one's failure is logged and isolated.

        Order (ADR-0070 D1): reapers, WAL checkpoint, dispatch delivery, worker pass,
        schedule evaluation. Returns what each concern reported.
        """
        conn = self.conn
        now = self.clock()
        report: dict[str, Any] = {}
        problem = self._dbfile.problem()
        if problem is not None:
            # Writes would go to a file no one can open again: tick nothing, say why.
            if problem != self._database_problem:
                logger.error("%s", problem)
            self._database_problem = problem
            self._last_tick_at = now
            self._last_tick_error = problem
            return {"database": problem}
        self._database_problem = None
        # Nothing advances while the storage refuses writes: probe it, tick once it heals.
        if self._storage.problem is not None and not await self._storage_writable(conn):
            self._last_tick_at = now
            self._last_tick_error = f"storage fault: {self._storage.problem}"
            return {"database": self._storage.problem}
        errors: list[str] = []
        for name, concern in (
            ("reapers", self._reap),
            ("checkpoint", self._checkpoint),
            ("dispatch", self._dispatch),
            ("worker", self._work),
            ("schedules", self._evaluate),
        ):
            try:
                report[name] = await concern(now)
            except Exception as exc:
                problem = self._storage.failed(exc)
                if problem is None:
                    logger.exception("scheduler concern %r failed", name)
                errors.append(f"{name}: {problem or type(exc).__name__}: {exc}")
        fault = self._storage.problem  # met by this tick, or by a terminal write meanwhile
        if fault is not None and not any(fault in error for error in errors):
            errors.append(f"storage fault: {fault}")
        self._last_tick_at = now
        self._last_tick_error = "; ".join(errors) or None
        try:
            self._due_backlog = int(
                await fetch_value(
                    conn,
                    "SELECT COUNT(*) FROM schedules WHERE enabled = 1 AND next_fire_at <= ?",
                    (now,),
                )
                or 0
            )
            if self._backlog_at is None or now - self._backlog_at >= _BACKLOG_EVERY:
                # dispatch_backlog groups the whole outbox by status: not on every tick.
                self._backlog_at = now
                backlog = await dispatch_backlog(conn, now=now)
                self._dispatch_backlog = int(backlog.get("due", 0))
        except Exception:
            logger.exception("reading the scheduler's backlog figures failed")
        return report

    async def _storage_writable(self, conn: aiosqlite.Connection) -> bool:
        """Write the header once (``user_version`` to its own value): has the fault healed?"""
        try:
            async with write_transaction(conn):
                version = int(await fetch_value(conn, "PRAGMA user_version") or 0)
                await conn.execute(f"PRAGMA user_version = {version}")
        except (sqlite3.Error, OSError) as exc:
            if self._storage.failed(exc) is None:
                logger.warning("storage probe failed: %s", exc)
            return False
        self._storage.succeeded()
        return True

    async def _reap(self, now: float) -> int | None:
        if (
            self._last_reap is not None
            and now - self._last_reap < self.settings.reaper_interval_seconds
        ):
            return None
        self._last_reap = now
        env, _, _, _ = self._parts()
        return await reap_stale(
            self.conn,
            now=now,
            deadline_seconds=self.settings.invocation_deadline_seconds,
            owned_runs=set(env.committed) | set(env.live),
        )

    async def _checkpoint(self, now: float) -> dict[str, Any] | None:
        last = self._last_checkpoint
        if last is not None and now - last < self.settings.checkpoint_interval_seconds:
            return None
        self._last_checkpoint = now
        return await checkpoint(self.db_path)

    async def _dispatch(self, now: float) -> str | None:
        if self._delivering():
            return "running"
        paused = self.settings.notify_template is None
        if (
            paused
            and self._last_delivery_start is not None
            and (now - self._last_delivery_start < self.settings.tick_seconds)
        ):
            return None
        due = await next_due_at(self.conn)
        if due is None or float(due) > now:
            return None
        self._last_delivery_start = now
        template = None if paused else list(self.settings.notify_template or ())
        self._delivery = asyncio.create_task(
            deliver_due_dispatches(self.conn, notify_template=template, clock=self.clock),
            name="studio-delivery",
        )
        self._delivery.add_done_callback(self._delivery_done)
        return "started"

    def _delivery_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("dispatch delivery pass failed: %s", exc)
        elif not self._stopping:
            self.wake()

    async def _work(self, now: float) -> None:
        await self._worker.run(self.conn, now=now)

    async def _evaluate(self, now: float) -> dict[str, int]:
        _, _, evaluator, _ = self._parts()
        return await evaluator.evaluate(now)

    # -- manual fire ------------------------------------------------------------------------
    async def fire_now(self, schedule_id: str) -> str:
        """Fire the schedule now; return the run id (the run row exists when this returns).

        Budget, max_runs and the global slot apply (overlap and threshold do not); a refusal
        raises :class:`FireRefused` with the gate's reason code and nothing is written.
        """
        env, admission, _, runner = self._parts()
        schedule = await load_schedule(self.conn, schedule_id)
        if schedule is None:
            raise ScheduleNotFound(schedule_id)
        now = self.clock()
        decision = await admission.admit(schedule, now=now, manual=True, path="manual")
        if decision.outcome != "fire" or decision.reservation is None:
            raise FireRefused(decision.reason_code, decision.message)
        reservation: Reservation = decision.reservation
        try:
            fire = prepare(env, schedule, {"manual": True, "fired_at": now}, kind="manual")
            reservation.run_id = fire.run_id
            won = await commit(env, fire, ScheduleClaim("manual", schedule_id))
        except BaseException:
            reservation.release()
            raise
        if not won:
            reservation.release()
            raise ScheduleNotFound(schedule_id)
        runner.start(fire, reservation)
        self.wake()
        return fire.run_id

    # -- introspection ----------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """Liveness and backlog figures (cheap: no database access).

        ``status`` is ``degraded`` while the loop is not running, the last tick had an error,
        or ``database_error`` names a problem: the database file was deleted or replaced, or
        a storage fault ("disk full", "read-only …", "disk I/O error" …) met by the tick or a
        terminal write, cleared once a write succeeds again.
        """
        admission = self._admission
        running = self._loop_task is not None and not self._loop_task.done()
        problem = self._database_problem or self._storage.problem
        degraded = not running or problem is not None or self._last_tick_error is not None
        return {
            "status": "degraded" if degraded else "ok",
            "running": running,
            "last_tick_at": self._last_tick_at,
            "last_tick_error": self._last_tick_error,
            "in_flight": 0 if admission is None else len(admission.slots),
            "due_backlog": self._due_backlog,
            "dispatch_backlog": self._dispatch_backlog,
            "delivery_paused": self.settings.notify_template is None,
            "database_error": problem,
            "global_cap": self.settings.max_scheduled_concurrent,
            "holders": [] if admission is None else admission.holders(),
        }

    def limits(self) -> dict[str, Any]:
        """The global cap, in-flight holders, and the ad-hoc pool's figures."""
        admission = self._admission
        return {
            "max_scheduled_concurrent": self.settings.max_scheduled_concurrent,
            "in_flight": 0 if admission is None else len(admission.slots),
            "holders": [] if admission is None else admission.holders(),
            "max_adhoc_concurrent": self.settings.max_adhoc_concurrent,
            "adhoc_in_flight": self._worker.in_flight(),
        }

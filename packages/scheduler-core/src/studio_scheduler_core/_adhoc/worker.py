"""The host task worker: the tick's fourth concern, a :class:`WorkerPass`.

Each pass first recovers rows abandoned by a dead worker, then claims queued ad-hoc rows,
oldest first, into free slots of its own pool (``max_adhoc_concurrent``; never a scheduled
slot), at most one running row per ``concurrency_key``. Each claim is guarded on its row: it
sets ``leased_by`` (this worker's ``host:pid:random`` id), ``lease_expires_at`` and
``lease_attempts + 1`` and inserts the invocation; one pass commits all of its claims in one
transaction, the candidate rows locked meanwhile (``batch``). Each claimed run is launched
through the same fire pipeline as a scheduled fire (reserve a slot → prepare → commit the
claim → release on failure → start; then execute / finish: same argv, cwd, environment,
outcome rules and session evidence) in a task of its own, while a watcher renews the lease
and stops the child if the row stops being this worker's (cancelled, or recovered by another).
A run's end claims into the slot it freed at once (a pass of its own), not at the next tick.

With ``scheduled_on_any_node`` the pass also claims the scheduled fires the leader queued
(up to ``max_scheduled_concurrent`` on this node; the leader's admission holds their global
slots), under the same lease, and runs each through the fire runner (``scheduled``).

The claim pass is in ``batch``, each row's claim in ``claim``, the lease watch in ``watch``,
recovery of rows abandoned by a dead worker and the lease itself in ``lease``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import aiosqlite

from studio_state import Clock, is_postgres, run_to_completion

from .._exceptions import InvalidSettings
from .._fire.dbfile import StorageHealth
from .._fire.env import FireEnv, Prepared
from .._fire.execute import execute
from .._fire.finish import finish
from .._fire.runner import FireRunner
from .._fire.target import child_db_value
from .._recovery.orphans import OrphanReaper
from .._settings import SchedulerSettings
from .batch import claim_batch
from .lease import (
    LEASE_SECONDS,
    MAX_LEASE_ATTEMPTS,
    RENEW_SECONDS,
    WATCH_SECONDS,
    new_worker_id,
    recover_abandoned,
    requeue_unstarted,
)
from .watch import LeaseWatch

logger = logging.getLogger("studio_scheduler_core")


class AdhocWorker:
    """The engine's :class:`~studio_scheduler_core.abc.WorkerPass` for ad-hoc queued runs."""

    def __init__(
        self,
        *,
        settings: SchedulerSettings,
        db_path: str,
        clock: Clock = time.time,
        wake: Callable[[], None] | None = None,
        worker_id: str | None = None,
        lease_seconds: float = LEASE_SECONDS,
        renew_seconds: float = RENEW_SECONDS,
        watch_seconds: float = WATCH_SECONDS,
        max_lease_attempts: int = MAX_LEASE_ATTEMPTS,
    ) -> None:
        if not 0 < renew_seconds < lease_seconds:
            raise InvalidSettings("renew_seconds", "must be > 0 and below lease_seconds")
        if not 0 < watch_seconds <= renew_seconds:
            raise InvalidSettings("watch_seconds", "must be > 0 and at most renew_seconds")
        if max_lease_attempts < 1:
            raise InvalidSettings("max_lease_attempts", "must be >= 1")
        self.settings = settings
        self.db_path = db_path
        self.clock = clock
        self.worker_id = worker_id or new_worker_id()
        self.lease_seconds = float(lease_seconds)
        self.renew_seconds = float(renew_seconds)
        self.watch_seconds = float(watch_seconds)
        self.max_lease_attempts = int(max_lease_attempts)
        self._wake = wake
        self._env: FireEnv | None = None
        self._stopping = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._open: dict[str, tuple[Prepared, int]] = {}
        self._revoked: set[str] = set()
        self._started: set[str] = set()
        """Runs whose execution began (a child may exist): never requeued by :meth:`stop`."""
        self.storage = StorageHealth()
        """Where terminal writes report a storage fault (the engine shares its own)."""
        self.node_id: str | None = None
        """The node whose runs these are (the engine sets its own), written on each run."""
        self.runner: FireRunner | None = None
        """Runs the scheduled fires this worker claims (``scheduled_on_any_node``; the engine
        sets its own): their ends, follow-ups and retries are the fire runner's."""
        self._refills: set[asyncio.Task[None]] = set()
        """Claim passes started by a run's end (:meth:`_refill`)."""
        self._claiming = asyncio.Lock()
        """One claim pass at a time (the tick's, or one a finished run starts)."""
        self._scheduled: set[str] = set()
        """Claimed scheduled fires not yet finished (bounded apart from the ad-hoc pool)."""
        self.reaper = OrphanReaper()
        """Terminates the orphans recovery finds, in the background (closed by :meth:`stop`)."""
        self._watch = LeaseWatch(
            db_path=db_path,
            clock=clock,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            renew_seconds=self.renew_seconds,
            watch_seconds=self.watch_seconds,
        )

    # -- WorkerPass -------------------------------------------------------------------------
    async def run(self, conn: aiosqlite.Connection, *, now: float) -> None:
        """Recover abandoned rows, then claim and launch queued rows into free slots."""
        self._bind(conn)
        if self._stopping:
            return
        try:
            await self.recover(conn, now=now)
        except Exception:
            logger.exception("ad-hoc lease recovery failed")
        for fire, attempt in await self.claim(conn, now=now):
            self.launch(fire, attempt)

    def attach(self, *, node_id: str, storage: StorageHealth, runner: FireRunner) -> None:
        """Join the engine: its runs are the engine's node's, its terminal writes report to
        the engine's storage health, the scheduled fires it claims run on its fire runner."""
        self.node_id = node_id
        self.storage = storage
        self.runner = runner

    async def stop(self) -> None:
        """Cancel every run this worker executes (children terminated, runs ``cancelled``).

        A claimed run whose child was never started goes back to ``queued``: a shutdown
        cancels only runs that are really running.
        """
        self._stopping = True
        if self._env is not None:
            self._env.closing = True  # a failing terminal write is left to recovery now
        tasks = [*self._refills, *self._tasks.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        env = self._env
        for fire, attempt in list(self._open.values()):
            fire.discard()
            if env is None:
                continue
            try:
                if fire.run_id not in self._started and await requeue_unstarted(
                    env.conn,
                    fire.run_id,
                    fire.invocation_id,
                    worker_id=self.worker_id,
                    attempt=attempt,
                    now=self.clock(),
                ):
                    continue
                await finish(
                    env,
                    fire,
                    status="cancelled",
                    reason_code="run.cancelled.shutdown",
                    summary="cancelled by scheduler shutdown before its child started",
                    exit_code=None,
                    error_detail=None,
                )
            except Exception:
                logger.exception("could not settle queued run %s at shutdown", fire.run_id)
        self._open.clear()
        self._scheduled.clear()
        self._started.clear()
        await self.reaper.close()
        await self._watch.close()

    def in_flight(self) -> int:
        """How many ad-hoc runs this worker has claimed and not yet finished."""
        return len(self._open) - len(self._scheduled)

    # -- steps ------------------------------------------------------------------------------
    def _bind(self, conn: aiosqlite.Connection) -> FireEnv:
        if self._env is None or self._env.conn is not conn:
            self._env = FireEnv(
                conn=conn,
                settings=self.settings,
                clock=self.clock,
                db_path=self.db_path,
                storage=self.storage,
                node_id=self.node_id,
            )
            self._stopping = False
        return self._env

    async def recover(self, conn: aiosqlite.Connection, *, now: float) -> dict[str, int]:
        """Requeue or fail running rows whose owner is gone; return counts per outcome."""
        return await recover_abandoned(
            conn,
            worker_id=self.worker_id,
            now=now,
            max_attempts=self.max_lease_attempts,
            reaper=self.reaper,
            # Children carry the URL on PostgreSQL (there is no file to read it from).
            db_path=child_db_value(self.db_path) if is_postgres(self.db_path) else None,
        )

    async def claim(self, conn: aiosqlite.Connection, *, now: float) -> list[tuple[Prepared, int]]:
        """Claim queued rows into free slots; return the ``(fire, lease attempt)`` to launch.

        One pass (:func:`~.batch.claim_batch`) fills every free slot in one transaction: each
        row goes through the fire pipeline (a slot reserved, the fire prepared from the
        stored action, its guarded claim committed, the slot released if its guard is lost)
        and the claimed fires are held open until they end. A row whose launch setup is
        refused (executable, cwd, action) is claimed straight to ``failed`` with the fire's
        setup reason code and is not returned. One pass runs at a time; a pass that lost a
        guard while slots stay free wakes the engine for another at once.
        """
        env = self._bind(conn)
        async with self._claiming:
            if self._stopping:
                return []
            # A pass whose commit lands as the tick is cancelled is still tracked: stop()
            # then puts its rows back in the queue instead of leaving them leased by a
            # worker that is gone.
            return await run_to_completion(self._claim_pass(env, now))

    async def _claim_pass(self, env: FireEnv, now: float) -> list[tuple[Prepared, int]]:
        adhoc_free = self.settings.max_adhoc_concurrent - self.in_flight()
        scheduled_free = 0
        if self.settings.scheduled_on_any_node and self.runner is not None:
            # The leader's admission bounds these across nodes; this bound only keeps one
            # node from taking every queued fire at once.
            scheduled_free = self.settings.max_scheduled_concurrent - len(self._scheduled)
        if adhoc_free <= 0 and scheduled_free <= 0:
            return []
        batch = await claim_batch(
            env,
            adhoc_free=adhoc_free,
            scheduled_free=scheduled_free,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            now=now,
        )
        launched: list[tuple[Prepared, int]] = []
        for claimed in batch.claimed:
            fire = claimed.fire
            if fire.setup_error is not None:
                if claimed.scheduled and self.runner is not None:
                    # Its end is a fire's end still: on_fail follow-up, retry pause, hook.
                    self.runner.start(fire, None)
                continue
            fire.run_guards = {"leased_by": self.worker_id, "lease_attempts": claimed.attempt}
            self._open[fire.run_id] = (fire, claimed.attempt)
            if claimed.scheduled:
                self._scheduled.add(fire.run_id)
            launched.append((fire, claimed.attempt))
        if batch.lost and self._wake is not None:
            self._wake()  # the rows another node took leave others for these slots
        return launched

    def _refill(self) -> None:
        """A slot freed: claim into it at once, in a task of its own (the rest of the tick
        follows the wake-up); with no bound connection yet, the tick's pass does it."""
        env = self._env
        if env is None or self._stopping:
            return
        task = asyncio.create_task(self._refill_pass(env), name="adhoc-refill")
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def _refill_pass(self, env: FireEnv) -> None:
        try:
            for fire, attempt in await self.claim(env.conn, now=self.clock()):
                self.launch(fire, attempt)
        except Exception:  # the tick's pass tries again
            logger.exception("claiming queued runs into a freed slot failed")

    # -- execution --------------------------------------------------------------------------
    def launch(self, fire: Prepared, attempt: int) -> None:
        """Execute a fire :meth:`claim` returned, in a task of its own (lease watched)."""
        task = asyncio.create_task(self._execute(fire, attempt), name=f"adhoc-{fire.run_id}")
        self._tasks[fire.run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(fire.run_id, None))

    async def _execute(self, fire: Prepared, attempt: int) -> None:
        env = self._env
        task = asyncio.current_task()
        assert env is not None and task is not None
        self._started.add(fire.run_id)
        watcher = asyncio.create_task(
            self._watch.watch(env, fire, attempt, task, self._revoke_once),
            name=f"adhoc-lease-{fire.run_id}",
        )
        try:
            if fire.run_id in self._scheduled and self.runner is not None:
                await self.runner.run_claimed(fire)
            else:
                await execute(env, fire)
        except asyncio.CancelledError:
            if fire.run_id not in self._revoked:
                raise
        except Exception:
            logger.exception("queued run %s failed unexpectedly", fire.run_id)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._open.pop(fire.run_id, None)
            self._scheduled.discard(fire.run_id)
            self._started.discard(fire.run_id)
            self._revoked.discard(fire.run_id)
            if not self._stopping:
                self._refill()
                if self._wake is not None:
                    self._wake()

    async def revoke(self, run_id: str) -> bool:
        """Stop the run's child at once if this worker executes it (its row already changed).

        Returns whether this worker owned the run; awaits the child's termination.
        """
        task = self._tasks.get(run_id)
        if task is None:
            opened = self._open.pop(run_id, None)
            self._scheduled.discard(run_id)
            if opened is not None:
                opened[0].discard()
            return opened is not None
        if self._revoke_once(run_id):
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    def _revoke_once(self, run_id: str) -> bool:
        """Mark the run revoked; whether it was not yet (its task is then cancelled once).

        Cancelling the task again while its child is in the SIGTERM grace would SIGKILL the
        child at once: the lease watch and an operator's cancel both revoke, only the first
        cancels.
        """
        if run_id in self._revoked:
            return False
        self._revoked.add(run_id)
        return True

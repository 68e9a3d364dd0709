"""The host task worker: the tick's fourth concern, a :class:`WorkerPass`.

Each pass first recovers rows abandoned by a dead worker, then claims queued ad-hoc rows,
oldest first, into free slots of its own pool (``max_adhoc_concurrent``; never a scheduled
slot), at most one running row per ``concurrency_key``. The claim is one guarded transaction
that sets ``leased_by`` (this worker's ``host:pid:random`` id), ``lease_expires_at`` and
``lease_attempts + 1`` and inserts the invocation. Each claimed run is launched through the
same fire path as a scheduled fire (prepare / execute / finish: same argv, cwd, environment,
outcome rules and session evidence) in a task of its own, while a watcher renews the lease and
stops the child if the row stops being this worker's (cancelled, or recovered by another).

Recovery of rows abandoned by a dead worker, and the lease itself, are in ``_lease``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiosqlite

from studio_state import Clock, fetch_all, open_connection, record_transitions, write_transaction

from .._dbfile import StorageHealth
from .._exceptions import InvalidSettings
from .._fire.steps import FireEnv, Prepared, execute, finish, prepare
from .._recovery.orphans import OrphanReaper
from .._rows import decode_run
from .._settings import SchedulerSettings
from .lease import (
    CLAIMED,
    LEASE_SECONDS,
    MAX_LEASE_ATTEMPTS,
    RENEW_SECONDS,
    WATCH_SECONDS,
    holds_lease,
    lease_transition,
    new_worker_id,
    recover_abandoned,
    renew_lease,
    requeue_unstarted,
)

logger = logging.getLogger("studio_scheduler_core")

_MAX_DETAIL = 2000
_CANDIDATES = (
    "SELECT q.* FROM schedule_runs q WHERE q.status = 'queued' AND +q.schedule_id IS NULL "
    "AND (q.concurrency_key IS NULL OR ("
    "NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.status = 'running' "
    "AND r.concurrency_key = q.concurrency_key) "
    "AND NOT EXISTS (SELECT 1 FROM schedule_runs o WHERE o.status = 'queued' "
    "AND o.concurrency_key = q.concurrency_key AND (o.queued_at < q.queued_at "
    "OR (o.queued_at = q.queued_at AND o.rowid < q.rowid))))) "
    "ORDER BY q.queued_at, q.rowid LIMIT ?"
)
_CLAIM = (
    "UPDATE schedule_runs SET status = ?, leased_by = ?, lease_expires_at = ?, "
    "lease_attempts = lease_attempts + 1, invocation_id = ?, fired_at = ?, updated_at = ?, "
    "ended_at = ?, error_detail = ?, child_pid = NULL, child_started_at = NULL, "
    "status_reason_code = ?, status_reason_summary = ?, status_evidence_refs = ? "
    "WHERE id = ? AND status = 'queued' AND lease_attempts = ? AND (concurrency_key IS NULL "
    "OR NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.status = 'running' "
    "AND r.concurrency_key = schedule_runs.concurrency_key))"
)
_INSERT_INVOCATION = (
    "INSERT INTO invocations (id, schedule_run_id, skill, status, prompt, started_at, ended_at, "
    "status_reason_code, status_reason_summary, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


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
        self.reaper = OrphanReaper()
        """Terminates the orphans recovery finds, in the background (closed by :meth:`stop`)."""
        self._reader: aiosqlite.Connection | None = None
        self._reader_lock = asyncio.Lock()

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

    async def stop(self) -> None:
        """Cancel every run this worker executes (children terminated, runs ``cancelled``).

        A claimed run whose child was never started goes back to ``queued``: a shutdown
        cancels only runs that are really running.
        """
        self._stopping = True
        if self._env is not None:
            self._env.closing = True  # a failing terminal write is left to recovery now
        tasks = list(self._tasks.values())
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
                logger.exception("could not settle ad-hoc run %s at shutdown", fire.run_id)
        self._open.clear()
        self._started.clear()
        await self.reaper.close()
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()

    def in_flight(self) -> int:
        """How many ad-hoc runs this worker has claimed and not yet finished."""
        return len(self._open)

    # -- steps ------------------------------------------------------------------------------
    def _bind(self, conn: aiosqlite.Connection) -> FireEnv:
        if self._env is None or self._env.conn is not conn:
            self._env = FireEnv(
                conn=conn,
                settings=self.settings,
                clock=self.clock,
                db_path=self.db_path,
                storage=self.storage,
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
        )

    async def claim(self, conn: aiosqlite.Connection, *, now: float) -> list[tuple[Prepared, int]]:
        """Claim queued rows into free slots; return the ``(fire, lease attempt)`` to launch.

        A row whose launch setup is refused (executable, cwd, action) is claimed straight to
        ``failed`` with the fire's setup reason code and is not returned.
        """
        env = self._bind(conn)
        free = self.settings.max_adhoc_concurrent - len(self._open)
        if self._stopping or free <= 0:
            return []
        rows = await fetch_all(conn, _CANDIDATES, (free,))
        if not rows:
            return []
        fires = []
        for row in rows:
            run = decode_run(row)
            action = run["action_args"] if isinstance(run["action_args"], Mapping) else {}
            action = {**action, "action_kind": action.get("action_kind", run["action_kind"])}
            context = run["trigger_context"] if isinstance(run["trigger_context"], Mapping) else {}
            fire = prepare(env, action, context, kind="adhoc", run_id=run["id"])
            fires.append((fire, run))
        claimed: list[tuple[Prepared, int]] = []
        try:
            async with write_transaction(conn):
                for fire, run in fires:
                    if await self._claim_one(conn, fire, run, now=now):
                        if fire.setup_error is None:
                            claimed.append((fire, int(run["lease_attempts"]) + 1))
                    else:
                        fire.discard()
        except BaseException:
            for fire, _ in fires:
                fire.discard()
            raise
        for fire, attempt in claimed:
            fire.run_guards = {"leased_by": self.worker_id, "lease_attempts": attempt}
            self._open[fire.run_id] = (fire, attempt)
        return claimed

    async def _claim_one(
        self, conn: aiosqlite.Connection, fire: Prepared, run: Mapping[str, Any], *, now: float
    ) -> bool:
        attempt = int(run["lease_attempts"]) + 1
        failed = fire.setup_error is not None
        status = "failed" if failed else "running"
        reason, summary = fire.setup_error or (CLAIMED, f"claimed by worker {self.worker_id}")
        expires = None if failed else now + self.lease_seconds
        inv_reason = reason if failed else "run.started.ok"
        # The invocation first: schedule_runs.invocation_id references it (not deferred).
        await conn.execute(
            _INSERT_INVOCATION,
            (
                fire.invocation_id,
                fire.run_id,
                f"adhoc:{run['action_kind']}",
                status,
                fire.prompt,
                now,
                now if failed else None,
                inv_reason,
                summary[-_MAX_DETAIL:] if failed else None,
                now,
                now,
            ),
        )
        cursor = await conn.execute(
            _CLAIM,
            (
                status,
                self.worker_id,
                expires,
                fire.invocation_id,
                now,
                now,
                now if failed else None,
                summary[-_MAX_DETAIL:] if failed else None,
                reason,
                summary[-_MAX_DETAIL:],
                f'[{{"kind":"invocation","id":"{fire.invocation_id}"}}]',
                fire.run_id,
                run["lease_attempts"],
            ),
        )
        won = cursor.rowcount == 1
        await cursor.close()
        if not won:
            await conn.execute("DELETE FROM invocations WHERE id = ?", (fire.invocation_id,))
            return False
        meta = {
            "worker_id": self.worker_id,
            "lease_attempt": attempt,
            "lease_expires_at": expires,
            "argv": fire.argv,
        }
        refs = [{"kind": "invocation", "id": fire.invocation_id}]
        await record_transitions(
            conn,
            [
                lease_transition(
                    "schedule_run",
                    fire.run_id,
                    "queued",
                    status,
                    reason,
                    summary,
                    now,
                    actor="adhoc_worker",
                    metadata=meta,
                    refs=refs,
                ),
                lease_transition(
                    "invocation",
                    fire.invocation_id,
                    None,
                    status,
                    inv_reason,
                    summary,
                    now,
                    actor="adhoc_worker",
                    refs=[{"kind": "schedule_run", "id": fire.run_id}],
                ),
            ],
        )
        return True

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
            self._watch(env, fire, attempt, task), name=f"adhoc-lease-{fire.run_id}"
        )
        try:
            await execute(env, fire)
        except asyncio.CancelledError:
            if fire.run_id not in self._revoked:
                raise
        except Exception:
            logger.exception("ad-hoc run %s failed unexpectedly", fire.run_id)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._open.pop(fire.run_id, None)
            self._started.discard(fire.run_id)
            self._revoked.discard(fire.run_id)
            if self._wake is not None and not self._stopping:
                self._wake()

    async def _watch(
        self, env: FireEnv, fire: Prepared, attempt: int, task: asyncio.Task[Any]
    ) -> None:
        """Renew the lease every ``renew_seconds``; stop the run once the row is not ours."""
        last_renewal = self.clock()
        while True:
            await asyncio.sleep(self.watch_seconds)
            now = self.clock()
            try:
                if now - last_renewal >= self.renew_seconds:
                    ours = await renew_lease(
                        env.conn,
                        fire.run_id,
                        worker_id=self.worker_id,
                        attempt=attempt,
                        expires_at=now + self.lease_seconds,
                    )
                    last_renewal = now
                else:
                    ours = await holds_lease(
                        await self._ownership_reader(),
                        fire.run_id,
                        worker_id=self.worker_id,
                        attempt=attempt,
                    )
            except Exception:
                logger.exception("lease check of ad-hoc run %s failed", fire.run_id)
                continue
            if not ours:
                logger.info("ad-hoc run %s is no longer this worker's: stopping it", fire.run_id)
                self._revoked.add(fire.run_id)
                task.cancel()
                return

    async def _ownership_reader(self) -> aiosqlite.Connection:
        """A query-only connection of its own for "is this row still ours" reads.

        The engine's connection is shared by every task: a read there sees another task's
        open transaction, e.g. this run's own uncommitted terminal write, and would cancel the
        run mid-commit (the terminal write then rolls back and the run stays ``running``). A
        separate connection sees committed rows only.
        """
        async with self._reader_lock:
            if self._reader is None:
                reader = await open_connection(self.db_path)
                try:
                    await reader.execute("PRAGMA query_only = ON")
                except BaseException:
                    await reader.close()
                    raise
                self._reader = reader
            return self._reader

    async def revoke(self, run_id: str) -> bool:
        """Stop the run's child at once if this worker executes it (its row already changed).

        Returns whether this worker owned the run; awaits the child's termination.
        """
        task = self._tasks.get(run_id)
        if task is None:
            opened = self._open.pop(run_id, None)
            if opened is not None:
                opened[0].discard()
            return opened is not None
        self._revoked.add(run_id)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

"""Retention: delete terminal runs, dispatches and audit rows older than their windows.

Each batch is one write transaction run in a single trip to the writer's thread. Its size
follows what the previous batch of the same table cost, timed on that thread from just after
``BEGIN`` to the last statement (waiting for the lock, the trip and the event loop are not
in it, so a busy engine does not make batches shrink for nothing): it starts small, grows
while batches stay well under :data:`TARGET_HOLD`, and halves at least on an overshoot, so no
batch holds the writer much longer than the target (the bound is ~50 ms; the target leaves
room for the thread being descheduled on a loaded machine).
Commits are where the writer stalls: an auto-checkpoint that lands in a batch's commit copies
and syncs up to a thousand pages while the write lock is held. So during a pass the engine
connection's auto-checkpoint is off, and the pass runs a ``PASSIVE`` checkpoint between
batches (every :data:`CHECKPOINT_ROWS` rows, and when it ends) on a connection of its own,
which takes no write lock.
Each batch also commits at ``synchronous=NORMAL`` (the engine connection stays ``FULL`` for
everything else): its commit then does not wait on a WAL fsync while holding the writer. A
batch lost to power failure costs nothing: the rows it deleted are back, still old and
terminal, and the next pass deletes them again; it becomes durable at the next ``FULL`` commit
or checkpoint anyway.
Rows are visited in ``rowid`` order (insertion order, so oldest first; on PostgreSQL an identity
column of that name) and a walk stops at the first row newer than its cut-off, so a pass
reads only what it deletes plus one batch (and the rows it keeps: dead letters younger than
their window but older than the dispatches', transitions of entities that still exist older
than the audit window).

A run is deleted with its invocations, their sessions, the transition rows of all of them,
and its log file ``runs/<run_id>.log`` beside the database; what it counted toward its
schedule's ``max_runs`` and budgets goes into the schedule's carried totals in the same
transaction (:func:`.store.fold_pruned_runs_sync`), so the gates count it still.
A run that is the chain parent of a run still live (queued or running), or the attempt a live
run retries (``retry_of``: a planned ``retry_wait`` or a running retry), is kept until that
run ends.
With an archive directory, each batch first reads the rows it is about to delete (no write
lock held: a read on the engine connection), writes them to a verified archive
(:mod:`.archive`), and only then deletes, in a write transaction that reads the same rows again
and deletes only the entities whose rows are exactly those archived (an entity that changed in
between stays, and is archived again when it goes). An archive that cannot be written deletes
nothing: the pass stops, its report names the cause, and the next pass tries again.

Windows: runs (``retention_days``), ``delivered``/``acked`` dispatches, dead letters
(``dead_letter``/``expired``) and audit rows each have their own (see :mod:`.retention_rows`
for what an audit row is); 0 keeps that kind forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiosqlite

from studio_state import backend_of, run_sync, run_write_transaction

from .._observe.events import emit
from .archive import ArchiveError
from .retention_batch import archived_batch, plain_batch
from .retention_counters import prune_counters
from .retention_rows import (
    LIVE_RUN,
    TERMINAL_DISPATCH,
    TERMINAL_RUN,
    keep_live_parents,
    walks,
)

logger = logging.getLogger("studio_scheduler_core")

TARGET_HOLD = 0.010
"""Seconds a batch aims to hold the writer."""
MIN_BATCH = 10
MAX_BATCH = 5000
FIRST_BATCH = 50
MAX_GAP = 0.1
"""Longest pause between batches (seconds)."""
CHECKPOINT_ROWS = 1000
"""Rows deleted between two passive checkpoints (and one when the pass ends): a few hundred
pages of WAL, and a pass over a few rows is not slowed by a sync per batch."""

__all__ = ["LIVE_RUN", "TERMINAL_DISPATCH", "TERMINAL_RUN", "RetentionReport", "retention_pass"]
_keep_live_parents = keep_live_parents  # the name tests of the live-run check use


@dataclass
class RetentionReport:
    """What one pass deleted and how long each of its batches held the writer."""

    runs: int = 0
    dispatches: int = 0
    audit_rows: int = 0
    log_files: int = 0
    counters: int = 0
    """Counter rows deleted: hour and day buckets past the 7-day reads, health rows of
    deleted schedules."""
    archives: list[str] = field(default_factory=list)
    """The manifests this pass wrote (file names in the archive directory)."""
    archive_error: str | None = None
    """Why the pass's archive failed (names the directory and the cause); nothing of that
    batch, nor after it, was deleted."""
    holds: list[float] = field(default_factory=list)
    """Each batch's time inside its transaction (its statements, on the writer's thread)."""
    sizes: list[int] = field(default_factory=list)
    """Each batch's size: how many rows it visited at most."""
    done: bool = True
    """False when the pass stopped at its time budget with old rows left."""


class BatchSizer:
    """How many rows the next batch of one table visits, from what the last one cost.

    It starts at ``first``; a batch that held the writer more than ``target`` makes the next
    one at most half as large (smaller still if the cost per row says so); one under half the
    target makes the next one larger, by at most half, toward the size the cost per row says
    fits the target; in between, the size stays. Always within ``[low, high]``.
    """

    def __init__(
        self,
        target: float = TARGET_HOLD,
        *,
        first: int = FIRST_BATCH,
        low: int = MIN_BATCH,
        high: int = MAX_BATCH,
    ) -> None:
        self.target = target
        self.low = low
        self.high = high
        self.size = max(low, min(high, first))

    def measured(self, held: float) -> int:
        """Record that a batch of :attr:`size` rows held the writer ``held`` seconds; return
        the next batch's size."""
        fits = self.size * self.target / held if held > 0 else float(self.high)
        if held > self.target:
            size = min(self.size // 2, int(fits))
        elif held < self.target / 2:
            size = max(self.size + 1, min(int(self.size * 1.5), int(fits)))
        else:
            size = self.size
        self.size = max(self.low, min(self.high, size))
        return self.size


def _unlink_logs(runs_dir: Path, ids: Sequence[str]) -> int:
    removed = 0
    for run_id in ids:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(runs_dir / f"{run_id}.log")
            removed += 1
    return removed


async def _database_file(conn: aiosqlite.Connection) -> str | None:
    if backend_of(conn) == "postgresql":
        return None  # no file, no WAL of Studio's to checkpoint

    def fn(db: sqlite3.Connection) -> str | None:
        for row in db.execute("PRAGMA database_list").fetchall():
            _, name, file = tuple(row.values()) if isinstance(row, dict) else tuple(row)
            if name == "main":
                return str(file) or None  # "" for an in-memory or temporary database
        return None

    return await run_sync(conn, fn)


class _Checkpointer:
    """Checkpoints the WAL between batches, on a connection of its own in a worker thread.

    A ``PASSIVE`` checkpoint takes no write lock: the engine's writers go on while it copies
    pages and syncs the files. While the pass runs, the engine connection's auto-checkpoint is
    off, so no batch's commit runs a checkpoint (and its syncs) while holding the writer.
    """

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None

    def _run(self) -> None:
        if self._db is None:
            assert self._path is not None
            self._db = sqlite3.connect(
                self._path, timeout=0, isolation_level=None, check_same_thread=False
            )
        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    async def checkpoint(self) -> None:
        if self._path is None:
            return
        try:
            await asyncio.to_thread(self._run)
        except sqlite3.Error as exc:  # busy or unavailable: the next batch (or pass) retries
            logger.debug("retention: passive checkpoint skipped (%s)", exc)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


async def _set_autocheckpoint(conn: aiosqlite.Connection, pages: int | None) -> int:
    """Set the connection's ``wal_autocheckpoint`` (``None``: leave it); return the old value.
    PostgreSQL has no WAL checkpoint of Studio's to hold off: nothing is set there."""
    if backend_of(conn) == "postgresql":
        return 0

    def fn(db: sqlite3.Connection) -> int:
        row = db.execute("PRAGMA wal_autocheckpoint").fetchone()
        old = int(row["wal_autocheckpoint"] if isinstance(row, dict) else row[0])
        if pages is not None:
            db.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")
        return old

    return await run_sync(conn, fn)


async def retention_pass(
    conn: aiosqlite.Connection,
    *,
    now: float,
    retention_days: float,
    runs_dir: str | Path,
    time_budget: float = 1.0,
    timer: Callable[[], float] = time.perf_counter,
    dispatch_retention_days: float | None = None,
    dead_letter_retention_days: float | None = None,
    audit_retention_days: float = 0.0,
    archive_dir: str | Path | None = None,
    log_bytes: int = 1024 * 1024,
) -> RetentionReport:
    """Delete terminal runs, dispatches and audit rows older than their windows.

    ``retention_days`` is the runs' window; ``dispatch_retention_days`` that of ``delivered``
    and ``acked`` dispatches and ``dead_letter_retention_days`` that of ``dead_letter`` and
    ``expired`` ones (``None``: ``retention_days``); ``audit_retention_days`` that of audit
    rows whose entity is gone. 0 keeps that kind forever. With ``archive_dir``, each batch's
    rows (a run's stored log up to its last ``log_bytes``) are written to a verified archive
    first; a failed archive deletes nothing, sets ``archive_error`` and ends the pass (the
    ``retention_archive_failed`` event).

    Batches are sized (:class:`BatchSizer`, per table) so each holds the writer about
    :data:`TARGET_HOLD` at most, timed with ``timer`` on the writer's thread; the pass yields
    to other tasks between batches and stops after ``time_budget`` seconds (``done`` is then
    false; the next pass continues). While the pass runs, ``conn``'s WAL auto-checkpoint is
    off and the pass checkpoints ``PASSIVE`` between batches on a connection of its own (no
    write lock held); the setting is restored after.
    """
    report = RetentionReport()
    report.counters = await prune_counters(conn, now=now)
    plan = walks(
        now,
        runs_days=retention_days,
        done_days=retention_days if dispatch_retention_days is None else dispatch_retention_days,
        dead_days=(
            retention_days if dead_letter_retention_days is None else dead_letter_retention_days
        ),
        audit_days=audit_retention_days,
    )
    if not plan:
        return report
    logs = Path(runs_dir)
    started = timer()
    checkpointer = _Checkpointer(await _database_file(conn))
    autocheckpoint = await _set_autocheckpoint(conn, 0)
    unsynced = 0  # rows deleted since the last checkpoint
    try:
        for walk in plan:
            after, sizer = 0, BatchSizer()
            while True:
                if timer() - started > time_budget:
                    report.done = False
                    return report
                size = sizer.size
                if archive_dir is None:
                    # NORMAL: a deletion lost on power failure is redone by the next pass,
                    # so the batch need not hold the writer through an fsync.
                    after, ids, end, held = await run_write_transaction(
                        conn, plain_batch(walk, after, size, timer), synchronous="normal"
                    )
                else:
                    after, ids, end, held, manifest = await archived_batch(
                        conn, walk, after, size, timer, archive_dir, logs, log_bytes, now
                    )
                    if manifest is not None:
                        report.archives.append(manifest)
                report.holds.append(held)
                report.sizes.append(size)
                setattr(
                    report, _COUNTER[walk.kind], getattr(report, _COUNTER[walk.kind]) + len(ids)
                )
                if walk.kind == "runs" and ids:
                    report.log_files += await asyncio.to_thread(_unlink_logs, logs, ids)
                unsynced += len(ids)
                if unsynced >= CHECKPOINT_ROWS:
                    unsynced = 0
                    await checkpointer.checkpoint()
                if end:
                    break
                sizer.measured(held)
                # Leave the lock free about as long as the batch held it: a writer in another
                # process waits in SQLite's busy handler, which retries at fixed sleeps and
                # never got in while batches followed each other at once.
                await asyncio.sleep(min(max(held, TARGET_HOLD), MAX_GAP))
        return report
    except ArchiveError as exc:
        report.archive_error = str(exc)
        report.done = False
        emit(
            "retention_archive_failed",
            f"retention: {exc}; nothing deleted, the next pass retries",
            level=logging.WARNING,
            archive_dir=str(archive_dir),
            error=str(exc),
        )
        return report
    finally:
        if unsynced:
            await checkpointer.checkpoint()
        try:
            await asyncio.shield(_set_autocheckpoint(conn, autocheckpoint))
        except Exception as exc:  # the connection is closing: nothing left to restore
            logger.debug("retention: wal_autocheckpoint not restored (%s)", exc)
        await asyncio.to_thread(checkpointer.close)


_COUNTER = {"runs": "runs", "dispatches": "dispatches", "audit": "audit_rows"}

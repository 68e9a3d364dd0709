"""Retention: delete terminal runs and dispatches older than the retention window.

Each batch is one write transaction run in a single trip to the writer's thread, and its
size follows the time the previous batch held the writer, so no batch holds it much longer
than :data:`TARGET_HOLD` (the bound is ~50 ms; the target leaves room for a slow disk).
Rows are visited in ``rowid`` order (insertion order, so oldest first) and a pass stops at
the first row newer than the cut-off, so a pass reads only what it deletes plus one batch.

A run is deleted with its invocations, their sessions, the transition rows of all of them,
and its log file ``runs/<run_id>.log`` beside the database. A run that is the chain parent
of a run still live (queued or running) is kept until that run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from studio_state import run_write_transaction

TARGET_HOLD = 0.015
"""Seconds a batch aims to hold the writer."""
MIN_BATCH = 10
MAX_BATCH = 5000
FIRST_BATCH = 50

TERMINAL_RUN = ("completed", "failed", "timed_out", "cancelled", "skipped")
LIVE_RUN = ("queued", "waiting_dependency", "running", "retry_wait")
TERMINAL_DISPATCH = ("delivered", "acked", "dead_letter", "expired")


@dataclass
class RetentionReport:
    """What one pass deleted and how long each of its batches held the writer."""

    runs: int = 0
    dispatches: int = 0
    log_files: int = 0
    holds: list[float] = field(default_factory=list)
    done: bool = True
    """False when the pass stopped at its time budget with old rows left."""


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _run_batch(
    after: int, size: int, cutoff: float
) -> Callable[[sqlite3.Connection], tuple[int, list[str], bool]]:
    """Delete up to ``size`` old terminal runs after ``rowid``; return (last rowid, ids, end)."""

    def fn(db: sqlite3.Connection) -> tuple[int, list[str], bool]:
        rows = db.execute(
            "SELECT rowid AS r, id, status, created_at, COALESCE(ended_at, created_at) AS t "
            "FROM schedule_runs WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, size),
        ).fetchall()
        last, ids, end = after, [], len(rows) < size
        for row in rows:
            if float(row["created_at"]) >= cutoff:
                end = True
                break
            last = int(row["r"])
            if row["status"] in TERMINAL_RUN and float(row["t"]) < cutoff:
                ids.append(str(row["id"]))
        if ids:
            live = db.execute(
                f"SELECT DISTINCT chain_parent_id AS p FROM schedule_runs "
                f"WHERE chain_parent_id IN ({_marks(ids)}) AND status IN ({_marks(LIVE_RUN)})",
                (*ids, *LIVE_RUN),
            ).fetchall()
            keep = {str(row["p"]) for row in live}
            ids = [i for i in ids if i not in keep]
        if ids:
            marks = _marks(ids)
            invs = [
                str(row["id"])
                for row in db.execute(
                    f"SELECT id FROM invocations WHERE schedule_run_id IN ({marks})", ids
                ).fetchall()
            ]
            if invs:
                inv_marks = _marks(invs)
                db.execute(f"DELETE FROM sessions WHERE invocation_id IN ({inv_marks})", invs)
                db.execute(
                    "DELETE FROM status_transitions WHERE entity_type = 'invocation' "
                    f"AND entity_id IN ({inv_marks})",
                    invs,
                )
            db.execute(f"DELETE FROM schedule_runs WHERE id IN ({marks})", ids)
            if invs:
                db.execute(f"DELETE FROM invocations WHERE id IN ({_marks(invs)})", invs)
            db.execute(
                "DELETE FROM status_transitions WHERE entity_type = 'schedule_run' "
                f"AND entity_id IN ({marks})",
                ids,
            )
        return last, ids, end

    return fn


def _dispatch_batch(
    after: int, size: int, cutoff: float
) -> Callable[[sqlite3.Connection], tuple[int, list[str], bool]]:
    """Delete up to ``size`` old terminal dispatches after ``rowid`` with their transitions."""

    def fn(db: sqlite3.Connection) -> tuple[int, list[str], bool]:
        rows = db.execute(
            "SELECT rowid AS r, id, status, created_at, COALESCE(updated_at, created_at) AS t "
            "FROM dispatch_outbox WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, size),
        ).fetchall()
        last, ids, end = after, [], len(rows) < size
        for row in rows:
            if float(row["created_at"]) >= cutoff:
                end = True
                break
            last = int(row["r"])
            if row["status"] in TERMINAL_DISPATCH and float(row["t"]) < cutoff:
                ids.append(str(row["id"]))
        if ids:
            marks = _marks(ids)
            db.execute(f"DELETE FROM dispatch_outbox WHERE id IN ({marks})", ids)
            db.execute(
                "DELETE FROM status_transitions WHERE entity_type = 'dispatch' "
                f"AND entity_id IN ({marks})",
                ids,
            )
        return last, ids, end

    return fn


def _unlink_logs(runs_dir: Path, ids: Sequence[str]) -> int:
    removed = 0
    for run_id in ids:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(runs_dir / f"{run_id}.log")
            removed += 1
    return removed


async def retention_pass(
    conn: aiosqlite.Connection,
    *,
    now: float,
    retention_days: float,
    runs_dir: str | Path,
    time_budget: float = 1.0,
    timer: Callable[[], float] = time.perf_counter,
) -> RetentionReport:
    """Delete terminal runs and dispatches that ended more than ``retention_days`` ago.

    ``retention_days`` 0 keeps everything. Batches are sized so each holds the writer about
    :data:`TARGET_HOLD`; the pass yields to other tasks between batches and stops after
    ``time_budget`` seconds (``done`` is then false; the next pass continues).
    """
    report = RetentionReport()
    if retention_days <= 0:
        return report
    cutoff = now - retention_days * 86400.0
    logs = Path(runs_dir)
    started = timer()
    for table, make in (("runs", _run_batch), ("dispatches", _dispatch_batch)):
        after, size = 0, FIRST_BATCH
        while True:
            if timer() - started > time_budget:
                report.done = False
                return report
            begun = timer()
            after, ids, end = await run_write_transaction(conn, make(after, size, cutoff))
            held = timer() - begun
            report.holds.append(held)
            if table == "runs":
                report.runs += len(ids)
                if ids:
                    report.log_files += await asyncio.to_thread(_unlink_logs, logs, ids)
            else:
                report.dispatches += len(ids)
            if end:
                break
            scale = TARGET_HOLD / held if held > 0 else 1.5
            size = max(MIN_BATCH, min(MAX_BATCH, int(size * min(1.5, max(0.25, scale)))))
            await asyncio.sleep(0)
    return report

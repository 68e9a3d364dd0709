"""One retention batch with an archive: read the rows, archive them, delete them guarded.

The read holds no write lock (it is a read on the engine connection); the delete is one write
transaction that reads the rows again and deletes only the entities whose rows are exactly
those archived, so nothing is deleted that the archive does not hold.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import aiosqlite

from studio_state import backend_of, run_sync, run_write_transaction

from .._fire.store import stored_run_logs_sync
from .archive import ArchiveLine, write_archive
from .retention_rows import Snapshot, Walk


def log_lines(runs_dir: Path, ids: Sequence[str], limit: int) -> list[ArchiveLine]:
    """Each run's stored log, its last ``limit`` bytes at most (a run log is bounded so)."""
    lines = []
    for run_id in ids:
        path = runs_dir / f"{run_id}.log"
        try:
            with open(path, "rb") as src:
                size = os.fstat(src.fileno()).st_size
                src.seek(max(0, size - limit))
                data = src.read(limit)
        except FileNotFoundError:
            continue
        lines.append(_log_line(run_id, data, size))
    return lines


def _log_line(run_id: str, data: bytes, size: int) -> ArchiveLine:
    try:
        content, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        content, encoding = base64.b64encode(data).decode("ascii"), "base64"
    row = {"run_id": run_id, "bytes": size, "truncated": size > len(data)}
    return ArchiveLine("run_log", {**row, "encoding": encoding, "content": content})


async def run_log_lines(
    conn: aiosqlite.Connection, runs_dir: Path, ids: Sequence[str], limit: int
) -> list[ArchiveLine]:
    """Each run's log: this node's file, else (PostgreSQL) the copy stored in the database
    when the run ended, which goes with the run when it is deleted."""
    lines = await asyncio.to_thread(log_lines, runs_dir, ids, limit)
    found = {line.row["run_id"] for line in lines}
    missing = [run_id for run_id in ids if run_id not in found]
    if missing and backend_of(conn) == "postgresql":
        stored = await run_sync(conn, lambda db: stored_run_logs_sync(db, missing))
        lines += [_log_line(run_id, data, len(data)) for run_id, data in stored.items()]
    return lines


def guarded_delete(
    walk: Walk, archived: Snapshot, timer: Callable[[], float]
) -> Callable[[sqlite3.Connection], tuple[list[str], float]]:
    """Delete the archived entities whose rows are still exactly those archived."""

    def fn(db: sqlite3.Connection) -> tuple[list[str], float]:
        begun = timer()
        now = walk.snapshot(db, list(archived))
        ids = [i for i, lines in archived.items() if lines and now.get(i) == lines]
        if ids and walk.keep is not None:
            ids = walk.keep(db, ids)
        if ids:
            walk.delete(db, ids)
        return ids, timer() - begun

    return fn


def plain_batch(
    walk: Walk, after: int, size: int, timer: Callable[[], float]
) -> Callable[[sqlite3.Connection], tuple[int, list[str], bool, float]]:
    """Pick and delete up to ``size`` rows after ``rowid`` in one transaction (no archive):
    (last rowid visited, ids deleted, end of the walk, seconds the statements took)."""

    def fn(db: sqlite3.Connection) -> tuple[int, list[str], bool, float]:
        begun = timer()
        last, ids, end = walk.pick(db, after, size)
        if ids:
            walk.delete(db, ids)
        return last, ids, end, timer() - begun

    return fn


async def archived_batch(
    conn: aiosqlite.Connection,
    walk: Walk,
    after: int,
    size: int,
    timer: Callable[[], float],
    archive_dir: str | Path,
    logs: Path,
    log_bytes: int,
    now: float,
) -> tuple[int, list[str], bool, float, str | None]:
    """Pick a batch (a read), archive its rows, then delete them guarded; (last rowid
    visited, ids deleted, end of the walk, seconds the delete held the writer, manifest)."""

    def read(db: sqlite3.Connection) -> tuple[int, bool, Snapshot]:
        last, ids, end = walk.pick(db, after, size)
        return last, end, (walk.snapshot(db, ids) if ids else {})

    last, end, rows = await run_sync(conn, read)
    if not rows:
        return last, [], end, 0.0, None
    lines = [line for group in rows.values() for line in group]
    if walk.kind == "runs":
        lines += await run_log_lines(conn, logs, list(rows), log_bytes)
    manifest = await asyncio.to_thread(write_archive, archive_dir, walk.kind, lines, now=now)
    ids, held = await run_write_transaction(
        conn, guarded_delete(walk, rows, timer), synchronous="normal"
    )
    return last, ids, end, held, str(manifest["file"]).removesuffix(".jsonl.gz") + ".manifest.json"

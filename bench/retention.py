"""Retention figures: how long each batch holds the write lock, and what retention bounds.

1. A retention pass over ROWS terminal rows (runs with their invocation and two transition
   rows each, and dispatches with one transition row each; all older than the window; random
   ids as ``new_id()`` makes): each batch's hold of the write lock, timed on the connection's
   thread (``BEGIN IMMEDIATE`` returned → ``COMMIT`` returned), per table and per statement,
   the commit, the thread's CPU time, and whether the commit restarted the WAL; medians with
   min–max, p99 and max. Beside the pass, how long other writers wait: a one-row write
   transaction every 10 ms on the same connection (any other writer of the engine), one every
   10 ms on a connection of its own in a thread (another process, e.g. `studio dispatch`),
   and the anchor: a bare 4 KiB write + fsync every 10 ms on the same disk (the disk's own
   tail, which any durable commit pays). Variants (``--variants``) run on identical copies of
   the rows: ``after`` (the code as it is), ``dispatches`` (the dispatch table alone),
   ``scan`` (without the ``retry_of`` index), ``before``/``full`` (older checkpoint and
   durability behaviour). Target: the writer never blocked > 50 ms per batch.
2. Database and `runs/` size after N fires of a `true` command through the real engine (a
   manual clock stepping one hour per tick, 20 interval schedules), with retention on (1 day)
   and off. Each run gets a 4 KiB `runs/<run_id>.log` written beside it by this script,
   standing in for the launcher's run log.

    python bench/retention.py [--rows 1000000] [--fires 2000] [--variants after]
                              [--budget SECONDS] [--db-cache PATH] [--no-steady]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from studio_scheduler_core import SchedulerEngine, SchedulerSettings, ensure_schema
from studio_scheduler_core._recovery import retention
from studio_scheduler_core._recovery.retention import retention_pass
from studio_state import ManualClock, open_connection, run_write_transaction

DAY = 86400.0
T0 = 1_700_000_000.0


def _populate(path: Path, rows: int) -> tuple[int, int]:
    """Write ``rows`` terminal rows: 60% runs (+ invocation, 2 transitions), 40% dispatches.

    Ids are random 12-hex-digit strings like ``new_id()``'s, so a batch's deletions land all
    over each id index (as in a real database), not on a few neighbouring pages."""
    runs = rows * 6 // 10
    dispatches = rows - runs
    rng = random.Random(17)

    def ids(n: int) -> list[str]:
        return [f"{rng.getrandbits(48):012x}" for _ in range(n)]

    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous = OFF")
    chunk = 20_000
    t = T0
    for start in range(0, runs, chunk):
        n = min(chunk, runs - start)
        run_ids, inv_ids, tr_ids = ids(n), ids(n), ids(2 * n)
        db.executemany(
            "INSERT INTO invocations (id, schedule_run_id, skill, status, started_at, ended_at, "
            "created_at, updated_at) VALUES (?, ?, 'command', 'completed', ?, ?, ?, ?)",
            [(inv_ids[i], run_ids[i], t, t, t, t) for i in range(n)],
        )
        db.executemany(
            "INSERT INTO schedule_runs (id, invocation_id, trigger_context, action_kind, "
            "action_args, status, exit_code, fired_at, ended_at, created_at, updated_at, "
            "status_reason_code) VALUES (?, ?, '{\"scheduled\": true}', 'command', "
            "'[\"true\"]', 'completed', 0, ?, ?, ?, ?, 'run.completed.ok')",
            [(run_ids[i], inv_ids[i], t, t, t, t) for i in range(n)],
        )
        db.executemany(
            "INSERT INTO status_transitions (id, entity_type, entity_id, status, reason_code, "
            "actor, created_at) VALUES (?, 'schedule_run', ?, ?, 'x', 'scheduler', ?)",
            [
                (tr_ids[2 * i + k], run_ids[i], status, t)
                for i in range(n)
                for k, status in enumerate(("running", "completed"))
            ],
        )
        db.commit()
    for start in range(0, dispatches, chunk):
        n = min(chunk, dispatches - start)
        dispatch_ids, tr_ids = ids(n), ids(n)
        db.executemany(
            "INSERT INTO dispatch_outbox (id, kind, deliver_to, payload, status, attempt, "
            "next_attempt_at, created_at, updated_at) VALUES (?, 'run.failed', 'ops', '{}', "
            "'delivered', 1, ?, ?, ?)",
            [(dispatch_ids[i], t, t, t) for i in range(n)],
        )
        db.executemany(
            "INSERT INTO status_transitions (id, entity_type, entity_id, status, reason_code, "
            "actor, created_at) VALUES (?, 'dispatch', ?, 'delivered', 'x', 'outbox', ?)",
            [(tr_ids[i], dispatch_ids[i], t) for i in range(n)],
        )
        db.commit()
    db.close()
    return runs, dispatches


def _probe_row(db: sqlite3.Connection, *, at: float) -> None:
    db.execute("INSERT INTO bench_probe (at) VALUES (?)", (at,))


async def _probe(conn: Any, waits: list[float], stop: asyncio.Event) -> None:
    """Another writer of the engine: a one-row write transaction on the same connection."""
    while not stop.is_set():
        begun = time.perf_counter()
        await run_write_transaction(conn, partial(_probe_row, at=begun))
        waits.append(time.perf_counter() - begun)
        await asyncio.sleep(0.01)


def _other_writer(path: Path, waits: list[float], stop: threading.Event) -> None:
    """Another process's writer: its own connection (FULL, busy_timeout 5 s), a thread here."""
    db = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    db.execute("PRAGMA synchronous = FULL")
    try:
        while not stop.is_set():
            begun = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO bench_probe (at) VALUES (?)", (begun,))
            db.execute("COMMIT")
            waits.append(time.perf_counter() - begun)
            stop.wait(0.01)
    finally:
        db.close()


def _bare_fsync(directory: Path, waits: list[float], stop: threading.Event) -> None:
    """The disk's own tail, side by side: a 4 KiB append + fsync every 10 ms, no SQLite."""
    fd = os.open(directory / "fsync.probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while not stop.is_set():
            begun = time.perf_counter()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            waits.append(time.perf_counter() - begun)
            stop.wait(0.01)
    finally:
        os.close(fd)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _line(label: str, seconds: list[float], target: float | None = None) -> str:
    ms = [v * 1000 for v in seconds] or [float("nan")]
    text = (
        f"  {label:<44} median {statistics.median(ms):5.1f} ({min(ms):.1f}–{max(ms):.1f})  "
        f"p99 {_pct(ms, 0.99):6.1f}  max {max(ms):7.1f} ms  (n={len(seconds):,})"
    )
    if target is not None:
        text += f"  target ≤ {target:g} ms: {'met' if max(ms) <= target else 'NOT met'}"
    return text


def _breakdown(batches: list[dict[str, Any]]) -> None:
    """Per table: the batches' true holds; per statement kind: its time; the slowest batches."""
    for table in dict.fromkeys(b["table"] for b in batches):
        mine = [b for b in batches if b["table"] == table]
        print(_line(f"lock held, {table} batches", [b["hold"] for b in mine], 50))
        print(
            f"    first batch {mine[0]['hold'] * 1000:.1f} ms ({mine[0]['size']} rows asked); "
            f"batch size median {statistics.median(b['size'] for b in mine):,.0f} "
            f"({min(b['size'] for b in mine)}–{max(b['size'] for b in mine)})"
        )
        kinds: dict[str, list[float]] = {}
        for batch in mine:
            for kind, seconds in batch["statements"]:
                kinds.setdefault(kind, []).append(seconds)
            kinds.setdefault("COMMIT", []).append(batch["commit"])
            if batch["restart"]:
                kinds.setdefault("COMMIT that restarted the WAL", []).append(batch["commit"])
            spent = sum(seconds for _, seconds in batch["statements"]) + batch["commit"]
            kinds.setdefault("rest (fetch, Python)", []).append(batch["hold"] - spent)
        for kind, seconds in kinds.items():
            print("  " + _line(f"  {kind}", seconds))
    print(_line("CPU time of the writer's thread in a batch", [b["cpu"] for b in batches]))
    slowest = sorted(range(len(batches)), key=lambda i: -batches[i]["hold"])[:8]
    print("  slowest batches (index in pass, table, rows asked, hold = statements + commit):")
    for i in slowest:
        b = batches[i]
        parts = ", ".join(f"{kind} {seconds * 1000:.1f}" for kind, seconds in b["statements"])
        print(
            f"    #{i} {b['table']} {b['size']} rows: {b['hold'] * 1000:.1f} ms = {parts}, "
            f"COMMIT {b['commit'] * 1000:.1f}{' (WAL restart)' if b['restart'] else ''}; "
            f"thread CPU {b['cpu'] * 1000:.1f} (load {b['load']:.1f})"
        )


@contextlib.contextmanager
def _as_before() -> Any:
    """The pass as it was before auto-checkpoints were moved out of the batches' commits."""

    async def keep(conn: Any, pages: int | None) -> int:
        return 1000

    async def nothing(self: Any) -> None:
        return None

    saved = (retention._set_autocheckpoint, retention._Checkpointer.checkpoint)
    retention._set_autocheckpoint = keep
    retention._Checkpointer.checkpoint = nothing  # type: ignore[method-assign]
    try:
        yield
    finally:
        retention._set_autocheckpoint, retention._Checkpointer.checkpoint = saved  # type: ignore[method-assign]


@contextlib.contextmanager
def _at_full() -> Any:
    """The pass with its batches committed at the connection's FULL (before synchronous=)."""

    async def full(conn: Any, fn: Any, *, synchronous: str | None = None) -> Any:
        return await run_write_transaction(conn, fn)

    saved = retention.run_write_transaction  # type: ignore[attr-defined]
    retention.run_write_transaction = full  # type: ignore[attr-defined]
    try:
        yield
    finally:
        retention.run_write_transaction = saved  # type: ignore[attr-defined]


_BATCH_SELECT = re.compile(r"^SELECT rowid AS r\b.* FROM (\w+) WHERE rowid > \?")


class _Traced:
    """The engine connection's ``sqlite3`` handle, timed: put in place of aiosqlite's handle
    for one pass, it records for each retention batch the write lock's true hold (``BEGIN
    IMMEDIATE`` returned → ``COMMIT`` returned, on the connection's own thread: no queue or
    event-loop wait is in it), the ``COMMIT`` alone, and each statement's time."""

    def __init__(self, real: sqlite3.Connection, path: Path) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "batches", [])
        object.__setattr__(self, "_open", None)
        object.__setattr__(self, "_size", 0)
        object.__setattr__(self, "_salt", b"")
        object.__setattr__(self, "_cpu", 0.0)
        object.__setattr__(self, "_wal", f"{path}-wal")

    def _wal_salt(self) -> bytes:
        try:
            with open(self._wal, "rb") as file:
                return file.read(24)[16:24]
        except FileNotFoundError:
            return b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real, name, value)

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql == "COMMIT":
            # studio-state ends a transaction with a cached SQL COMMIT, not commit()
            self.commit()
            return None
        begun = time.perf_counter()
        cursor = self._real.execute(sql, params)
        ended = time.perf_counter()
        if sql == "BEGIN IMMEDIATE":
            # The WAL header's salt, read under the lock: a commit that changes it restarted
            # the WAL, and SQLite syncs the new header in that commit (even at NORMAL).
            object.__setattr__(self, "_salt", self._wal_salt())
            object.__setattr__(self, "_cpu", time.thread_time())
            object.__setattr__(self, "_open", (time.perf_counter(), []))
        elif self._open is not None:
            self._open[1].append((sql, ended - begun))
            if sql.startswith("SELECT rowid"):
                object.__setattr__(self, "_size", params[1])
        return cursor

    def commit(self) -> None:
        begun = time.perf_counter()
        if self._real.in_transaction:
            self._real.execute("COMMIT")
        ended = time.perf_counter()
        cpu = time.thread_time() - self._cpu
        if self._open is None:
            return
        opened, statements = self._open
        object.__setattr__(self, "_open", None)
        match = _BATCH_SELECT.match(statements[0][0]) if statements else None
        if match is None:
            return  # a probe's write, not a retention batch
        self.batches.append(
            {
                "table": match.group(1),
                "hold": ended - opened,
                "commit": ended - begun,
                "cpu": cpu,
                "size": self._size,
                "statements": [(_label(sql), seconds) for sql, seconds in statements],
                "load": os.getloadavg()[0],
                "restart": self._wal_salt() != self._salt,
            }
        )

    def rollback(self) -> None:
        object.__setattr__(self, "_open", None)
        self._real.rollback()


def _label(sql: str) -> str:
    """A statement's kind: ``scan schedule_runs``, ``live check``, ``DELETE sessions``,
    ``DELETE status_transitions (dispatch)`` …"""
    if sql.startswith("SELECT rowid"):
        return "scan " + str((re.findall(r"FROM (\w+)", sql) or ["?"])[0])
    if "chain_parent_id IN" in sql:
        return "live check"
    table = (re.findall(r"FROM (\w+)", sql) or ["?"])[0]
    kind = re.search(r"entity_type = '(\w+)'", sql)
    return f"{sql.split()[0]} {table}" + (f" ({kind.group(1)})" if kind else "")


async def _one_pass(
    path: Path, workdir: Path, label: str, budget: float, *, runs_days: float = 30
) -> None:
    conn = await open_connection(path)
    same: list[float] = []
    other: list[float] = []
    disk: list[float] = []
    stop = asyncio.Event()
    halt = threading.Event()
    # Installed before anything starts: the probes must not outlive a pass that failed.
    traced = _Traced(conn._connection, path)  # type: ignore[arg-type]
    conn._connection = traced  # type: ignore[assignment]
    probe = asyncio.create_task(_probe(conn, same, stop))
    threads = [
        threading.Thread(target=_other_writer, args=(path, other, halt), daemon=True),
        threading.Thread(target=_bare_fsync, args=(workdir, disk, halt), daemon=True),
    ]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    load = os.getloadavg()[0]
    try:
        # runs_days 0: the pass over the dispatch table alone (with a time budget, a pass over
        # 1M rows ends inside the runs; this times the dispatches' batches on the same rows)
        report = await retention_pass(
            conn,
            now=T0 + 31 * DAY,
            retention_days=runs_days,
            dispatch_retention_days=30,
            dead_letter_retention_days=30,
            runs_dir=workdir,
            time_budget=budget,
        )
    finally:
        elapsed = time.perf_counter() - began
        conn._connection = traced._real
        stop.set()
        halt.set()
        await probe
        for thread in threads:
            thread.join()
        await conn.close()
    deleted = report.runs + report.dispatches
    print(
        f"{label}: {report.runs:,} runs + {report.dispatches:,} dispatches deleted in "
        f"{elapsed:.1f} s ({deleted / elapsed:,.0f} rows/s), {len(report.holds):,} batches, "
        f"done={report.done}; load {load:.1f} → {os.getloadavg()[0]:.1f}"
    )
    holds = [b["hold"] for b in traced.batches]
    print(_line("batch holds the write lock (BEGIN→COMMIT)", holds, 50))
    print(_line("batch statements, as the pass times them", report.holds))
    print(_line("another engine writer waits (same conn.)", same, 50))
    print(_line("another process's writer waits (own conn.)", other, 50))
    print(_line("anchor: bare 4 KiB write + fsync, same disk", disk))
    _breakdown(traced.batches)


_LABELS = {
    "scan": "scan (no retry_of index: live check scans the runs)",
    "before": "before (auto-checkpoint inside batch commits)",
    "full": "full (batches commit at FULL, passive ckpt)",
    "after": "after (batches commit at NORMAL, passive ckpt)",
    "dispatches": "after, dispatches only (the runs left in place)",
}


async def pass_over(
    rows: int, workdir: Path, variants: list[str], budget: float, cache: Path | None
) -> None:
    path = workdir / "retention.db"
    runs, dispatches = rows * 6 // 10, rows - rows * 6 // 10
    if cache is not None and cache.exists():
        shutil.copyfile(cache, path)
        print(f"rows copied from {cache} (written by an earlier run with --rows {rows:,})")
    else:
        conn = await open_connection(path)
        await ensure_schema(conn)
        await conn.execute("CREATE TABLE bench_probe (at REAL)")
        await conn.commit()
        await conn.close()
        began = time.perf_counter()
        _populate(path, rows)
        print(
            f"populated {runs:,} runs (+ {runs:,} invocations, {2 * runs:,} transitions) and "
            f"{dispatches:,} dispatches (+ {dispatches:,} transitions) in "
            f"{time.perf_counter() - began:.1f} s; file {path.stat().st_size / 2**20:,.0f} MiB"
        )
        if cache is not None:
            shutil.copyfile(path, cache)
    pristine = workdir / "pristine.db"
    shutil.copyfile(path, pristine)
    for index, variant in enumerate(variants):
        if index:
            shutil.copyfile(pristine, path)  # the same rows for every variant
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        if variant == "dispatches":
            await _one_pass(path, workdir, _LABELS["dispatches"], budget, runs_days=0)
        elif variant == "scan":
            db = sqlite3.connect(path)
            db.execute("DROP INDEX idx_schedule_runs_retry_of")
            db.close()
            await _one_pass(path, workdir, _LABELS["scan"], budget)
        elif variant == "before":
            with _as_before(), _at_full():
                await _one_pass(path, workdir, _LABELS["before"], budget)
        elif variant == "full":
            with _at_full():
                await _one_pass(path, workdir, _LABELS["full"], budget)
        else:
            await _one_pass(path, workdir, _LABELS["after"], budget)
    pristine.unlink()


def _size(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            total += candidate.stat().st_size
    return total


async def steady(fires: int, retention_days: float, workdir: Path) -> dict[str, Any]:
    db = workdir / f"steady-{retention_days:g}" / "state.db"
    db.parent.mkdir(parents=True)
    runs_dir = db.parent / "runs"
    runs_dir.mkdir()
    clock = ManualClock(T0)
    settings = SchedulerSettings(
        tick_seconds=30.0,
        max_scheduled_concurrent=20,
        command_allowlist=("true",),
        reaper_interval_seconds=3600.0,
        retention_days=retention_days,
        child_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    engine = SchedulerEngine(db, settings=settings, clock=clock)
    await engine.start(loop=False)
    for i in range(20):
        await engine.service.create(
            {
                "name": f"s{i}",
                "trigger_type": "interval",
                "interval_sec": 3600,
                "action_kind": "command",
                "action_command": "true",
            }
        )
    fired = 0
    log = b"x" * 4096
    while fired < fires:
        clock.advance(3600)
        await engine.tick_once()
        await engine.wait_idle()
        rows = await engine.conn.execute_fetchall(
            "SELECT id FROM schedule_runs WHERE fired_at > ?", (clock() - 3600,)
        )
        for row in rows:
            (runs_dir / f"{row['id']}.log").write_bytes(log)
        fired += len(list(rows))
    await engine.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    left = await engine.conn.execute_fetchall("SELECT COUNT(*) AS n FROM schedule_runs")
    pages = await engine.conn.execute_fetchall("PRAGMA page_count")
    free = await engine.conn.execute_fetchall("PRAGMA freelist_count")
    page_size = await engine.conn.execute_fetchall("PRAGMA page_size")
    await engine.stop()
    live = (list(pages)[0]["page_count"] - list(free)[0]["freelist_count"]) * list(page_size)[0][
        "page_size"
    ]
    logs = sum(p.stat().st_size for p in runs_dir.iterdir())
    return {
        "fires": fired,
        "runs_kept": list(left)[0]["n"],
        "db_file": _size(db),
        "db_live": live,
        "runs_dir": logs,
        "log_files": len(list(runs_dir.iterdir())),
        "hours": (clock() - T0) / 3600,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fires", type=int, default=2000)
    parser.add_argument(
        "--variants",
        default="after",
        help="passes over identical copies of the rows, in this order (before: auto-checkpoint "
        "in the commits; full: passive checkpoint, batches at FULL; after: batches at NORMAL)",
    )
    parser.add_argument(
        "--budget", type=float, default=3600.0, help="each pass's time budget, seconds"
    )
    parser.add_argument(
        "--db-cache",
        type=Path,
        help="keep the populated database here and reuse it when it exists (same --rows)",
    )
    parser.add_argument("--no-steady", action="store_true", help="skip the N-fires figures")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="studio-retention-"))
    try:
        print(
            f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, "
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        )
        await pass_over(args.rows, workdir, args.variants.split(","), args.budget, args.db_cache)
        for days in () if args.no_steady else (0.0, 1.0):
            figures = await steady(args.fires, days, workdir)
            label = "off (0)" if days == 0 else f"on ({days:g} day)"
            print(
                f"retention {label}: {figures['fires']:,} fires over {figures['hours']:.0f} h; "
                f"runs kept {figures['runs_kept']:,}; database file "
                f"{figures['db_file'] / 1024:,.0f} KiB (live pages "
                f"{figures['db_live'] / 1024:,.0f} KiB); runs/ {figures['log_files']:,} files, "
                f"{figures['runs_dir'] / 1024:,.0f} KiB"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

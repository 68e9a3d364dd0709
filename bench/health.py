"""Health, activity and spend reads: flat with history (issue 35, DESIGN §11.6).

Two SQLite databases side by side, with the same schedules: one with no history, one with
``--runs`` runs of history (default 1M) spread over the last 7 days, and the counters those runs'
terminal writes keep (hour rows, day rows with the duration histogram, health rows, action
spend). Measured on both: the health of every schedule (the schedule list with health),
activity over 24h and 7d, and spend by schedule and by action. Prints medians with min–max and
the ratio history ÷ none; the targets are ≤ 1.5×.

    python bench/health.py [--schedules 10000] [--runs 1000000] [--reps 7] [--db-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from studio_scheduler_core import ensure_schema, read_activity, read_schedule_health, read_spend
from studio_scheduler_core._records.counters import DURATION_BOUNDS
from studio_state import connect, fetch_all

DAY, HOUR = 86_400, 3_600


async def _schema(path: Path) -> None:
    async with connect(str(path)) as conn:
        await ensure_schema(conn)


def _fill(path: Path, schedules: int, runs: int, now: float) -> None:
    db = sqlite3.connect(path)
    ids = [f"s{i:011d}" for i in range(schedules)]
    with db:
        db.executemany(
            "INSERT INTO schedules (id, name, enabled, trigger_type, interval_sec, action_kind, "
            "action_command, next_fire_at, last_fired_at, created_at, updated_at) "
            "VALUES (?, ?, 1, 'interval', 600, 'command', 'sh', ?, ?, ?, ?)",
            [
                (sid, f"n{sid}", now + 60, now - 60 if runs else None, now - 8 * DAY, now)
                for sid in ids
            ],
        )
    if not runs:
        db.close()
        return
    rng = random.Random(7)
    statuses = ("completed",) * 8 + ("failed", "timed_out")
    hours: dict[int, list[int]] = {}
    days: dict[tuple[str, int], list[float]] = {}
    health: dict[str, list[object]] = {}
    batch = []
    for n in range(runs):
        sid = ids[n % schedules]
        ended = now - rng.random() * 7 * DAY
        status = statuses[n % len(statuses)]
        duration = rng.random() * 120
        batch.append((f"r{n:011d}", sid, status, ended - duration, ended, ended))
        hour = int(ended // HOUR * HOUR)
        h = hours.setdefault(hour, [0, 0, 0, 0])
        h[0] += 1
        h[1 + ("completed", "failed", "timed_out").index(status)] += 1
        day = int(ended // DAY * DAY)
        d = days.setdefault((sid, day), [0.0] * (5 + len(DURATION_BOUNDS)))
        d[0] += 1
        d[1 + ("completed", "failed", "timed_out").index(status)] += 1
        d[4] += duration
        d[5 + next(i for i, b in enumerate(DURATION_BOUNDS) if duration <= b)] += 1
        row = health.setdefault(sid, [None, None, 0.0, 0, 0, 0.0, 0])
        if row[1] is None or ended > float(row[1]):  # type: ignore[arg-type]
            row[0], row[1] = status, ended
        row[3] = int(row[3]) + 1  # type: ignore[call-overload]
        row[4] = int(row[4]) + 1  # type: ignore[call-overload]
        row[5] = float(row[5]) + 0.01  # type: ignore[arg-type]
        if len(batch) >= 50_000:
            _runs(db, batch)
            batch = []
    _runs(db, batch)
    hist = ", ".join(f"d{i}" for i in range(len(DURATION_BOUNDS)))
    with db:
        db.executemany(
            "INSERT INTO run_activity (hour_start, fires, completed, failed, timed_out) "
            "VALUES (?, ?, ?, ?, ?)",
            [(hour, *v) for hour, v in hours.items()],
        )
        db.executemany(
            f"INSERT INTO schedule_counters (schedule_id, day_start, fires, completed, failed, "
            f"timed_out, duration_sum, duration_count, {hist}) VALUES "
            f"({', '.join('?' * (8 + len(DURATION_BOUNDS)))})",
            [
                (
                    sid,
                    day,
                    int(v[0]),
                    int(v[1]),
                    int(v[2]),
                    int(v[3]),
                    v[4],
                    int(v[0]),
                    *(int(x) for x in v[5:]),
                )
                for (sid, day), v in days.items()
            ],
        )
        db.executemany(
            "INSERT INTO schedule_health (schedule_id, last_status, last_run_at, fires, ended, "
            "spend_usd, spend_tokens, consecutive_failures) VALUES (?, ?, ?, ?, ?, ?, 0, 0) "
            "ON CONFLICT (schedule_id) DO UPDATE SET last_status = excluded.last_status, "
            "last_run_at = excluded.last_run_at, fires = excluded.fires, "
            "ended = excluded.ended, spend_usd = excluded.spend_usd",
            [(sid, v[0], v[1], v[3], v[4], v[5]) for sid, v in health.items()],
        )
        db.execute(
            "INSERT INTO action_spend (action, spend_usd, spend_tokens, runs) "
            "VALUES ('command:sh', ?, 0, ?)",
            (runs * 0.01, runs),
        )
    db.close()


def _runs(db: sqlite3.Connection, batch: Sequence[tuple[object, ...]]) -> None:
    with db:
        db.executemany(
            "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
            "action_args, status, fired_at, ended_at, created_at) "
            "VALUES (?, ?, '{}', 'command', '[]', ?, ?, ?, ?)",
            batch,
        )


async def _time(fn: Callable[[], Awaitable[object]], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        started = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - started)
    return out


def _fmt(samples: list[float]) -> str:
    return (
        f"{statistics.median(samples) * 1000:8.1f} ms "
        f"({min(samples) * 1000:.1f}–{max(samples) * 1000:.1f})"
    )


async def _measure(path: Path, reps: int, now: float) -> dict[str, list[float]]:
    async with connect(str(path)) as conn:
        ids = [str(r["id"]) for r in await fetch_all(conn, "SELECT id FROM schedules")]
        reads: dict[str, Callable[[], Awaitable[object]]] = {
            "schedule list health": lambda: read_schedule_health(conn, ids, now=now),
            "list page 1000 health": lambda: read_schedule_health(conn, ids[:1000], now=now),
            "activity 24h": lambda: read_activity(conn, window="24h", now=now),
            "activity 7d": lambda: read_activity(conn, window="7d", now=now),
            "spend by schedule": lambda: read_spend(conn, by="schedule", now=now),
            "spend by action": lambda: read_spend(conn, by="action", now=now),
        }
        return {name: await _time(fn, reps) for name, fn in reads.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--db-dir", type=Path, default=None)
    args = parser.parse_args()
    now = time.time()
    with tempfile.TemporaryDirectory(dir=args.db_dir) as scratch:
        empty, full = Path(scratch) / "none.db", Path(scratch) / "history.db"
        started = time.perf_counter()
        for path, runs in ((empty, 0), (full, args.runs)):
            await _schema(path)
            _fill(path, args.schedules, runs, now)
        print(
            f"setup: {time.perf_counter() - started:.1f} s "
            f"({args.schedules} schedules; {args.runs} runs of history)"
        )
        none = await _measure(empty, args.reps, now)
        history = await _measure(full, args.reps, now)
    print(f"{'read':22} {'no history':>26} {'with history':>26}  ratio")
    for name in none:
        ratio = statistics.median(history[name]) / statistics.median(none[name])
        print(f"{name:22} {_fmt(none[name]):>26} {_fmt(history[name]):>26}  {ratio:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())

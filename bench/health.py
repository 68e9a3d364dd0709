"""Health, activity and spend reads: flat with history (issue 35, DESIGN §11.6).

Three SQLite databases with the same ``--schedules`` schedules (default 10k): one with no
history (the anchor), one with ``--runs`` runs (default 1M) and one with ``--more`` runs
(default 5M; 0 skips it), each run ended in the last 7 days. History is written by bulk SQL
(``INSERT … SELECT`` over a recursive counter, not the engine), and the counters those runs'
terminal writes keep are derived from the runs the same way (hour rows, day rows with the
duration histogram, health rows, action spend). Every schedule has its health row from
creation (migration 19), so the anchor reads the same rows a schedule with history does.

Measured on each database, alternating between them round by round (the machine is shared):

- "schedule list with health": one page of ``GET /api/schedules`` (the service's page of
  100, newest first, then the health of its schedules), the largest page (1,000) and the
  health of all the schedules;
- the verdict counts (dashboard overview, ``studio_schedules`` gauge);
- activity over 24h and 7d, spend by schedule and by action.

Prints medians with min–max and the ratios ``1M ÷ none`` (DESIGN §11.6: ≤ 1.5×) and
``5M ÷ 1M`` (flat: ~1×), each as the ratio of the medians and, in brackets, of the minimums
(the machine is shared: the fastest round is the one least disturbed).

Then what the operator calls: the real app served by uvicorn on 127.0.0.1 (its own process,
one per database: no history and ``--runs``), and in each round ``--requests`` GETs of each
of ``/api/stats/activity?window=24h|7d`` and ``/api/stats/spend?by=schedule|action`` on
either server in turn (the order alternating request by request), on kept-alive
connections. Per round the median latency of each; over the rounds the median and min–max
of those, and the same two ratios. The schedules' next fires are moved a day ahead first, so
neither server's engine fires any while it is measured.

    python bench/health.py [--schedules 10000] [--runs 1000000] [--more 5000000] [--reps 9]
        [--requests 40] [--what both|inprocess|served] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _served import add_serve_options, serve, serving, wait_ready

from studio_scheduler_core import (
    SchedulerSettings,
    ScheduleService,
    ensure_schema,
    read_activity,
    read_health_counts,
    read_schedule_health,
    read_spend,
)
from studio_scheduler_core._records.counters import DURATION_BOUNDS
from studio_scheduler_core._records.store import WEEK_COLUMNS
from studio_scheduler_core._recovery.retention_counters import prune_counters
from studio_state import connect, fetch_all, fetch_value

DAY, HOUR = 86_400, 3_600
BATCH = 500_000


async def _schema(path: Path) -> None:
    async with connect(str(path)) as conn:
        await ensure_schema(conn)


def _fill(path: Path, schedules: int, runs: int, now: float) -> float:
    """Write the schedules and ``runs`` runs of history; return the seconds it took."""
    started = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    counter = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
    with db:
        db.execute(
            f"{counter} INSERT INTO schedules (id, name, enabled, trigger_type, interval_sec, "
            "action_kind, action_command, next_fire_at, last_fired_at, created_at, updated_at) "
            "SELECT printf('s%011d', i), printf('n%011d', i), 1, 'interval', 600, 'command', "
            "'sh', ?, ?, ?, ? FROM n",
            (schedules - 1, now + 60, now - 60 if runs else None, now - 8 * DAY, now),
        )
    # run i: schedule i mod S, ended within the last 7 days (a fixed scramble of i), lasting
    # up to 2 minutes; 8 in 10 completed, 1 failed, 1 timed out
    for first in range(0, runs, BATCH):
        count = min(BATCH, runs - first)
        with db:
            db.execute(
                f"{counter.replace('SELECT 0', 'SELECT ?')} INSERT INTO schedule_runs (id, "
                "schedule_id, trigger_context, action_kind, action_args, status, fired_at, "
                "ended_at, created_at, chain_depth) "
                "SELECT printf('r%011d', i), printf('s%011d', i % ?), '{}', 'command', '[]', "
                "CASE i % 10 WHEN 8 THEN 'failed' WHEN 9 THEN 'timed_out' ELSE 'completed' END, "
                "e - d, e, e - d, 0 FROM (SELECT i, ? - ((i * 2654435761) % 604000) AS e, "
                "(i * 40503) % 120 AS d FROM n)",
                (first, first + count - 1, schedules, now - 30),
            )
    _counters(db)
    db.close()
    return time.perf_counter() - started


def _counters(db: sqlite3.Connection) -> None:
    """The counters the runs' terminal writes keep, derived from the runs in bulk."""
    hour = f"CAST(ended_at / {HOUR} AS INTEGER) * {HOUR}"
    day = f"CAST(ended_at / {DAY} AS INTEGER) * {DAY}"
    ends = ", ".join(
        f"sum(CASE WHEN status = '{s}' THEN 1 ELSE 0 END)"
        for s in ("completed", "failed", "timed_out")
    )
    hist, low = [], None
    for index, bound in enumerate(DURATION_BOUNDS):
        above = "1" if low is None else f"ended_at - fired_at > {low}"
        below = "1" if index == len(DURATION_BOUNDS) - 1 else f"ended_at - fired_at <= {bound}"
        hist.append(f"sum(CASE WHEN {above} AND {below} THEN 1 ELSE 0 END)")
        low = bound
    columns = ", ".join(f"d{i}" for i in range(len(DURATION_BOUNDS)))
    with db:
        db.execute(
            "INSERT INTO run_activity (hour_start, fires, completed, failed, timed_out) "
            f"SELECT {hour}, count(*), {ends} FROM schedule_runs GROUP BY {hour}"
        )
        db.execute(
            "INSERT INTO schedule_counters (schedule_id, day_start, fires, completed, failed, "
            f"timed_out, duration_sum, duration_count, {columns}) "
            f"SELECT schedule_id, {day}, count(*), {ends}, sum(ended_at - fired_at), count(*), "
            f"{', '.join(hist)} FROM schedule_runs GROUP BY schedule_id, {day}"
        )
        db.execute(
            "UPDATE schedule_health SET fires = o.n, ended = o.n, spend_usd = o.n * 0.01, "
            "spend_tokens = o.n * 100, last_run_id = o.last, last_status = 'completed', "
            "last_run_at = o.at, last_fire_at = o.at FROM (SELECT schedule_id, count(*) AS n, "
            "max(id) AS last, max(ended_at) AS at FROM schedule_runs GROUP BY schedule_id) o "
            "WHERE o.schedule_id = schedule_health.schedule_id"
        )
        # each health row's 7-day sums as of the day its last run ended, as that run's
        # terminal write leaves them
        week = ", ".join(f"w_{c}" for c in WEEK_COLUMNS)
        sums = ", ".join(f"COALESCE(sum(c.{c}), 0)" for c in WEEK_COLUMNS)
        db.execute(
            f"UPDATE schedule_health SET week_day = CAST(last_run_at / {DAY} AS INTEGER) * {DAY}"
            " WHERE last_run_at IS NOT NULL"
        )
        db.execute(
            f"UPDATE schedule_health SET ({week}) = (SELECT {sums} FROM schedule_counters c "
            "WHERE c.schedule_id = schedule_health.schedule_id "
            f"AND c.day_start >= schedule_health.week_day - {6 * DAY} "
            "AND c.day_start <= schedule_health.week_day) WHERE week_day IS NOT NULL"
        )
        db.execute(
            "INSERT INTO action_spend (action, spend_usd, spend_tokens, runs) "
            "SELECT 'command:sh', count(*) * 0.01, count(*) * 100, count(*) FROM schedule_runs "
            "HAVING count(*) > 0"
        )
    db.execute("ANALYZE")


async def _stale(path: Path, now: float, *, roll: bool) -> int:
    """How many health rows hold 7-day sums of an earlier day than ``now``'s (after the
    retention pass's counter step, with ``roll``)."""
    async with connect(str(path)) as conn:
        if roll:
            await prune_counters(conn, now=now)
        today = int(now // DAY * DAY)
        return int(
            await fetch_value(
                conn,
                "SELECT count(*) FROM schedule_health WHERE week_day IS NOT NULL "
                "AND week_day <> ? AND week_day >= ?",
                (today, today - 6 * DAY),
            )
        )


async def _not_due(path: Path, now: float) -> None:
    """Move every schedule's next fire a day past ``now`` (a kept database's may be past): a
    served app's engine then fires none while it is measured."""
    async with connect(str(path)) as conn:
        await conn.execute("UPDATE schedules SET next_fire_at = ?", (now + DAY,))
        await conn.commit()


Read = Callable[[], Awaitable[object]]


async def _reads(conn: object, now: float) -> dict[str, Read]:
    service = ScheduleService(conn, settings=SchedulerSettings(), clock=lambda: now)  # type: ignore[arg-type]
    ids = [str(r["id"]) for r in await fetch_all(conn, "SELECT id FROM schedules")]  # type: ignore[arg-type]

    def page(limit: int) -> Read:
        async def read() -> object:
            rows, _ = await service.list(limit=limit)
            return await read_schedule_health(conn, [r.id for r in rows], now=now)  # type: ignore[arg-type]

        return read

    c = conn
    return {
        "list page 100 + health": page(100),
        "list page 1000 + health": page(1000),
        "health of all schedules": lambda: read_schedule_health(c, ids, now=now),  # type: ignore[arg-type]
        "verdict counts": lambda: read_health_counts(c, now=now),  # type: ignore[arg-type]
        "activity 24h": lambda: read_activity(c, window="24h", now=now),  # type: ignore[arg-type]
        "activity 7d": lambda: read_activity(c, window="7d", now=now),  # type: ignore[arg-type]
        "spend by schedule": lambda: read_spend(c, by="schedule", now=now),  # type: ignore[arg-type]
        "spend by action": lambda: read_spend(c, by="action", now=now),  # type: ignore[arg-type]
    }


def _fmt(samples: list[float]) -> str:
    """``median ms (min–max)``, to the microsecond below a millisecond."""
    middle = statistics.median(samples) * 1000
    digits = 3 if middle < 1 else 1
    return (
        f"{middle:.{digits}f} ms "
        f"({min(samples) * 1000:.{digits}f}–{max(samples) * 1000:.{digits}f})"
    )


async def _measure(
    paths: dict[str, Path], reps: int, now: float
) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {label: {} for label in paths}
    async with contextlib.AsyncExitStack() as stack:
        conns = {
            label: await stack.enter_async_context(connect(str(path)))
            for label, path in paths.items()
        }
        reads = {label: await _reads(conn, now) for label, conn in conns.items()}
        for label in paths:  # warm each file's pages once
            for fn in reads[label].values():
                await fn()
        for _ in range(reps):
            for name in reads[next(iter(paths))]:
                for label in paths:  # side by side: each read on every database in turn
                    started = time.perf_counter()
                    await reads[label][name]()
                    out[label].setdefault(name, []).append(time.perf_counter() - started)
    return out


SERVED = {
    "activity 24h": "/api/stats/activity?window=24h",
    "activity 7d": "/api/stats/activity?window=7d",
    "spend by schedule": "/api/stats/spend?by=schedule",
    "spend by action": "/api/stats/spend?by=action",
}


async def _get_seconds(client: Any, url: str) -> float:
    started = time.perf_counter()
    response = await client.get(url)
    took = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"GET {url} -> {response.status_code} {response.text[:200]}")
    return took


async def _served(
    paths: dict[str, Path], rounds: int, requests: int
) -> dict[str, dict[str, list[float]]]:
    """Each database served by its own app; per round, each URL's median latency on each."""
    import httpx

    out: dict[str, dict[str, list[float]]] = {label: {} for label in paths}
    with contextlib.ExitStack() as stack:
        bases = {
            label: stack.enter_context(serving(__file__, path)) for label, path in paths.items()
        }
        async with httpx.AsyncClient(timeout=60) as client:
            for base, proc in bases.values():
                await wait_ready(client, base, proc)
            labels = list(bases)
            for r in range(-1, rounds):  # round -1 warms both servers up
                for name, path in SERVED.items():
                    times: dict[str, list[float]] = {label: [] for label in labels}
                    for i in range(requests):
                        for label in labels if i % 2 == 0 else reversed(labels):
                            url = bases[label][0] + path
                            times[label].append(await _get_seconds(client, url))
                    if r >= 0:
                        for label in labels:
                            out[label].setdefault(name, []).append(statistics.median(times[label]))
    return out


def _table(got: dict[str, dict[str, list[float]]], runs: int, more: int) -> None:
    head = f"{'read':24} {'no history':>24} {f'{runs} runs':>24}  ratio (of mins)"
    if more:
        head += f" {f'{more} runs':>24}  ratio (of mins)"
    print(head)
    for name in got["none"]:
        none, one = got["none"][name], got["1x"][name]
        line = f"{name:24} {_fmt(none):>24} {_fmt(one):>24}  {_ratio(one, none)}"
        if more:
            more_samples = got["more"][name]
            line += f" {_fmt(more_samples):>24}  {_ratio(more_samples, one)}"
        print(line)


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--more", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--db-dir", type=Path, default=None)
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the databases in this folder and reuse them on the next run (their runs "
        "end in the 7 days before they were made: rerun within a day, or with --roll)",
    )
    parser.add_argument(
        "--roll",
        action="store_true",
        help="run the retention pass's counter step first (it rolls every health row's "
        "7-day sums to today, as the engine's first pass of a day does)",
    )
    parser.add_argument(
        "--requests", type=int, default=40, help="GETs of each URL per server and round"
    )
    parser.add_argument(
        "--what",
        choices=("both", "inprocess", "served"),
        default="both",
        help="the in-process reads, the served ones, or both",
    )
    add_serve_options(parser)
    args = parser.parse_args()
    if args.serve:
        serve(args.db, args.port)
    else:
        asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> None:
    now = time.time()
    sizes = {"none": 0, "1x": args.runs}
    if args.more:
        sizes["more"] = args.more
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            folder = args.keep
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.db_dir)))
        paths = {label: folder / f"s{args.schedules}-r{runs}.db" for label, runs in sizes.items()}
        for label, runs in sizes.items():
            took = None
            if not paths[label].exists():
                await _schema(paths[label])
                took = _fill(paths[label], args.schedules, runs, now)
            await _schema(paths[label])  # a kept database gets the newer migrations
            await _not_due(paths[label], now)
            stale = await _stale(paths[label], now, roll=args.roll)
            made = "kept from an earlier run" if took is None else f"by bulk SQL in {took:.1f} s"
            print(
                f"setup {label}: {args.schedules} schedules, {runs} runs {made}; "
                f"{stale} health rows with 7-day sums of an earlier day"
            )
        if args.what != "served":
            print(f"in-process, {args.reps} rounds ({_load()} before)")
            _table(await _measure(paths, args.reps, now), args.runs, args.more)
            print(f"({_load()} after)")
        if args.what != "inprocess":
            two = {label: paths[label] for label in ("none", "1x")}
            print(
                f"served (uvicorn on 127.0.0.1, one app per database), {args.reps} rounds × "
                f"{args.requests} GETs of each URL per server ({_load()} before)"
            )
            _table(await _served(two, args.reps, args.requests), args.runs, 0)
            print(f"({_load()} after)")


def _ratio(samples: list[float], anchor: list[float]) -> str:
    """The ratio of the medians, and of the minimums (steadier on a shared machine)."""
    medians = statistics.median(samples) / statistics.median(anchor)
    return f"{medians:4.2f}x ({min(samples) / min(anchor):4.2f}x)"


if __name__ == "__main__":
    main()

"""Dashboard figure: server render time of the overview (``GET /``) on a large database.

The database holds SCHEDULES schedules (every one enabled, with a next fire time) and RUNS
runs (completed, failed and timed out over the last 30 days, a few running), plus DISPATCHES
pending outbox rows. The app is the real one (``create_app``, its lifespan started: engine,
migrations, tick), served in process through its ASGI interface, so the time is the server's
alone: routing, middleware, the overview's queries, the template. Each figure is the median
(min–max) of ROUNDS requests after WARMUP. The schedules list, the runs list and a schedule
page are measured the same way for comparison. Target: overview ≤ 50 ms.

    python bench/dashboard.py [--schedules 10000] [--runs 100000] [--rounds 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import secrets
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from studio_api import StudioSettings, create_app

TARGET_MS = 50.0


def populate(db: Path, schedules: int, runs: int, dispatches: int, template: dict[str, Any]) -> str:
    """Bulk-insert the rows (one transaction); returns the id of one schedule."""
    rng = random.Random(7)
    now = time.time()
    conn = sqlite3.connect(db)
    try:
        columns = list(template)
        schedule_ids = []
        rows = []
        for n in range(schedules):
            sid = secrets.token_hex(6)
            schedule_ids.append(sid)
            row = dict(template)
            row.update(
                id=sid,
                name=f"bench-{n:05d}",
                next_fire_at=now + rng.uniform(60, 86400),
                created_at=now - 86400 * 30 + n,
                updated_at=now,
            )
            rows.append([row[c] for c in columns])
        marks = ", ".join("?" for _ in columns)
        conn.executemany(f"INSERT INTO schedules ({', '.join(columns)}) VALUES ({marks})", rows)
        run_rows = []
        for n in range(runs):
            fired = now - 86400 * 30 * (1 - n / runs)
            status = rng.choices(["completed", "failed", "timed_out"], [90, 8, 2])[0]
            run_rows.append(
                (
                    secrets.token_hex(6),
                    rng.choice(schedule_ids),
                    "{}",
                    "command",
                    "{}",
                    status,
                    0 if status == "completed" else 1,
                    fired,
                    fired + rng.uniform(0.1, 120),
                    fired,
                    f"run.{status}",
                )
            )
        conn.executemany(
            "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
            "action_args, status, exit_code, fired_at, ended_at, created_at, "
            "status_reason_code) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            run_rows,
        )
        conn.commit()
    finally:
        conn.close()
    return schedule_ids[0]


async def enqueue(app: Any, dispatches: int) -> None:
    import studio_outbox

    items = [
        {"kind": "bench", "deliver_to": "nowhere", "body": {"n": n}} for n in range(dispatches)
    ]
    await studio_outbox.enqueue_many(app.state.engine.conn, items)


async def measure(client: httpx.AsyncClient, path: str, rounds: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        answer = await client.get(path)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        answer = await client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert answer.status_code == 200, path
    return times


def line(name: str, times: list[float]) -> str:
    return (
        f"{name:<34} median {statistics.median(times):7.2f} ms "
        f"(min {min(times):.2f} – max {max(times):.2f}, {len(times)} requests)"
    )


async def main(args: argparse.Namespace) -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "state.db"
        settings = StudioSettings(db=db, tick_seconds=30, command_allowlist="true")
        # first start: migrate, and take a valid schedule row as the template
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                made = await client.post(
                    "/api/schedules",
                    json={
                        "name": "template",
                        "trigger_type": "interval",
                        "interval_sec": 3600,
                        "action_kind": "command",
                        "action_command": "true",
                    },
                )
                assert made.status_code == 201, made.text
        conn = sqlite3.connect(db)
        conn.row_factory = sqlite3.Row
        template = dict(conn.execute("SELECT * FROM schedules").fetchone())
        conn.close()
        for key in ("github_etag",):
            template.setdefault(key, None)
        started = time.perf_counter()
        one = populate(db, args.schedules, args.runs, args.dispatches, template)
        print(
            f"database: {args.schedules:,} schedules, {args.runs:,} runs, "
            f"{args.dispatches:,} dispatches (built in {time.perf_counter() - started:.1f} s)"
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            await enqueue(app, args.dispatches)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                results = {
                    "overview GET /": await measure(client, "/", args.rounds, args.warmup),
                    "schedules list GET /schedules": await measure(
                        client, "/schedules", args.rounds, args.warmup
                    ),
                    "runs list GET /runs": await measure(client, "/runs", args.rounds, args.warmup),
                    "schedule page GET /schedules/ID": await measure(
                        client, f"/schedules/{one}", args.rounds, args.warmup
                    ),
                }
        for name, times in results.items():
            print(line(name, times))
        overview = statistics.median(results["overview GET /"])
        verdict = "meets" if overview <= TARGET_MS else "misses"
        print(f"overview target ≤ {TARGET_MS:.0f} ms: {verdict} ({overview:.2f} ms median)")
        print(json.dumps({k: round(statistics.median(v), 2) for k, v in results.items()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--dispatches", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    asyncio.run(main(parser.parse_args()))

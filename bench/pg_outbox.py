"""Outbox delivery on PostgreSQL: deliveries/s with 1 and with 3 deliverer processes.

Starts a throwaway PostgreSQL cluster (studio_state.testing_pg: the machine's server
binaries, initdb in a temp dir), and for every round and every deliverer count gives each
measurement a fresh database holding ROWS pending dispatches. N deliverer processes (this
script with --worker) connect, wait for a common start signal, then run delivery passes
(studio_outbox.postgres.deliver_due_dispatches) until nothing is due; each reports the time of
its first claim and of its last recorded outcome, and the figure is ROWS over the span from the
earliest start to the latest end. After each measurement the script checks that every dispatch
was delivered exactly once (one `claimed` transition per row, every row `delivered`).

Destinations, in the deliverer's own process (no network, no child):
  - "N ms": each send waits N ms, as a webhook to a remote receiver does; the
    deliverers are bound by how many sends they keep in flight (concurrency per deliverer),
    which is what several nodes add;
  - "instant": each send returns at once; the figure is then the database's and the CPU's
    (on a 2-core machine, three deliverers and the server share two cores).

    python bench/pg_outbox.py [--rounds 3] [--rows 600] [--latency-ms 100,20] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

TARGET = 2.2
NODES = (1, 3)


async def _worker(dsn: str, latency: float, concurrency: int, limit: int) -> None:
    import psycopg

    from studio_outbox import postgres as pg
    from studio_outbox.testing import RecordingTransport

    transport = RecordingTransport(latency=latency)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.time()
        delivered = 0
        while True:
            counts = await pg.deliver_due_dispatches(
                conn, transport=transport, limit=limit, concurrency=concurrency
            )
            delivered += counts["delivered"]
            if counts["attempted"] == 0:
                due = await pg.next_due_at(conn)
                if due is None or due > time.time():
                    break
        ended = time.time()
    print(json.dumps({"start": started, "end": ended, "delivered": delivered}), flush=True)


async def _prepare(admin_dsn: str, name: str, rows: int) -> str:
    import psycopg

    from studio_outbox import postgres as pg

    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {name}")
    dsn = admin_dsn.rsplit("/", 1)[0] + "/" + name
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await pg.ensure_schema(conn)
        await pg.enqueue_many(
            conn, [{"kind": "bench", "deliver_to": "x", "body": {"n": n}} for n in range(rows)]
        )
        await conn.execute("VACUUM ANALYZE dispatch_outbox")
    return dsn


async def _check(dsn: str, rows: int) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM dispatch_outbox WHERE status = 'delivered' "
            "AND attempt = 1), (SELECT count(*) FROM status_transitions "
            "WHERE reason_code = 'dispatch.delivering.claimed')"
        )
        found = await cur.fetchone()
    if found != (rows, rows):
        raise SystemExit(f"not delivered exactly once: (delivered, claims) = {found}, rows {rows}")


def _measure(dsn: str, nodes: int, rows: int, latency: float, args: argparse.Namespace) -> float:
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        dsn,
        "--latency-ms",
        str(latency * 1000),
        "--concurrency",
        str(args.concurrency),
        "--limit",
        str(args.limit),
    ]
    children = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(nodes)
    ]
    reports: list[dict[str, Any]] = []
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise SystemExit("a deliverer did not start")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=600)
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if sum(r["delivered"] for r in reports) != rows:
        raise SystemExit(f"delivered {sum(r['delivered'] for r in reports)} of {rows}")
    span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return float(rows / span)


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f}) /s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument(
        "--latency-ms", default="100,20", help="comma-separated send latencies (0: instant)"
    )
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--worker", metavar="DSN")
    args = parser.parse_args()
    latencies = [float(ms) / 1000 for ms in str(args.latency_ms).split(",")]
    if args.worker:
        asyncio.run(_worker(args.worker, latencies[0], args.concurrency, args.limit))
        return
    if 0.0 not in latencies:
        latencies.append(0.0)

    import psycopg

    from studio_state.testing_pg import start_cluster

    cluster = start_cluster()
    try:
        with psycopg.connect(cluster.dsn) as conn:
            server = conn.execute("SHOW server_version").fetchone()
        print(
            f"PostgreSQL {server[0] if server else '?'}, Python {platform.python_version()}, "
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {args.rows} rows, "
            f"concurrency {args.concurrency} per deliverer, {args.rounds} rounds"
        )
        results: dict[tuple[float, int], list[float]] = {}
        for _ in range(args.rounds):
            for wait in latencies:
                for nodes in NODES:
                    dsn = asyncio.run(_prepare(cluster.dsn, "bench", args.rows))
                    rate = _measure(dsn, nodes, args.rows, wait, args)
                    asyncio.run(_check(dsn, args.rows))
                    results.setdefault((wait, nodes), []).append(rate)
                    line = f"  {wait * 1000:5g} ms, {nodes} deliverer(s): {rate:,.0f} /s"
                    print(line, flush=True)
        print(f"load at the end {os.getloadavg()[0]:.1f}")
        print("| destination | 1 deliverer | 3 deliverers | ratio | target | met |")
        print("|---|---|---|---|---|---|")
        for wait in latencies:
            name = f"{wait * 1000:g} ms per send" if wait else "instant (database- and CPU-bound)"
            one, three = results[(wait, 1)], results[(wait, 3)]
            ratio = statistics.median(three) / statistics.median(one)
            met = "yes" if ratio >= TARGET else "**no**"
            print(f"| {name} | {_fmt(one)} | {_fmt(three)} | {ratio:.2f}× | ≥ {TARGET}× | {met} |")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

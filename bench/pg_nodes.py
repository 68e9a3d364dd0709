"""Several Studio nodes on one PostgreSQL database: ad-hoc runs/s and deliveries/s, 1 vs 3 nodes.

Starts a throwaway PostgreSQL cluster (studio_state.testing_pg: the machine's server binaries,
initdb in a temp dir). For every round and node count, a fresh database; N real `studio serve`
processes (`python -m studio_cli serve`, each its own node id, port and run-log directory) are
started on it and waited for (`/api/health`). Then the work is written in one transaction
straight into the database (so the figure is the nodes', not an HTTP client's):

  - runs: ROWS ad-hoc `command` runs of `true` (the API's enqueue path,
    `AdhocRunService.enqueue`, on a studio-state connection to the same URL); the figure is
    ROWS over the time from the commit to the last run becoming terminal;
  - sleep: the same with ad-hoc runs of `sleep 0.5` (slot-bound: 4 slots a node, so a
    node adds capacity, not CPU; target 2.85x);
  - scheduled: ROWS interval schedules made due at once, on nodes with
    `LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE=1` and a global cap of SCHEDULED_CAP (the same for
    1 and 3 nodes): the leader admits and queues every fire, the workers of all nodes run
    them; the figure is ROWS over the time from the commit to the last fire's end;
  - deliveries: ROWS dispatches (`studio_outbox.enqueue_many`) to a notify template of
    `["/bin/true", "{deliver_to}"]`; the figure is ROWS over the time from the commit to the
    last one `delivered`.

After each measurement it checks that every run is `completed` exactly once (one
`run.running.claimed` transition each) and every dispatch `delivered` at attempt 1, and
prints which nodes ran how many runs.

    python bench/pg_nodes.py [--rounds 3] [--rows 300] [--what runs,scheduled,deliveries]

Run it with an interpreter that has studio-api, studio-cli and psycopg (the `postgres` test
environment: `hatch run hatch-test.py3.11-postgres:python bench/pg_nodes.py`, or that env's
python).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 2.2
SLOT_TARGET = 2.85
"""Slot-bound work (``sleep``): what a node adds is its 4 slots, not CPU."""
SLEEP = "0.5"
NODES = (1, 3)
ADHOC_CONCURRENT = 4
SCHEDULED_CAP = 12


def _env(url: str, port: int, node: str, logs: Path, what: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "LIONAGI_STUDIO_DB": url,
            "LIONAGI_STUDIO_PORT": str(port),
            "LIONAGI_STUDIO_NODE_ID": node,
            "LIONAGI_STUDIO_NODE_URL": f"http://127.0.0.1:{port}",
            "LIONAGI_STUDIO_RUN_LOG_DIR": str(logs),
            "LIONAGI_STUDIO_TICK_SECONDS": "1",
            "LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT": str(ADHOC_CONCURRENT),
            "LIONAGI_STUDIO_NOTIFY_TEMPLATE": json.dumps(["/bin/true", "{deliver_to}"]),
            "LIONAGI_STUDIO_RETENTION_DAYS": "0",
            "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "true,sleep",
        }
    )
    if what == "scheduled":
        env["LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE"] = "1"
        env["LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT"] = str(SCHEDULED_CAP)
    return env


def _start_nodes(url: str, count: int, work: Path, what: str) -> list[subprocess.Popen[bytes]]:
    import httpx

    from studio_state.testing import free_port

    nodes: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    for index in range(count):
        port = free_port()
        logs = work / f"node-{index}"
        logs.mkdir(parents=True, exist_ok=True)
        log = open(work / f"node-{index}.out", "wb")  # noqa: SIM115 - closed with the process
        nodes.append(
            subprocess.Popen(
                [sys.executable, "-m", "studio_cli", "serve"],
                env=_env(url, port, f"node-{index}", logs, what),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        ports.append(port)
    deadline = time.monotonic() + 60
    for port, node in zip(ports, nodes, strict=True):
        while True:
            if node.poll() is not None:
                raise SystemExit(f"a node exited at start; see {work}/node-*.out")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"a node did not answer within 60 s; see {work}")
            time.sleep(0.2)
    return nodes


def _stop_nodes(nodes: list[subprocess.Popen[bytes]]) -> None:
    for node in nodes:
        if node.poll() is None:
            node.send_signal(signal.SIGTERM)
    for node in nodes:
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


async def _enqueue(url: str, what: str, rows: int, work: Path) -> float:
    import studio_outbox
    from studio_scheduler_core import AdhocRunService, SchedulerSettings, ScheduleService
    from studio_state import connect, write_transaction

    async with connect(url) as conn:
        async with write_transaction(conn):
            if what in ("runs", "sleep"):
                settings = SchedulerSettings(command_allowlist=("true", "sleep"))
                service = AdhocRunService(conn, settings=settings)
                body = {
                    "action_kind": "command",
                    "action_command": "true" if what == "runs" else "sleep",
                    "action_cwd": str(work),
                    **({"action_command_args": [SLEEP]} if what == "sleep" else {}),
                }
                for _ in range(rows):
                    await service.enqueue(body)
            elif what == "scheduled":
                schedules = ScheduleService(
                    conn, settings=SchedulerSettings(command_allowlist=("true",))
                )
                for i in range(rows):
                    await schedules.create(
                        {
                            "name": f"s{i}",
                            "trigger_type": "interval",
                            "interval_sec": 3600,
                            "action_kind": "command",
                            "action_command": "true",
                            "action_cwd": str(work),
                        }
                    )
                # Due now, all of them: each fires once (the next one is an hour away).
                await conn.execute("UPDATE schedules SET next_fire_at = ?", (time.time(),))
            else:
                await studio_outbox.enqueue_many(
                    conn, [{"kind": "bench", "deliver_to": f"d{i}"} for i in range(rows)]
                )
        return time.time()


async def _finished(url: str, what: str) -> tuple[int, float | None]:
    from studio_state import connect, fetch_one

    async with connect(url) as conn:
        if what in ("runs", "sleep", "scheduled"):
            row = await fetch_one(
                conn,
                "SELECT count(*) AS n, max(ended_at) AS last FROM schedule_runs "
                "WHERE status IN ('completed', 'failed', 'timed_out', 'cancelled')",
            )
        else:
            row = await fetch_one(
                conn,
                "SELECT count(*) AS n, max(updated_at) AS last FROM dispatch_outbox "
                "WHERE status IN ('delivered', 'dead_letter', 'expired')",
            )
    assert row is not None
    return int(row["n"]), row["last"]


async def _check(url: str, what: str, rows: int) -> dict[str, int]:
    from studio_state import connect, fetch_all

    async with connect(url) as conn:
        if what in ("runs", "sleep", "scheduled"):
            # Capacity deferrals of waiting schedules are `skipped` records, not fires.
            by_status = await fetch_all(
                conn,
                "SELECT status, count(*) AS n FROM schedule_runs WHERE status <> 'skipped' "
                "GROUP BY status",
            )
            claims = await fetch_all(
                conn,
                "SELECT count(*) AS n FROM status_transitions "
                "WHERE reason_code = 'run.running.claimed'",
            )
            nodes = await fetch_all(
                conn,
                "SELECT node_id, count(*) AS n FROM schedule_runs WHERE status <> 'skipped' "
                "GROUP BY node_id",
            )
            assert {r["status"]: int(r["n"]) for r in by_status} == {"completed": rows}, by_status
            assert int(claims[0]["n"]) == rows, claims
            return {str(r["node_id"]): int(r["n"]) for r in nodes}
        by_status = await fetch_all(
            conn, "SELECT status, attempt, count(*) AS n FROM dispatch_outbox GROUP BY 1, 2"
        )
        assert [(r["status"], r["attempt"], int(r["n"])) for r in by_status] == [
            ("delivered", 1, rows)
        ], by_status
        return {}


def _measure(
    admin: str, name: str, what: str, count: int, rows: int
) -> tuple[float, dict[str, int]]:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = admin.rsplit("/", 1)[0] + "/" + name
    work = Path(tempfile.mkdtemp(prefix=f"pg-nodes-{name}-"))
    nodes = _start_nodes(url, count, work, what)
    try:
        committed = asyncio.run(_enqueue(url, what, rows, work))
        deadline = time.monotonic() + 600
        while True:
            done, last = asyncio.run(_finished(url, what))
            if done >= rows:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{what}: only {done} of {rows} finished in 600 s ({work})")
            time.sleep(0.1)
        per_node = asyncio.run(_check(url, what, rows))
    finally:
        _stop_nodes(nodes)
    shutil.rmtree(work, ignore_errors=True)
    assert last is not None
    return rows / max(float(last) - committed, 1e-6), per_node


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f}) /s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--what", default="runs,deliveries")
    args = parser.parse_args()
    kinds = [w.strip() for w in args.what.split(",") if w.strip()]

    from studio_state.testing_pg import start_cluster

    cluster = start_cluster()
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{args.rows} rows per measurement, {args.rounds} rounds, max_adhoc_concurrent "
        f"{ADHOC_CONCURRENT} per node, scheduled cap {SCHEDULED_CAP} (scheduled on any node)"
    )
    results: dict[tuple[str, int], list[float]] = {}
    spread: dict[tuple[str, int], list[dict[str, int]]] = {}
    try:
        serial = 0
        for round_no in range(args.rounds):
            for what in kinds:
                order = NODES if round_no % 2 == 0 else tuple(reversed(NODES))
                for count in order:
                    serial += 1
                    rate, per_node = _measure(cluster.dsn, f"b{serial}", what, count, args.rows)
                    results.setdefault((what, count), []).append(rate)
                    spread.setdefault((what, count), []).append(per_node)
            print(f"  round {round_no + 1}/{args.rounds} done (load {os.getloadavg()[0]:.1f})")
    finally:
        cluster.stop()
    print()
    print(f"{'figure':<28}{'1 node':<28}{'3 nodes':<28}ratio  target")
    for what in kinds:
        one, three = results[(what, 1)], results[(what, 3)]
        ratio = statistics.median(three) / statistics.median(one)
        target = SLOT_TARGET if what == "sleep" else TARGET
        met = "met" if ratio >= target else "NOT MET"
        print(f"{what:<28}{_fmt(one):<28}{_fmt(three):<28}{ratio:.2f}× ≥ {target}× {met}")
        if what in ("runs", "sleep", "scheduled"):
            print(f"  {what} per node, 3 nodes (each round): {spread[(what, 3)]}")


if __name__ == "__main__":
    main()

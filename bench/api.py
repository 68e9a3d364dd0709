"""API throughput: the studio-api app beside a bare FastAPI + aiosqlite app, as ratios.

Both apps are served by uvicorn on 127.0.0.1 (each in its own child process, same uvicorn
settings: one worker, no access log) and loaded by one httpx.AsyncClient at a fixed
concurrency with a fixed request count, so the load is bounded in count and in time and
never leaves the loopback interface. Figures, each the median of ROUNDS rounds with min–max:
  - GET one schedule by id       (ours: GET /api/schedules/{id};  bare: SELECT one row)
  - GET a page of 100 schedules  (ours: GET /api/schedules;       bare: COUNT + SELECT page)
  - POST create a schedule       (ours: POST /api/schedules;      bare: INSERT + COMMIT)
Rounds alternate ours / bare so machine load affects both alike. The bare app reads the same
rows from a copy of the same database; it validates nothing and returns the row as stored,
so the ratio is the cost of Studio's models, validation, dependencies and middleware. The
target (the performance issue) is GET one schedule >= 70% of the bare route.
An extra untimed server counts the aiosqlite round trips each kind of request makes.

    python bench/api.py [--rounds 5] [--requests 1000] [--post-requests 300]
                        [--concurrency 16] [--schedules 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Module level: FastAPI resolves the bare routes' (string) annotations in these globals.
from fastapi import Request

GET_TARGET = 0.70
HOST = "127.0.0.1"
PHASE_TIMEOUT = 300.0  # seconds: no load phase may run longer than this

FIGURES = [
    ("get_one", "GET one schedule"),
    ("get_list", "GET list, 100 per page"),
    ("post", "POST create schedule"),
]


# --------------------------------------------------------------------------- the servers


def _create_body(tag: str) -> dict[str, Any]:
    return {
        "name": tag,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "true",
    }


def _bare_app(db: Path) -> Any:
    """A bare FastAPI + aiosqlite app: the routes do the SQL and nothing else."""
    from contextlib import asynccontextmanager

    import aiosqlite
    from fastapi import FastAPI, HTTPException

    state: dict[str, aiosqlite.Connection] = {}
    write_lock = asyncio.Lock()  # one connection: one write transaction at a time

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        conn = await aiosqlite.connect(db, isolation_level=None)
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        conn.row_factory = aiosqlite.Row
        state["conn"] = conn
        try:
            yield
        finally:
            await conn.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/bare/schedules/{schedule_id}")
    async def get_one(schedule_id: str) -> dict[str, Any]:
        async with state["conn"].execute(
            "SELECT * FROM schedules WHERE id = ?", (schedule_id,)
        ) as cursor:
            row = await cursor.fetchone()
        if row is None:
            raise HTTPException(404)
        return dict(row)

    @app.get("/bare/schedules")
    async def get_list(limit: int = 100, offset: int = 0) -> dict[str, Any]:
        conn = state["conn"]
        async with conn.execute("SELECT COUNT(*) FROM schedules") as cursor:
            total = (await cursor.fetchone())[0]  # type: ignore[index]
        async with conn.execute(
            "SELECT * FROM schedules ORDER BY created_at, rowid LIMIT ? OFFSET ?", (limit, offset)
        ) as cursor:
            rows = [dict(r) for r in await cursor.fetchall()]
        return {"schedules": rows, "total": total, "limit": limit, "offset": offset}

    @app.post("/bare/schedules", status_code=201)
    async def post(request: Request) -> dict[str, Any]:
        body = await request.json()
        now = time.time()
        row = {
            "id": os.urandom(6).hex(),
            "name": body["name"],
            "trigger_type": body["trigger_type"],
            "interval_sec": body["interval_sec"],
            "action_kind": body["action_kind"],
            "action_command": body["action_command"],
            "next_fire_at": now + body["interval_sec"],
            "created_at": now,
            "updated_at": now,
        }
        conn = state["conn"]
        async with write_lock:
            await conn.execute("BEGIN IMMEDIATE")
            await conn.execute(
                f"INSERT INTO schedules ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
            await conn.commit()
        return row

    return app


def _ours_app(db: Path, port: int) -> Any:
    from studio_api import StudioSettings, create_app

    # Only the given values: no LIONAGI_* variable of this shell leaks into the figures.
    settings = StudioSettings.from_env(
        {}, db=str(db), host=HOST, port=port, command_allowlist="true"
    )
    return create_app(settings)


class _HopEndpoint:
    """ASGI wrapper (bench only): counts aiosqlite round trips; GET /__hops reads and resets."""

    def __init__(self, app: Any) -> None:
        from _hops import HopCounter

        self.app = app
        self.hops = HopCounter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/__hops":
            body = json.dumps({"hops": self.hops.take()}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _serve(which: str, db: Path, port: int, hops: bool) -> None:
    import uvicorn

    app = _ours_app(db, port) if which == "ours" else _bare_app(db)
    if hops:
        app = _HopEndpoint(app)
    config = uvicorn.Config(
        app, host=HOST, port=port, log_level="warning", access_log=False, lifespan="on"
    )
    uvicorn.Server(config).run()


# --------------------------------------------------------------------------- setup


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def _seed(db: Path, n: int) -> list[str]:
    import studio_state
    from studio_scheduler_core import ensure_schema

    async with studio_state.connect(db) as conn:
        await ensure_schema(conn)
        now = time.time()
        ids = [f"{i:012x}" for i in range(n)]
        await conn.execute("BEGIN")
        await conn.executemany(
            "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
            "action_command, action_command_args, next_fire_at, created_at, updated_at) "
            "VALUES (?, ?, 'interval', 3600, 'command', 'true', '[]', ?, ?, ?)",
            [(sid, f"s{i}", now + 3600 + i, now + i * 0.001, now) for i, sid in enumerate(ids)],
        )
        await conn.commit()
    return ids


class Server:
    """One app served by uvicorn in a child process on a free loopback port."""

    def __init__(self, which: str, db: Path, *, hops: bool = False) -> None:
        self.which = which
        self.port = _free_port()
        self.base = f"http://{HOST}:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
        argv = [sys.executable, os.path.abspath(__file__), "--serve", which]
        argv += ["--db", str(db), "--port", str(self.port)] + (["--hops"] if hops else [])
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    async def wait_ready(self, client: Any, timeout: float = 60.0) -> None:
        path = "/api/health" if self.which == "ours" else "/bare/schedules?limit=1"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"{self.which} server exited: {err.strip()[-400:]}")
            try:
                response = await client.get(self.base + path, timeout=2.0)
                if response.status_code == 200:
                    return
            except Exception:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.which} server did not answer within {timeout:.0f} s")

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (from /proc/<pid>/stat)."""
        with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


# --------------------------------------------------------------------------- load


async def _load(
    client: Any, requests: list[tuple[str, str, Any]], concurrency: int, expect: int
) -> float:
    """Send ``requests`` ((method, url, json)) with ``concurrency`` workers; returns req/s."""
    queue = iter(requests)
    failures: list[str] = []

    async def worker() -> None:
        for method, url, body in queue:
            response = await client.request(method, url, json=body)
            if response.status_code != expect:
                failures.append(f"{method} {url} -> {response.status_code} {response.text[:120]}")

    started = time.perf_counter()
    async with asyncio.timeout(PHASE_TIMEOUT):
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} failed requests, first: {failures[0]}")
    return len(requests) / elapsed


def _requests(which: str, kind: str, n: int, ids: list[str], tag: str) -> list[Any]:
    prefix = "/api/schedules" if which == "ours" else "/bare/schedules"
    if kind == "get_one":
        return [("GET", f"{prefix}/{ids[(i * 7919) % len(ids)]}", None) for i in range(n)]
    if kind == "get_list":
        return [("GET", f"{prefix}?limit=100&offset={(i * 100) % 900}", None) for i in range(n)]
    return [("POST", prefix, _create_body(f"{tag}-{i}")) for i in range(n)]


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import httpx

    ids = await _seed(workdir / "ours.db", args.schedules)
    src = sqlite3.connect(workdir / "ours.db")
    dst = sqlite3.connect(workdir / "bare.db")
    src.backup(dst)
    src.close()
    dst.close()
    servers = {
        "ours": Server("ours", workdir / "ours.db"),
        "bare": Server("bare", workdir / "bare.db"),
    }
    names = [key for key, _ in FIGURES] + [f"{key}_cpu" for key, _ in FIGURES]
    results: dict[str, dict[str, list[float]]] = {
        which: {name: [] for name in names} for which in servers
    }
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    try:
        async with httpx.AsyncClient(timeout=30.0, limits=limits) as client:
            for server in servers.values():
                await server.wait_ready(client)
            for which, server in servers.items():  # warm-up: imports, caches, connections
                client.base_url = httpx.URL(server.base)
                for kind, _ in FIGURES:
                    warm = _requests(which, kind, 50, ids, f"warm-{which}")
                    await _load(client, warm, args.concurrency, 201 if kind == "post" else 200)
            for number in range(1, args.rounds + 1):
                # Per figure, the two apps back to back (order alternating by round): load
                # from other work on the machine drifts slowly and hits both alike.
                for kind, _ in FIGURES:
                    order = list(servers.items())
                    if number % 2 == 0:
                        order.reverse()
                    for which, server in order:
                        client.base_url = httpx.URL(server.base)
                        count = args.post_requests if kind == "post" else args.requests
                        reqs = _requests(which, kind, count, ids, f"r{number}-{which}")
                        cpu = server.cpu_seconds()
                        rate = await _load(
                            client, reqs, args.concurrency, 201 if kind == "post" else 200
                        )
                        cpu = server.cpu_seconds() - cpu
                        results[which][kind].append(rate)
                        results[which][f"{kind}_cpu"].append(cpu / count * 1000)
                print(f"  round {number}/{args.rounds} done", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return results


async def _hops(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    import httpx

    import studio_outbox
    import studio_state

    db = workdir / "hops.db"
    ids = await _seed(db, 200)
    async with studio_state.connect(db) as conn:
        await studio_outbox.ensure_schema(conn)
        await studio_outbox.enqueue_many(
            conn, [{"kind": "bench", "deliver_to": "sink"} for _ in range(200)]
        )
    server = Server("ours", db, hops=True)
    out: dict[str, float] = {}
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=30.0) as client:
            await server.wait_ready(client)
            await asyncio.sleep(0.5)  # let the engine's first tick finish
            # list endpoints: the same round trips for a page of 1 and a page of 100 (no
            # per-row query). Counted first: each POST below wakes the engine, whose tick
            # would still be running (and counted) after the last one.
            for path in ("/api/schedules", "/api/dispatch"):
                for limit in (1, 100):
                    await client.get("/__hops")
                    response = await client.get(path, params={"limit": limit})
                    response.raise_for_status()
                    out[f"{path}?limit={limit}"] = (await client.get("/__hops")).json()["hops"]
            n = 20
            for kind, _ in FIGURES:
                reqs = _requests("ours", kind, n, ids, "hops")
                await client.get("/__hops")
                await _load(client, reqs, 1, 201 if kind == "post" else 200)
                out[kind] = (await client.get("/__hops")).json()["hops"] / n
    finally:
        server.stop()
    return out


# --------------------------------------------------------------------------- report


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):7.0f} ({min(values):.0f}–{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="GETs per figure per round")
    parser.add_argument("--post-requests", type=int, default=300, help="POSTs per round")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--schedules", type=int, default=1000, help="rows in the database")
    parser.add_argument("--serve", choices=["ours", "bare"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--hops", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, Path(args.db), args.port, args.hops)
        return
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (figures are medians over >= 5 rounds)")
    if args.schedules < 1000:
        parser.error("--schedules must be at least 1000 (the list pages through 1,000 rows)")

    import fastapi
    import httpx
    import uvicorn

    print("bench/api.py — studio-api beside a bare FastAPI + aiosqlite app")
    print(
        f"  python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; fastapi "
        f"{fastapi.__version__}, uvicorn {uvicorn.__version__}, httpx {httpx.__version__}"
    )
    print(
        f"  {args.rounds} rounds; per round and app {args.requests} GETs per figure and "
        f"{args.post_requests} POSTs, concurrency {args.concurrency}, "
        f"{args.schedules} schedules stored; 127.0.0.1 only"
    )
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        results = asyncio.run(_measure(args, Path(tmp)))
        hops = asyncio.run(_hops(args, Path(tmp)))

    print()
    head = f"{'figure':26} {'ours req/s (min–max)':>24} {'bare req/s (min–max)':>24} {'ratio':>7}"
    print(head)
    print("-" * len(head))
    ratios = {}
    for key, label in FIGURES:
        ours, bare = results["ours"][key], results["bare"][key]
        ratios[key] = statistics.median(ours) / statistics.median(bare)
        print(f"{label:26} {_fmt(ours):>24} {_fmt(bare):>24} {ratios[key] * 100:6.0f}%")
    print()
    print("server CPU per request, ms (user + system of the server process; the client's")
    print("share of the 2 cores is excluded, so this is the cost of each app alone):")
    for key, label in FIGURES:
        ours, bare = results["ours"][f"{key}_cpu"], results["bare"][f"{key}_cpu"]
        ratio = statistics.median(bare) / statistics.median(ours)
        print(
            f"  {label:24} ours {statistics.median(ours):6.2f} ({min(ours):.2f}–{max(ours):.2f})"
            f"   bare {statistics.median(bare):6.2f} ({min(bare):.2f}–{max(bare):.2f})"
            f"   bare/ours {ratio:4.0%}"
        )
    print()
    verdict = "met" if ratios["get_one"] >= GET_TARGET else "NOT MET"
    print(
        f"target: GET one schedule >= {GET_TARGET:.0%} of the bare route: "
        f"{ratios['get_one']:.0%} {verdict}"
    )
    print(
        "aiosqlite round trips per request (ours): "
        + ", ".join(f"{label} {hops[key]:.1f}" for key, label in FIGURES)
    )
    print(
        "list endpoints, round trips for a page of 1 / of 100 rows: "
        + ", ".join(
            f"{path} {hops[f'{path}?limit=1']:.0f} / {hops[f'{path}?limit=100']:.0f}"
            for path in ("/api/schedules", "/api/dispatch")
        )
    )


if __name__ == "__main__":
    main()

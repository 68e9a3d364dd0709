"""API reads under write load: GET latency while writers keep the engine's connection busy.

Reads on the engine's own connection queue behind every write transaction (and its commit's
fsync at `synchronous=FULL`); on studio-api's separate read connection they do not. This
serves the studio-api app (uvicorn on 127.0.0.1, its own process, as bench/api.py) and, in
each round: GET one schedule with no other load, then the same GETs while WRITERS clients
POST /api/dispatch (one write transaction each) without pause. With `--before DIR` (an
older checkout's `packages/*/src`, put first on the server's PYTHONPATH) the same is
measured on that code in every round, the order alternating, so both see the same load.

Figures: GET latency p50 / p99 (ms) alone and under write load, req/s of the writers, and
the ratio of p99 under load to p99 alone (target: reads never queue behind a write, so the
ratio stays near that of the load's CPU share alone).

    python bench/api_reads.py [--rounds 5] [--gets 400] [--writers 8] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import api


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _gets(client: Any, base: str, ids: list[str], n: int) -> list[float]:
    out = []
    for i in range(n):
        started = time.perf_counter()
        response = await client.get(f"{base}/api/schedules/{ids[(i * 7919) % len(ids)]}")
        out.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"GET -> {response.status_code} {response.text[:200]}")
    return out


async def _writer(client: Any, base: str, stop: asyncio.Event, done: list[int]) -> None:
    while not stop.is_set():
        response = await client.post(
            f"{base}/api/dispatch", json={"kind": "bench", "deliver_to": "sink", "body": {}}
        )
        if response.status_code != 201:
            raise RuntimeError(f"POST -> {response.status_code} {response.text[:200]}")
        done[0] += 1


def _seed(db: Path, n: int, env_path: str | None) -> list[str]:
    """bench/api.py's seed, run by the code under test (its own schema version)."""
    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = env_path
    code = (
        "import asyncio, json, sys; from pathlib import Path; import api; "
        "print(json.dumps(asyncio.run(api._seed(Path(sys.argv[1]), int(sys.argv[2])))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(db), str(n)],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    ids: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return ids


async def _one(which: str, env_path: str | None, args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    with tempfile.TemporaryDirectory(prefix=f"bench-api-reads-{which}-") as tmp:
        db = Path(tmp) / "state.db"
        ids = _seed(db, args.schedules, env_path)
        saved = os.environ.get("PYTHONPATH")
        if env_path is not None:
            os.environ["PYTHONPATH"] = env_path
        try:
            server = api.Server("ours", db)
        finally:
            if env_path is not None:
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
        try:
            limits = httpx.Limits(max_connections=args.writers + 4)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                await server.wait_ready(client)
                await _gets(client, server.base, ids, 50)  # warm up
                alone = await _gets(client, server.base, ids, args.gets)
                stop, done = asyncio.Event(), [0]
                writers = [
                    asyncio.create_task(_writer(client, server.base, stop, done))
                    for _ in range(args.writers)
                ]
                await asyncio.sleep(0.5)
                started, before = time.perf_counter(), done[0]
                loaded = await _gets(client, server.base, ids, args.gets)
                write_rate = (done[0] - before) / (time.perf_counter() - started)
                stop.set()
                await asyncio.gather(*writers)
        finally:
            server.stop()
    return {
        "alone_p50": statistics.median(alone),
        "alone_p99": _pct(alone, 0.99),
        "loaded_p50": statistics.median(loaded),
        "loaded_p99": _pct(loaded, 0.99),
        "writes_per_s": write_rate,
    }


def _fmt(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f}) {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gets", type=int, default=400, help="GETs per phase per round")
    parser.add_argument("--writers", type=int, default=8, help="concurrent POST clients")
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--before", help="an older checkout (its packages/*/src) to compare")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5")
    before_path = None
    if args.before:
        paths = sorted(str(p) for p in Path(args.before).glob("packages/*/src"))
        if not paths:
            parser.error(f"--before {args.before}: no packages/*/src there")
        before_path = os.pathsep.join(paths)
    print("studio-api reads under write load (bench/api_reads.py)")
    print(
        f"  python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds, "
        f"{args.gets} GETs per phase, {args.writers} writers, {args.schedules} schedules"
    )
    sides = {"ours": None} | ({"before": before_path} if before_path else {})
    results: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for number in range(1, args.rounds + 1):
        order = list(sides) if number % 2 else list(reversed(sides))
        for side in order:
            got = asyncio.run(_one(side, sides[side], args))
            for key, value in got.items():
                results[side].setdefault(key, []).append(value)
        print(f"  round {number}/{args.rounds} done", flush=True)
    print()
    for side, figures in results.items():
        print(f"{side}:")
        print(f"  GET one schedule alone        p50 {_fmt(figures['alone_p50'], 'ms')}")
        print(f"                                p99 {_fmt(figures['alone_p99'], 'ms')}")
        print(f"  GET one schedule under writes p50 {_fmt(figures['loaded_p50'], 'ms')}")
        print(f"                                p99 {_fmt(figures['loaded_p99'], 'ms')}")
        print(f"  writers' POST /api/dispatch       {_fmt(figures['writes_per_s'], '/s')}")
        ratio = statistics.median(figures["loaded_p99"]) / statistics.median(figures["alone_p99"])
        print(f"  p99 under writes / p99 alone      {ratio:.2f}×")
    if "before" in results:
        ours, old = results["ours"], results["before"]
        for key in ("loaded_p50", "loaded_p99"):
            gain = statistics.median(old[key]) / statistics.median(ours[key])
            print(f"before / ours, GET {key.replace('loaded_', '')} under writes: {gain:.2f}×")


if __name__ == "__main__":
    main()

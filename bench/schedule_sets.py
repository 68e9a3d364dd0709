"""Applying a 1,000-member ScheduleSet against 1,000 ``POST /api/schedules`` (DESIGN §11.6:
the apply ≥ 10× faster; a re-apply of the same set writes nothing and takes ≤ 0.5 s).

Serves the studio-api app (uvicorn on 127.0.0.1, its own process; SQLite, or with
``--postgres`` a throwaway PostgreSQL cluster of ``studio_state.testing_pg``). In each round, on
the same server and the same kept-alive connection: N ``POST /api/schedules`` one after the
other (each its own transaction and commit), then ``POST /api/schedule-sets/apply`` of a set
of N members of a new owner (one transaction), then the same set again (it must answer
``writes: 0``). The schedules are interval schedules running ``true``.

Figures: over the rounds, the median and min–max of each time, and of the ratio POSTs / apply
(per round).

    python bench/schedule_sets.py [--rounds 5] [--members 1000] [--format json|yaml] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _served import add_serve_options, measure_rounds, median_range, serve, serving, wait_ready

from studio_scheduler_core.testing import numbered_set


async def _posts(client: Any, base: str, prefix: str, members: int) -> float:
    started = time.perf_counter()
    for i in range(members):
        body = {
            "name": f"{prefix}-{i:05d}",
            "trigger_type": "interval",
            "interval_sec": 60 + i,
            "action_kind": "command",
            "action_command": "true",
        }
        response = await client.post(f"{base}/api/schedules", json=body)
        if response.status_code != 201:
            raise RuntimeError(f"POST -> {response.status_code} {response.text[:200]}")
    return time.perf_counter() - started


async def _apply(client: Any, base: str, text: str) -> tuple[float, int]:
    started = time.perf_counter()
    response = await client.post(
        f"{base}/api/schedule-sets/apply",
        content=text,
        headers={"content-type": "application/yaml"},
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"apply -> {response.status_code} {response.text[:300]}")
    return elapsed, int(response.json()["applied"]["writes"])


async def _measure(args: argparse.Namespace, db: Path | str) -> dict[str, list[float]]:
    import httpx

    env = {"LIONAGI_STUDIO_MAX_BODY_BYTES": str(16 * 1024 * 1024)}
    with serving(__file__, db, env=env) as (base, proc):
        async with httpx.AsyncClient(timeout=120) as client:
            await wait_ready(client, base, proc)

            async def warm_up() -> None:
                await _posts(client, base, "warm", 20)
                await _apply(client, base, numbered_set("warm", 20, form=args.format))

            async def one_round(r: int) -> dict[str, float]:
                posts = await _posts(client, base, f"post-r{r}", args.members)
                text = numbered_set(f"bench-r{r}", args.members, form=args.format)
                applied, writes = await _apply(client, base, text)
                if writes != args.members:
                    raise RuntimeError(f"the first apply wrote {writes}, not {args.members}")
                again, rewrites = await _apply(client, base, text)
                if rewrites != 0:
                    raise RuntimeError(f"the re-apply wrote {rewrites} schedules")
                print(
                    f"round {r + 1}: {args.members} POSTs {posts:.3f} s, apply {applied:.3f} s, "
                    f"re-apply {again:.3f} s, ratio {posts / applied:.1f}×",
                    flush=True,
                )
                return {
                    "posts": posts,
                    "apply": applied,
                    "reapply": again,
                    "ratio": posts / applied,
                }

            return await measure_rounds(args.rounds, one_round, warm_up=warm_up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--format", choices=("json", "yaml"), default="json", help="body format")
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL cluster")
    add_serve_options(parser)
    args = parser.parse_args()
    if args.serve:
        serve(args.db, args.port, command_allowlist="true")
        return
    if args.postgres:
        from studio_state.testing_pg import start_cluster

        cluster = start_cluster()
        try:
            result = asyncio.run(_measure(args, cluster.dsn))
        finally:
            cluster.stop()
    else:
        with tempfile.TemporaryDirectory() as scratch:
            result = asyncio.run(_measure(args, Path(scratch) / "state.db"))
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    backend = "PostgreSQL" if args.postgres else "SQLite"
    print(
        f"{args.rounds} rounds, {args.members} schedules each way, {backend}, served app, "
        f"{args.format} body, load {os.getloadavg()[0]:.1f}"
    )
    print(f"{args.members} POST /api/schedules:   median {median_range(result['posts'], ' s')}")
    print(f"apply of {args.members} members:      median {median_range(result['apply'], ' s')}")
    print(f"re-apply (writes nothing):  median {median_range(result['reapply'], ' s')}")
    ratio = statistics.median(result["ratio"])
    print(f"POSTs / apply: {median_range(result['ratio'], '×')}")
    print(f"target ≥ 10×: {'met' if ratio >= 10 else 'NOT met'}; ", end="")
    slowest = max(result["reapply"])
    print(
        f"re-apply ≤ 0.5 s: {'met' if statistics.median(result['reapply']) <= 0.5 else 'NOT met'}"
        f" (slowest {slowest:.3f} s)"
    )


if __name__ == "__main__":
    main()

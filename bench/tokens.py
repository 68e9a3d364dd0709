"""A request with a scoped token against the same request with the admin token (DESIGN §11.6:
target ≤ 1.1×).

Serves the studio-api app (uvicorn on 127.0.0.1, its own process) with
``LIONAGI_STUDIO_AUTH_TOKEN`` set and a ``read`` token in its database. In each round, GETs
one schedule N times with each token, in pairs (admin then scoped, then scoped then admin,
…) so both see the same moment's load, on one kept-alive connection. The scoped token costs
one indexed read of ``api_tokens`` and an HMAC-SHA256 per request; the admin token a
constant-time compare.

Figures: per round, the median latency (ms) of each; over the rounds, the median and the
min–max of those medians, and the ratio scoped / admin (median of the per-round ratios).

    python bench/tokens.py [--rounds 7] [--requests 400]
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

ADMIN = "bench-admin-token-0123456789abcdef"


async def _seed(db: Path) -> tuple[str, str]:
    import studio_state
    from studio_api._tokens import create_token
    from studio_scheduler_core import ensure_schema

    async with studio_state.connect(db) as conn:
        await ensure_schema(conn)
        now = time.time()
        await conn.execute(
            "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
            "action_command, action_command_args, next_fire_at, created_at, updated_at) "
            "VALUES ('0000000000aa', 'bench', 'interval', 3600, 'command', 'true', '[]', "
            "?, ?, ?)",
            (now + 3600, now, now),
        )
        await conn.commit()
        for i in range(50):  # other tokens beside it: the lookup is by id, not a scan
            await create_token(conn, f"other-{i}", "operate", now=now, actor="bench")
        _, scoped = await create_token(conn, "reader", "read", now=now, actor="bench")
    return "0000000000aa", scoped


async def _one_ms(client: Any, url: str, token: str) -> float:
    started = time.perf_counter()
    response = await client.get(url, headers={"Authorization": f"Bearer {token}"})
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET -> {response.status_code} {response.text[:200]}")
    return elapsed


async def _round(client: Any, url: str, tokens: dict[str, str], n: int) -> dict[str, float]:
    """``n`` pairs of requests, one per token, the order alternating pair by pair: both see
    the same moment's load (the machine may be busy with other work)."""
    times: dict[str, list[float]] = {which: [] for which in tokens}
    for i in range(n):
        order = list(tokens) if i % 2 == 0 else list(reversed(tokens))
        for which in order:
            times[which].append(await _one_ms(client, url, tokens[which]))
    return {which: statistics.median(values) for which, values in times.items()}


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, list[float]]:
    import httpx

    db = workdir / "state.db"
    schedule_id, scoped = await _seed(db)
    with serving(__file__, db) as (base, proc):
        url = f"{base}/api/schedules/{schedule_id}"
        tokens = {"admin": ADMIN, "scoped": scoped}
        async with httpx.AsyncClient(timeout=30) as client:
            await wait_ready(client, base, proc)

            async def one_round(_: int) -> dict[str, float]:
                medians = await _round(client, url, tokens, args.requests)
                return {**medians, "ratio": medians["scoped"] / medians["admin"]}

            return await measure_rounds(
                args.rounds,
                one_round,
                warm_up=lambda: _round(client, url, tokens, 50),  # both paths
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=400)
    add_serve_options(parser)
    args = parser.parse_args()
    if args.serve:
        serve(args.db, args.port, command_allowlist="true", auth_token=ADMIN)
        return
    with tempfile.TemporaryDirectory() as scratch:
        result = asyncio.run(_measure(args, Path(scratch)))
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"{args.rounds} rounds × {args.requests} GET /api/schedules/{{id}} per token, in pairs")
    print(f"admin token (LIONAGI_STUDIO_AUTH_TOKEN): median {median_range(result['admin'], ' ms')}")
    print(
        f"scoped read token (api_tokens):          median {median_range(result['scoped'], ' ms')}"
    )
    ratio = statistics.median(result["ratio"])
    print(f"scoped / admin: {median_range(result['ratio'], '×')}")
    print(f"target: ≤ 1.1× — {'met' if ratio <= 1.1 else 'NOT met'}")


if __name__ == "__main__":
    main()

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
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
ADMIN = "bench-admin-token-0123456789abcdef"


def _serve(db: Path, port: int) -> None:
    import uvicorn

    from studio_api import StudioSettings, create_app

    settings = StudioSettings.from_env(
        {}, db=str(db), host=HOST, port=port, command_allowlist="true", auth_token=ADMIN
    )
    config = uvicorn.Config(
        create_app(settings), host=HOST, port=port, log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def _wait_ready(client: Any, base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited: " + (proc.stderr.read() or b"").decode()[-400:])  # type: ignore[union-attr]
        try:
            if (await client.get(f"{base}/api/health", timeout=2)).status_code == 200:
                return
        except Exception:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the server did not answer within 60 s")


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
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    argv = [sys.executable, os.path.abspath(__file__), "--serve", "--db", str(db)]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    base = f"http://{HOST}:{port}"
    url = f"{base}/api/schedules/{schedule_id}"
    out: dict[str, list[float]] = {"admin": [], "scoped": [], "ratio": []}
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            await _wait_ready(client, base, proc)
            tokens = {"admin": ADMIN, "scoped": scoped}
            await _round(client, url, tokens, 50)  # warm up both paths
            for _ in range(args.rounds):
                medians = await _round(client, url, tokens, args.requests)
                out["admin"].append(medians["admin"])
                out["scoped"].append(medians["scoped"])
                out["ratio"].append(medians["scoped"] / medians["admin"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def _fmt(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.3f}{unit} (min {min(values):.3f}, max {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(Path(args.db), args.port)
        return
    with tempfile.TemporaryDirectory() as scratch:
        result = asyncio.run(_measure(args, Path(scratch)))
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"{args.rounds} rounds × {args.requests} GET /api/schedules/{{id}} per token, in pairs")
    print(f"admin token (LIONAGI_STUDIO_AUTH_TOKEN): median {_fmt(result['admin'], ' ms')}")
    print(f"scoped read token (api_tokens):          median {_fmt(result['scoped'], ' ms')}")
    ratio = statistics.median(result["ratio"])
    print(f"scoped / admin: {_fmt(result['ratio'], '×')}")
    print(f"target: ≤ 1.1× — {'met' if ratio <= 1.1 else 'NOT met'}")


if __name__ == "__main__":
    main()

"""Applying a 1,000-member ScheduleSet against 1,000 ``POST /api/schedules`` (DESIGN §11.6:
the apply ≥ 10× faster; a re-apply of the same set writes nothing and takes ≤ 0.5 s).

Serves the studio-api app (uvicorn on 127.0.0.1, its own process, SQLite). In each round, on
the same server and the same kept-alive connection: N ``POST /api/schedules`` one after the
other (each its own transaction and commit), then ``POST /api/schedule-sets/apply`` of a set
of N members of a new owner (one transaction), then the same set again (it must answer
``writes: 0``). The schedules are interval schedules running ``true``.

Figures: over the rounds, the median and min–max of each time, and of the ratio POSTs / apply
(per round).

    python bench/schedule_sets.py [--rounds 5] [--members 1000] [--format json|yaml]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def _serve(db: Path, port: int) -> None:
    import uvicorn

    from studio_api import StudioSettings, create_app

    settings = StudioSettings.from_env(
        {}, db=str(db), host=HOST, port=port, command_allowlist="true"
    )
    config = uvicorn.Config(
        create_app(settings), host=HOST, port=port, log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def _wait_ready(client: Any, base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited")
        try:
            if (await client.get(f"{base}/api/health", timeout=2)).status_code == 200:
                return
        except Exception:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the server did not answer within 60 s")


def _document(owner: str, members: int, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "apiVersion": "studio/v1",
                "kind": "ScheduleSet",
                "metadata": {"name": owner},
                "schedules": {
                    f"job-{i:05d}": {
                        "trigger": {"every": f"{60 + i}s"},
                        "command": {"argv": ["true"]},
                    }
                    for i in range(members)
                },
            }
        )
    lines = [
        f"  job-{i:05d}: {{trigger: {{every: {60 + i}s}}, command: {{argv: ['true']}}}}"
        for i in range(members)
    ]
    head = f"apiVersion: studio/v1\nkind: ScheduleSet\nmetadata: {{name: {owner}}}\nschedules:\n"
    return head + "\n".join(lines) + "\n"


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


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, list[float]]:
    import httpx

    db = workdir / "state.db"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    env["LIONAGI_STUDIO_MAX_BODY_BYTES"] = str(16 * 1024 * 1024)
    argv = [sys.executable, os.path.abspath(__file__), "--serve", "--db", str(db)]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    base = f"http://{HOST}:{port}"
    out: dict[str, list[float]] = {"posts": [], "apply": [], "reapply": [], "ratio": []}
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            await _wait_ready(client, base, proc)
            await _posts(client, base, "warm", 20)
            await _apply(client, base, _document("warm", 20, args.format))
            for r in range(args.rounds):
                posts = await _posts(client, base, f"post-r{r}", args.members)
                text = _document(f"bench-r{r}", args.members, args.format)
                applied, writes = await _apply(client, base, text)
                if writes != args.members:
                    raise RuntimeError(f"the first apply wrote {writes}, not {args.members}")
                again, rewrites = await _apply(client, base, text)
                if rewrites != 0:
                    raise RuntimeError(f"the re-apply wrote {rewrites} schedules")
                out["posts"].append(posts)
                out["apply"].append(applied)
                out["reapply"].append(again)
                out["ratio"].append(posts / applied)
                print(
                    f"round {r + 1}: {args.members} POSTs {posts:.3f} s, apply {applied:.3f} s, "
                    f"re-apply {again:.3f} s, ratio {posts / applied:.1f}×",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def _fmt(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.3f}{unit} (min {min(values):.3f}, max {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--format", choices=("json", "yaml"), default="json", help="body format")
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
    print(
        f"{args.rounds} rounds, {args.members} schedules each way, SQLite, served app, "
        f"{args.format} body"
    )
    print(f"{args.members} POST /api/schedules:   median {_fmt(result['posts'], ' s')}")
    print(f"apply of {args.members} members:      median {_fmt(result['apply'], ' s')}")
    print(f"re-apply (writes nothing):  median {_fmt(result['reapply'], ' s')}")
    ratio = statistics.median(result["ratio"])
    print(f"POSTs / apply: {_fmt(result['ratio'], '×')}")
    print(f"target ≥ 10×: {'met' if ratio >= 10 else 'NOT met'}; ", end="")
    slowest = max(result["reapply"])
    print(
        f"re-apply ≤ 0.5 s: {'met' if statistics.median(result['reapply']) <= 0.5 else 'NOT met'}"
        f" (slowest {slowest:.3f} s)"
    )


if __name__ == "__main__":
    main()

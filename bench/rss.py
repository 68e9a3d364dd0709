"""Idle memory of `studio serve`: VmRSS after start-up and after N idle ticks.

Each of ROUNDS rounds starts the installed `studio serve` (beside this interpreter, else on
PATH, else `python -m studio_cli`) on a fresh database on a free 127.0.0.1 port, waits for
`GET /api/health` to answer, reads VmRSS (and VmHWM, the peak) from /proc/<pid>/status, lets
it run TICKS idle ticks (LIONAGI_STUDIO_TICK_SECONDS=TICK_SECONDS, so the ticks come quickly;
health's `last_tick_at` must have advanced), reads them again, and stops it with SIGINT. Two
databases: empty, and SCHEDULES enabled schedules none of which is due. Prints medians with
min–max. bench/README.md names no reference figure for memory; for scale, the reference's backend
(`li studio --no-frontend --no-open`, lionagi 0.36.0, when installed) is measured once after
start-up and after one of its 30 s ticks (`--no-reference` skips it).

    python bench/rss.py [--rounds 5] [--ticks 100] [--tick-seconds 0.1] [--schedules 10000]
                        [--no-reference]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _status_kib(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def _script(name: str) -> str | None:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def _seed(db: Path, n: int) -> None:
    import studio_state
    from studio_scheduler_core import ensure_schema

    async def seed() -> None:
        async with studio_state.connect(db) as conn:
            await ensure_schema(conn)
            now = time.time()
            await conn.execute("BEGIN")
            await conn.executemany(
                "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
                "action_command, action_command_args, next_fire_at, created_at, updated_at) "
                "VALUES (?, ?, 'interval', 86400, 'command', 'true', '[]', ?, ?, ?)",
                [(f"{i:012x}", f"s{i}", now + 86400 + i, now, now) for i in range(n)],
            )
            await conn.commit()

    asyncio.run(seed())


def _get_json(port: int, path: str) -> Any:
    import httpx

    response = httpx.get(f"http://{HOST}:{port}{path}", timeout=2.0)
    response.raise_for_status()
    return response.json()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def ours_round(workdir: Path, schedules: int, ticks: int, tick_seconds: float) -> dict[str, int]:
    db = workdir / "state.db"
    if schedules:
        _seed(db, schedules)
    port = _free_port()
    studio = _script("studio")
    argv = [studio] if studio else [sys.executable, "-m", "studio_cli"]
    argv += ["serve", "--host", HOST, "--port", str(port), "--db", str(db)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    env["LIONAGI_STUDIO_TICK_SECONDS"] = str(tick_seconds)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        health: Any = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"studio serve exited {proc.returncode}: {err[-400:]}")
            try:
                health = _get_json(port, "/api/health")
                break
            except Exception:
                time.sleep(0.1)
        if health is None:
            raise RuntimeError("studio serve did not answer /api/health within 60 s")
        started = _status_kib(proc.pid)
        first_tick = health["scheduler"]["last_tick_at"] or 0.0
        time.sleep(ticks * tick_seconds + 1.0)
        health = _get_json(port, "/api/health")
        if not (health["scheduler"]["last_tick_at"] or 0.0) > first_tick:
            raise RuntimeError(f"the tick did not advance: {health}")
        after = _status_kib(proc.pid)
        return {
            "start_rss": started["VmRSS"],
            "idle_rss": after["VmRSS"],
            "idle_hwm": after["VmHWM"],
        }
    finally:
        _stop(proc)


def reference_round(workdir: Path, li: str) -> dict[str, int] | str:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    env["HOME"] = str(workdir)
    env["LIONAGI_STATE_DB_URL"] = f"sqlite+aiosqlite:///{workdir / 'state.db'}"
    argv = [li, "studio", "--no-frontend", "--no-open", "--host", HOST, "--port", str(port)]
    proc = subprocess.Popen(
        argv, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                return f"exited {proc.returncode}: {err.strip().splitlines()[-1:]}"
            try:
                _get_json(port, "/health")  # the reference's health route
                break
            except Exception:
                time.sleep(0.2)
        else:
            return "did not answer /health within 90 s"
        # the server may run in a child of `li`; measure the process that listens
        pid = _listener_pid(proc.pid)
        started = _status_kib(pid)
        time.sleep(35)  # one 30 s tick
        after = _status_kib(pid)
        return {
            "start_rss": started["VmRSS"],
            "idle_rss": after["VmRSS"],
            "idle_hwm": after["VmHWM"],
        }
    finally:
        _stop(proc)


def _listener_pid(pid: int) -> int:
    """``pid``, or its only descendant when ``pid`` merely supervises a server child."""
    children: list[str] = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        children += path.read_text().split()
    return int(children[0]) if len(children) == 1 else pid


def _mib(values: list[int]) -> str:
    mib = [v / 1024 for v in values]
    return f"{statistics.median(mib):6.1f} ({min(mib):.1f}–{max(mib):.1f}) MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--tick-seconds", type=float, default=0.1)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (figures are medians over >= 5 rounds)")
    print(
        f"bench/rss.py — `studio serve` idle memory; {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}; {args.rounds} rounds; {args.ticks} idle ticks of "
        f"{args.tick_seconds:g} s"
    )
    print(f"{'database':26} {'after start-up':>26} {'after idle ticks':>26} {'peak (VmHWM)':>26}")
    for label, n in (("empty", 0), (f"{args.schedules:,} schedules", args.schedules)):
        rows = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
                rows.append(ours_round(Path(tmp), n, args.ticks, args.tick_seconds))
        print(
            f"{label:26} {_mib([r['start_rss'] for r in rows]):>26} "
            f"{_mib([r['idle_rss'] for r in rows]):>26} {_mib([r['idle_hwm'] for r in rows]):>26}"
        )
    li = None if args.no_reference else _script("li")
    if li:
        with tempfile.TemporaryDirectory(prefix="bench-rss-ref-") as tmp:
            got = reference_round(Path(tmp), li)
        if isinstance(got, str):
            print(f"reference (li studio --no-frontend): not measured, {got}")
        else:
            print(
                f"{'reference, empty (1 round)':26} {got['start_rss'] / 1024:19.1f} MiB "
                f"{got['idle_rss'] / 1024:19.1f} MiB {got['idle_hwm'] / 1024:19.1f} MiB"
                "   (after one 30 s tick; for scale, no target)"
            )
    else:
        print("reference: not measured (no `li` installed, or --no-reference)")


if __name__ == "__main__":
    main()

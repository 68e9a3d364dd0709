"""Scheduler tick figures: studio-scheduler-core beside the reference (lionagi 0.36.0).

Figures, each printed with the reference's figure from the same run and the
ratio reference / ours:
  - idle tick (nothing due) with 1,000 / 10,000 / 100,000 enabled schedules, in ms: ours the
    median (min–max) and p95 of TICKS ticks and the aiosqlite round trips one idle tick
    makes; the reference the median (min–max) of REF_TICKS ticks of its `_tick()`;
  - one tick with 10,000 schedules due and the global cap at 4 (4 fire, 9,996 defer with their
    first-deferral records written in one batched transaction), in ms: ours over ROUNDS
    rounds, each on a fresh database; the reference one round (it takes minutes);
  - due → exec latency: ours over FIRES fires of a `true` command with the real loop running
    (tick_seconds = 30), from each occurrence's due time to the moment its child exists, and
    the aiosqlite round trips of one complete fire; the reference over REF_FIRES `touch`
    fires due across one 30 s tick interval, with its real loop (the file's mtime is the exec).
The reference runs in an interpreter that can import `lionagi==0.36.0` (this one, or
`--reference-python`), in a fresh child process per figure; otherwise the script says so and
prints the documented reference anchors instead. The whole run takes about 10 minutes with the
reference (its 100k idle ticks and its 10k-due tick dominate), under a minute without.

    python bench/tick.py [--ticks 50] [--rounds 5] [--fires 200] [--sizes 1000,10000,100000]
                         [--ref-ticks 5] [--ref-fires 20] [--no-reference]
                         [--reference-python /path/to/venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _hops import HopCounter

ANCHORS = {"idle_10000_ms": 358.0, "deferred_10000_ms": 55_000.0}
ANCHOR_LATENCY = "up to 30"  # seconds: the reference fires on its 30 s tick
TARGETS = {"idle_ms": 5.0, "deferred_ms": 1000.0, "latency_p99_ms": 100.0}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _settings(**overrides: Any) -> Any:
    from studio_scheduler_core import SchedulerSettings

    env = {"PATH": "/usr/bin:/bin"}
    return SchedulerSettings(
        command_allowlist=("true", "sleep"), child_env=env, default_cwd="/", **overrides
    )


async def _bulk(
    db: Path, n: int, *, next_fire_at: float, spacing: float = 1.0, command: str = "true"
) -> None:
    import studio_state
    from studio_scheduler_core import ensure_schema

    async with studio_state.connect(db) as conn:
        await ensure_schema(conn)
        await conn.execute("BEGIN")
        await conn.executemany(
            "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, "
            "action_command, action_command_args, next_fire_at, created_at, updated_at) "
            "VALUES (?, ?, 'interval', 3600, 'command', ?, ?, ?, ?, ?)",
            [
                (f"{i:012x}", f"s{i}", command, args, next_fire_at + i * spacing, 1.0, 1.0)
                for i in range(n)
                for args in ['["60"]' if command == "sleep" else "[]"]
            ],
        )
        await conn.commit()


async def ours_idle(n: int, ticks: int) -> dict[str, Any]:
    from studio_scheduler_core import SchedulerEngine
    from studio_state import ManualClock

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "state.db"
        now = time.time()
        await _bulk(db, n, next_fire_at=now + 86400)
        clock = ManualClock(now)
        engine = SchedulerEngine(db, settings=_settings(), clock=clock)
        await engine.start(loop=False)
        try:
            await engine.tick_once()  # first tick runs the reaper; later ones are idle
            samples = []
            for _ in range(ticks):
                clock.advance(0.01)
                started = time.perf_counter()
                await engine.tick_once()
                samples.append((time.perf_counter() - started) * 1000)
            hops = HopCounter()
            try:
                clock.advance(0.01)
                await engine.tick_once()
            finally:
                hops.restore()
            return {
                "samples": samples,
                "median": statistics.median(samples),
                "p95": _pct(samples, 0.95),
                "hops": hops.count,
            }
        finally:
            await engine.stop()


async def ours_deferred(n: int) -> dict[str, float]:
    from studio_scheduler_core import SchedulerEngine
    from studio_state import ManualClock, fetch_value

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "state.db"
        now = time.time()
        # every fire blocks (`sleep 60`): the 4 slots stay held and everything else defers
        await _bulk(db, n, next_fire_at=now + 10, spacing=0.0001, command="sleep")
        clock = ManualClock(now)
        engine = SchedulerEngine(db, settings=_settings(max_scheduled_concurrent=4), clock=clock)
        await engine.start(loop=False)
        try:
            await engine.tick_once()  # reaper's first pass, nothing due yet
            clock.set(now + 20)
            started = time.perf_counter()
            report = await engine.tick_once()
            elapsed = (time.perf_counter() - started) * 1000
            records = await fetch_value(
                engine.conn,
                "SELECT COUNT(*) FROM schedule_runs WHERE status_reason_code = "
                "'schedule.deferred.capacity'",
            )
            counts = report.get("schedules") or {}
            return {
                "ms": elapsed,
                "fired": counts.get("fire", 0),
                "deferred": counts.get("defer", 0),
                "records": int(records or 0),
            }
        finally:
            await engine.stop()


async def ours_latency(fires: int) -> dict[str, float]:
    import studio_scheduler_core._fire.execute as fire_module
    from studio_scheduler_core import SchedulerEngine
    from studio_state import fetch_all

    spawned: dict[str, float] = {}
    original = fire_module.spawn_and_wait  # type: ignore[attr-defined]

    async def timed(argv: list[str], invocation_id: str, **kwargs: Any) -> Any:
        inner = kwargs.get("on_spawn")

        async def on_spawn(pid: int) -> None:
            spawned[invocation_id] = time.time()
            if inner is not None:
                await inner(pid)

        kwargs["on_spawn"] = on_spawn
        return await original(argv, invocation_id, **kwargs)

    fire_module.spawn_and_wait = timed  # type: ignore[attr-defined]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "state.db"
            first = time.time() + 2.0
            await _bulk(db, fires, next_fire_at=first, spacing=0.05)
            engine = SchedulerEngine(db, settings=_settings(tick_seconds=30.0))
            await engine.start()
            try:
                deadline = time.monotonic() + fires * 0.05 + 30
                while len(spawned) < fires and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                await engine.wait_idle()
                rows = await fetch_all(
                    engine.conn, "SELECT invocation_id, trigger_context FROM schedule_runs"
                )
            finally:
                await engine.stop()
            fire_hops = await _fire_round_trips(Path(tmp) / "hops.db")
    finally:
        fire_module.spawn_and_wait = original  # type: ignore[attr-defined]
    lat = [
        (spawned[r["invocation_id"]] - json.loads(r["trigger_context"])["due_at"]) * 1000
        for r in rows
        if r["invocation_id"] in spawned
    ]
    return {
        "n": len(lat),
        "p50": statistics.median(lat),
        "p99": _pct(lat, 0.99),
        "max": max(lat),
        "fire_hops": fire_hops,
    }


async def _fire_round_trips(db: Path) -> int:
    """aiosqlite round trips of one complete fire (admission, commit, spawn, terminal write)."""
    from studio_scheduler_core import SchedulerEngine
    from studio_state import ManualClock

    engine = SchedulerEngine(db, settings=_settings(), clock=ManualClock(time.time()))
    await engine.start(loop=False)
    try:
        created = await engine.service.create(
            {
                "name": "one",
                "trigger_type": "interval",
                "interval_sec": 3600,
                "action_kind": "command",
                "action_command": "true",
            }
        )
        hops = HopCounter()
        try:
            await engine.fire_now(created.id)
            await engine.wait_idle()
        finally:
            hops.restore()
        return hops.count
    finally:
        await engine.stop()


# --------------------------------------------------------------------------- reference

# Runs in a fresh interpreter that has lionagi 0.36.0. The engine gets the persistent state
# service, as the reference's served singleton does (`lionagi.studio.scheduler.engine.
# scheduler`); the default non-persistent one reopens the database on every call and would
# make the reference look far slower than it is when served.
REF_SCRIPT = r"""
import asyncio, json, os, sqlite3, sys, tempfile, time
from pathlib import Path

async def main(mode, n, ticks):
    tmp = tempfile.mkdtemp()
    db_path = Path(tmp) / "state.db"
    marks = Path(tmp) / "marks"
    marks.mkdir()
    os.environ["HOME"] = tmp
    os.environ["LIONAGI_STATE_DB_URL"] = f"sqlite+aiosqlite:///{db_path}"
    os.environ["LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT"] = "4"
    os.environ["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "sleep,touch"
    os.environ["LIONAGI_SCHEDULER_TZ"] = "UTC"
    from lionagi.state.db import StateDB
    db = StateDB(db_path)
    await db.open()
    now = time.time()
    if mode == "deferred":
        due, spacing, command, args = now - 10, 0.0001, "sleep", ["60"]
    elif mode == "latency":
        # spread over one 30 s tick interval, starting a little after the engine starts
        due, spacing, command, args = now + 3, 30.0 / n, "touch", [str(marks / "0")]
    else:
        due, spacing, command, args = now + 86400, 1.0, "sleep", ["60"]
    await db.create_schedule({
        "id": "000000000000", "name": "s0", "trigger_type": "interval", "interval_sec": 3600,
        "action_kind": "command", "action_command": command, "action_command_args": args,
        "next_fire_at": due, "enabled": 1, "action_cwd": tmp,
    })
    await db.close()
    conn = sqlite3.connect(db_path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(schedules)")]
    row = dict(zip(cols, conn.execute("SELECT * FROM schedules").fetchone()))
    rows = []
    for i in range(1, n):
        extra = {}
        if mode == "latency":
            extra["action_command_args"] = json.dumps([str(marks / str(i))])
        r = dict(row, id=f"{i:012x}", name=f"s{i}", next_fire_at=due + i * spacing, **extra)
        rows.append([r[c] for c in cols])
    marks_sql = ",".join("?" * len(cols))
    conn.executemany(f"INSERT INTO schedules ({','.join(cols)}) VALUES ({marks_sql})", rows)
    conn.commit(); conn.close()
    from lionagi.studio.scheduler.engine import SchedulerEngine
    from lionagi.studio.services.scheduler_state import _DBSchedulerStateService
    engine = SchedulerEngine(svc=_DBSchedulerStateService(persistent=True))
    if mode == "latency":
        await engine.start()
        # due within the first 33 s; its ticks come every 30 s from start: all fire by ~70 s
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline and len(list(marks.iterdir())) < n:
            await asyncio.sleep(0.2)
        stopped = time.time()
        await engine.stop()
        # a fire that has not run yet counts with its wait so far (a lower bound)
        lat, waiting = [], 0
        for i in range(n):
            mark = marks.joinpath(str(i))
            ran = mark.exists()
            waiting += not ran
            lat.append(((mark.stat().st_mtime if ran else stopped) - (due + i * spacing)) * 1000)
        print("RESULT " + json.dumps({"samples": lat, "waiting": waiting}))
        return
    engine._last_reaper_run = time.time()
    engine._last_checkpoint_run = time.time()
    engine._last_retention_run = time.time()
    samples = []
    for _ in range(ticks):
        started = time.perf_counter()
        await engine._tick()
        samples.append((time.perf_counter() - started) * 1000)
    tasks = list(engine._fire_tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print("RESULT " + json.dumps({"samples": samples, "fire_tasks": len(tasks)}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def _reference_python(args: argparse.Namespace) -> tuple[str | None, str]:
    candidates = [sys.executable] + ([args.reference_python] if args.reference_python else [])
    reasons = []
    for python in candidates:
        probe = subprocess.run(
            [
                python,
                "-c",
                "import lionagi.studio.scheduler.engine, lionagi; print(lionagi.__version__)",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "0.36.0":
            return python, "0.36.0"
        last = (probe.stderr.strip().splitlines() or [probe.stdout.strip() or "?"])[-1]
        reasons.append(f"{python}: {last}")
    return None, "; ".join(reasons)


def reference(
    python: str, mode: str, n: int, ticks: int, timeout: float
) -> tuple[list[float] | None, str]:
    """The reference's samples (ms) for ``mode``, or None and why."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "ref_tick.py"
        script.write_text(REF_SCRIPT, encoding="utf-8")
        try:
            proc = subprocess.run(
                [python, str(script), mode, str(n), str(ticks)],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return None, f"did not finish in {timeout:.0f} s"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
            samples = [float(v) for v in result["samples"]]
            note = f"{result['waiting']} not run yet" if result.get("waiting") else ""
            return (samples, note) if samples else (None, "no sample")
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
    return None, f"failed: {tail[0][:120]}"


# --------------------------------------------------------------------------- report


def _mmm(values: list[float], digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}–{max(values):.{digits}f})"
    )


def _ratio(ref: list[float] | None, ours: float) -> str:
    return f"{statistics.median(ref) / ours:,.0f}×" if ref else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=50, help="our idle ticks per size (>= 5)")
    parser.add_argument("--rounds", type=int, default=5, help="our 10k-due rounds (>= 5)")
    parser.add_argument("--fires", type=int, default=200)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--ref-ticks", type=int, default=5, help="reference idle ticks per size")
    parser.add_argument("--ref-fires", type=int, default=20, help="reference fires (one tick)")
    parser.add_argument("--reference-python", help="an interpreter with lionagi==0.36.0")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    if args.ticks < 5 or args.rounds < 5 or args.ref_ticks < 5:
        parser.error("--ticks, --rounds and --ref-ticks must be at least 5 (medians of >= 5)")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if shutil.which("true") is None:
        sys.exit("a `true` executable on PATH is required")
    # engine.stop() cancels the deferred figure's `sleep 60` children; that is expected here
    logging.getLogger("studio_launcher").setLevel(logging.ERROR)
    logging.getLogger("studio_scheduler_core").setLevel(logging.ERROR)
    print(
        f"bench/tick.py — {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    ref_python, ref_note = (None, "skipped") if args.no_reference else _reference_python(args)
    if ref_python:
        print(f"  reference: lionagi {ref_note} via {ref_python} (persistent state service)")
    else:
        print(f"  reference: NOT MEASURED ({ref_note}); bench/README.md anchors shown instead")
    ref_anchor = "" if ref_python else " (anchor)"

    print(
        f"\nidle tick (nothing due), ms: ours median (min–max) of {args.ticks} ticks, p95, "
        f"round trips; reference median (min–max) of {args.ref_ticks} ticks; ratio = ref/ours"
    )
    for n in sizes:
        ours = asyncio.run(ours_idle(n, args.ticks))
        ref: list[float] | None = None
        note = ""
        if ref_python:
            ref, why = reference(ref_python, "idle", n, args.ref_ticks, timeout=900)
            note = "" if ref else f"not run: {why}"
        elif n == 10_000:
            ref = [ANCHORS["idle_10000_ms"]]
        ref_text = (_mmm(ref, 0) + ref_anchor) if ref else note or "—"
        print(
            f"  {n:>7,} enabled   ours {_mmm(ours['samples'])}  p95 {ours['p95']:.2f}  "
            f"({ours['hops']:.0f} round trips)   reference {ref_text}   "
            f"{_ratio(ref, ours['median'])}"
        )
    print(f"  target: <= {TARGETS['idle_ms']:.0f} ms, flat in N")

    print(
        f"\ntick with 10,000 due, global cap 4, ms: ours median (min–max) of {args.rounds} "
        "rounds; reference one round (it takes minutes)"
    )
    results = [asyncio.run(ours_deferred(10_000)) for _ in range(args.rounds)]
    ms = [r["ms"] for r in results]
    last = results[-1]
    ref = None
    note = ""
    if ref_python:
        ref, why = reference(ref_python, "deferred", 10_000, 1, timeout=1500)
        note = "" if ref else f"not run: {why}"
    else:
        ref = [ANCHORS["deferred_10000_ms"]]
    ref_text = (f"{ref[0]:,.0f}" + ref_anchor) if ref else note
    print(
        f"  ours {_mmm(ms, 0)}  ({last['fired']:.0f} fired / {last['deferred']:.0f} deferred / "
        f"{last['records']:.0f} records)   reference {ref_text}   "
        f"{_ratio(ref, statistics.median(ms))}"
    )
    print(f"  target: <= {TARGETS['deferred_ms']:.0f} ms")

    print(f"\ndue -> exec latency, ms: ours {args.fires} fires of `true`, loop running (tick 30 s)")
    lat = asyncio.run(ours_latency(args.fires))
    print(
        f"  ours       p50 {lat['p50']:8.1f}   p99 {lat['p99']:8.1f}   max {lat['max']:8.1f}   "
        f"(n={lat['n']:.0f}; one fire = {lat['fire_hops']:.0f} round trips)"
    )
    if ref_python:
        ref, why = reference(ref_python, "latency", args.ref_fires, 1, timeout=400)
        if ref:
            late = f"; {why} after 100 s, counted at their wait so far" if why else ""
            print(
                f"  reference  p50 {statistics.median(ref):8.1f}   p99 {_pct(ref, 0.99):8.1f}   "
                f"max {max(ref):8.1f}   ({len(ref)} `touch` fires due across one 30 s tick "
                f"interval{late})   p99 ratio {_pct(ref, 0.99) / lat['p99']:,.0f}×"
            )
        else:
            print(f"  reference  not run: {why}")
    else:
        print(f"  reference  {ANCHOR_LATENCY} s (anchor: the 30 s tick)")
    print(f"  target: p99 <= {TARGETS['latency_p99_ms']:.0f} ms")


if __name__ == "__main__":
    main()

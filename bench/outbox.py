"""Outbox throughput: studio-outbox beside the reference (lionagi 0.36.0), as ratios.

Figures, each the median of ROUNDS rounds with min–max beside it:
  - enqueue rows/s, each in its own transaction; the same with a (unique) dedup key each;
    many enqueues inside one caller transaction (the transactional-outbox write); and
    `enqueue_many` of all the rows in one call (the reference has neither of the last two);
  - deliveries/s through a `/bin/true` notify template at concurrency 1 and 4;
and, without a reference (bench/README.md, each a ratio measured in the same run):
  - webhook deliveries/s at concurrency 16 to a loopback receiver (uvicorn, its own process)
    beside a bare httpx loop posting the same bodies (bench/outbox_webhook.py; target ≥ 60%);
  - enqueue with `synchronous=FULL` (the default, used by every figure above) beside
    `synchronous=NORMAL`, one transaction each and `enqueue_many` (target: FULL ≥ 50% of
    NORMAL with `enqueue_many`).
Every round runs both implementations one after the other, each in a fresh child process on
a fresh database, so machine load affects both alike. The reference runs in an interpreter
that has `lionagi==0.36.0` (this one if it can import it, else `--reference-python`); if none
can, the script says so and prints our figures alone. Round trips to the SQLite thread are
counted in one extra untimed pass and printed per operation.

    python bench/outbox.py [--rounds 5] [--enqueue-rows 1000] [--deliver-rows 200]
                           [--webhook-rows 1000] [--reference-python /path/to/venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import outbox_webhook
from _hops import HopCounter

# Both implementations get the same transport. The reference insists on an exact
# {deliver_to} element (it fails every send without one), and neither template has
# {payload}, so both write the payload JSON to the child's stdin.
TEMPLATE = ["/bin/true", "{deliver_to}"]
ENQUEUE_TARGET = 3.0
DELIVERY_TARGET = 5.0
WEBHOOK_TARGET = 0.60
SYNC_TARGET = 0.50
# CPU of the delivering process (its event loop and SQLite thread; not the children) per
# delivery, ms: steadier than throughput on a loaded machine.
LAST_CPU_MS = [0.0]
RAW_HOP_TARGET = 0.80  # enqueue (own transaction) vs a raw aiosqlite one-hop transaction
WEBHOOK_CONCURRENCY = 16
ANCHORS = {"enqueue_own": 890.0, "deliver": 155.0}  # bench/README.md, reference on a 2-core box

FIGURES = [
    ("enqueue_own", "enqueue, own transaction each (FULL)", "rows/s"),
    ("enqueue_dedup", "enqueue, own transaction + dedup key", "rows/s"),
    ("enqueue_caller_txn", "enqueue, inside one caller transaction", "rows/s"),
    ("enqueue_many", "enqueue_many, all rows in one call", "rows/s"),
    ("deliver_c1", "deliver /bin/true, concurrency 1", "/s"),
    ("deliver_c4", "deliver /bin/true, concurrency 4", "/s"),
]
# (label, ours key, anchor key, anchor label, unit, target ratio)
WAVE2 = [
    (
        f"webhook delivery, concurrency {WEBHOOK_CONCURRENCY}",
        "webhook",
        "bare_httpx",
        "bare httpx loop",
        "/s",
        WEBHOOK_TARGET,
    ),
    (
        f"webhook delivery, c{WEBHOOK_CONCURRENCY}, synchronous=NORMAL",
        "webhook_normal",
        "bare_httpx",
        "bare httpx loop",
        "/s",
        None,
    ),
    (
        "enqueue, own transaction each: FULL vs NORMAL",
        "enqueue_own",
        "enqueue_own_normal",
        "synchronous=NORMAL",
        "rows/s",
        None,
    ),
    (
        "enqueue_many: FULL vs NORMAL",
        "enqueue_many",
        "enqueue_many_normal",
        "synchronous=NORMAL",
        "rows/s",
        SYNC_TARGET,
    ),
]


# --------------------------------------------------------------------------- round trips


# --------------------------------------------------------------------------- ours


async def _ours_db(path: Path, synchronous: str = "full") -> Any:
    import studio_outbox
    import studio_state

    conn = await studio_state.open_connection(path, synchronous=synchronous)
    await studio_outbox.ensure_schema(conn)
    return conn


async def ours_enqueue(path: Path, rows: int, mode: str, synchronous: str = "full") -> float:
    import studio_outbox

    conn = await _ours_db(path, synchronous)
    try:
        started = time.perf_counter()
        if mode == "many":
            await studio_outbox.enqueue_many(
                conn,
                [{"kind": "bench", "deliver_to": "sink", "body": {"i": i}} for i in range(rows)],
            )
        elif mode == "caller_txn":
            await conn.execute("BEGIN IMMEDIATE")
            for i in range(rows):
                await studio_outbox.enqueue_dispatch(
                    conn, kind="bench", deliver_to="sink", body={"i": i}
                )
            await conn.commit()
        else:
            for i in range(rows):
                await studio_outbox.enqueue_dispatch(
                    conn,
                    kind="bench",
                    deliver_to="sink",
                    body={"i": i},
                    dedup_key=f"bench:{i}" if mode == "dedup" else None,
                )
        return rows / (time.perf_counter() - started)
    finally:
        await conn.close()


_RAW_INSERT = (
    "INSERT INTO dispatch_outbox (id, kind, deliver_to, payload, dedup_key, status, attempt, "
    "max_attempts, next_attempt_at, ack_required, ack_token, session_id, schedule_run_id, "
    "created_at, expires_at, updated_at) VALUES "
    "(?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING RETURNING id"
)
_RAW_TRANSITION = (
    "INSERT INTO status_transitions (id, entity_type, entity_id, previous_status, status, "
    "reason_code, reason_summary, evidence_refs, actor, metadata, created_at) "
    "VALUES (?, 'dispatch', ?, NULL, 'pending', 'dispatch.pending.enqueued', ?, NULL, ?, "
    "NULL, ?)"
)


async def raw_hop_enqueue(path: Path, rows: int) -> float:
    """The floor for one enqueue: the same two writes (the row, with its built payload, and
    its transition) as one BEGIN IMMEDIATE … COMMIT queued straight on aiosqlite's worker
    thread, with no validation, lock or ownership bookkeeping."""
    import studio_state

    conn = await _ours_db(path)

    def write(i: int) -> None:
        db = conn._conn
        now = time.time()
        dispatch_id = studio_state.new_id()
        payload = json.dumps(
            {
                "dispatch_id": dispatch_id,
                "kind": "bench",
                "deliver_to": "sink",
                "attempt": 0,
                "body": {"i": i},
                "created_at": now,
                "expires_at": None,
                "session_id": None,
                "schedule_run_id": None,
            },
            separators=(",", ":"),
        )
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            _RAW_INSERT,
            (
                dispatch_id,
                "bench",
                "sink",
                payload,
                None,
                8,
                now,
                0,
                None,
                None,
                None,
                now,
                None,
                now,
            ),
        ).fetchall()
        db.execute(
            _RAW_TRANSITION,
            (studio_state.new_id(), dispatch_id, "enqueued kind=bench", "studio_outbox", now),
        )
        db.execute("COMMIT")

    try:
        started = time.perf_counter()
        for i in range(rows):
            await conn._execute(write, i)
        return rows / (time.perf_counter() - started)
    finally:
        await conn.close()


async def ours_deliver(path: Path, rows: int, concurrency: int) -> float:
    import studio_outbox

    conn = await _ours_db(path)
    try:
        await studio_outbox.enqueue_many(
            conn, [{"kind": "bench", "deliver_to": "sink", "body": {"i": i}} for i in range(rows)]
        )
        started, cpu = time.perf_counter(), time.process_time()
        counts = await studio_outbox.deliver_due_dispatches(
            conn, notify_template=TEMPLATE, limit=rows, concurrency=concurrency
        )
        elapsed = time.perf_counter() - started
        LAST_CPU_MS[0] = (time.process_time() - cpu) * 1000 / rows
        assert counts["delivered"] == rows, counts
        return rows / elapsed
    finally:
        await conn.close()


async def ours_hops(path: Path) -> dict[str, float]:
    import studio_outbox

    conn = await _ours_db(path)
    hops = HopCounter()
    n = 50
    try:
        out: dict[str, float] = {}
        for mode in ("own", "dedup_new", "dedup_existing", "caller_txn"):
            hops.count = 0
            if mode == "caller_txn":
                await conn.execute("BEGIN IMMEDIATE")
                hops.count = 0
            for i in range(n):
                await studio_outbox.enqueue_dispatch(
                    conn,
                    kind="bench",
                    deliver_to="sink",
                    dedup_key=None if mode in ("own", "caller_txn") else f"hop:{i}",
                )
            out[f"enqueue_{mode}"] = hops.count / n
            if mode == "caller_txn":
                await conn.commit()
        hops.count = 0
        await studio_outbox.enqueue_many(conn, [{"kind": "bench", "deliver_to": "s"}] * n)
        out["enqueue_many"] = hops.count / n
        for concurrency in (1, 4):
            await studio_outbox.enqueue_many(
                conn, [{"kind": "bench", "deliver_to": "sink"} for _ in range(n)]
            )
            hops.count = 0
            counts = await studio_outbox.deliver_due_dispatches(
                conn, notify_template=TEMPLATE, limit=n, concurrency=concurrency
            )
            assert counts["delivered"] == n, counts
            out[f"deliver_c{concurrency}"] = hops.count / n
        return out
    finally:
        hops.restore()
        await conn.close()


async def ours_round(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    raw_first = args.round % 2 == 0  # alternate the order of ours and the raw floor
    raw = await raw_hop_enqueue(workdir / "r0.db", args.enqueue_rows) if raw_first else None
    own = await ours_enqueue(workdir / "e1.db", args.enqueue_rows, "own")
    if raw is None:
        raw = await raw_hop_enqueue(workdir / "r0.db", args.enqueue_rows)
    quick: dict[str, Any] = {
        "enqueue_own": own,
        "enqueue_raw_hop": raw,
        "deliver_c1": await ours_deliver(workdir / "d1.db", args.deliver_rows, 1),
        "deliver_c1_cpu": LAST_CPU_MS[0],
        "deliver_c4": await ours_deliver(workdir / "d4.db", args.deliver_rows, 4),
        "deliver_c4_cpu": LAST_CPU_MS[0],
    }
    if args.quick:
        return quick
    return {
        **quick,
        "enqueue_dedup": await ours_enqueue(workdir / "e2.db", args.enqueue_rows, "dedup"),
        "enqueue_caller_txn": await ours_enqueue(
            workdir / "e3.db", args.enqueue_rows, "caller_txn"
        ),
        "enqueue_many": await ours_enqueue(workdir / "e4.db", args.enqueue_rows, "many"),
        "enqueue_own_normal": await ours_enqueue(
            workdir / "n1.db", args.enqueue_rows, "own", "normal"
        ),
        "enqueue_many_normal": await ours_enqueue(
            workdir / "n4.db", args.enqueue_rows, "many", "normal"
        ),
        **await outbox_webhook.round_pair(
            workdir,
            args.receiver_url,
            args.webhook_rows,
            WEBHOOK_CONCURRENCY,
            bare_first=args.round % 2 == 0,  # alternate the order between rounds
        ),
    }


# --------------------------------------------------------------------------- reference


async def _ref_db(path: Path) -> Any:
    from lionagi.state.db import StateDB

    db = StateDB(path)
    await db.open()
    return db


async def ref_enqueue(path: Path, rows: int, dedup: bool) -> float:
    from lionagi.dispatch.outbox import enqueue_dispatch

    db = await _ref_db(path)
    try:
        started = time.perf_counter()
        for i in range(rows):
            await enqueue_dispatch(
                db,
                kind="bench",
                deliver_to="sink",
                body={"i": i},
                dedup_key=f"bench:{i}" if dedup else None,
            )
        return rows / (time.perf_counter() - started)
    finally:
        await db.close()


async def ref_deliver(path: Path, rows: int) -> float:
    from lionagi.dispatch.outbox import deliver_due_dispatches, enqueue_dispatch

    db = await _ref_db(path)
    try:
        for i in range(rows):
            await enqueue_dispatch(db, kind="bench", deliver_to="sink", body={"i": i})
        started, cpu = time.perf_counter(), time.process_time()
        counts = await deliver_due_dispatches(
            db, now=time.time() + 1, notify_template=list(TEMPLATE)
        )
        elapsed = time.perf_counter() - started
        LAST_CPU_MS[0] = (time.process_time() - cpu) * 1000 / rows
        assert counts["delivered"] == rows, counts
        return rows / elapsed
    finally:
        await db.close()


async def ref_hops(path: Path) -> dict[str, float]:
    from lionagi.dispatch.outbox import deliver_due_dispatches, enqueue_dispatch

    db = await _ref_db(path)
    hops = HopCounter()
    n = 50
    try:
        out: dict[str, float] = {}
        for mode in ("own", "dedup_new", "dedup_existing"):
            hops.count = 0
            for i in range(n):
                await enqueue_dispatch(
                    db,
                    kind="bench",
                    deliver_to="sink",
                    dedup_key=None if mode == "own" else f"hop:{i}",
                )
            out[f"enqueue_{mode}"] = hops.count / n
        hops.count = 0
        counts = await deliver_due_dispatches(
            db, now=time.time() + 1, notify_template=list(TEMPLATE)
        )
        out["deliver_serial"] = hops.count / max(counts["delivered"], 1)
        return out
    finally:
        hops.restore()
        await db.close()


async def ref_round(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    delivered = await ref_deliver(workdir / "rd.db", args.deliver_rows)
    return {
        "enqueue_own": await ref_enqueue(workdir / "re1.db", args.enqueue_rows, False),
        "enqueue_dedup": None
        if args.quick
        else await ref_enqueue(workdir / "re2.db", args.enqueue_rows, True),
        "enqueue_caller_txn": None,  # it always opens its own transaction (cannot join one)
        "enqueue_many": None,  # it has no batch enqueue
        # Its loop is serial: one figure, compared with both of ours.
        "deliver_c1": delivered,
        "deliver_c4": delivered,
        "deliver_cpu": LAST_CPU_MS[0],
    }


# --------------------------------------------------------------------------- driver


def _worker(which: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix=f"bench-outbox-{which}-") as tmp:
        workdir = Path(tmp)
        if args.hops:
            result: dict[str, Any] = asyncio.run(
                (ours_hops if which == "ours" else ref_hops)(workdir / "hops.db")
            )
        else:
            result = asyncio.run((ours_round if which == "ours" else ref_round)(workdir, args))
    print("RESULT " + json.dumps(result), flush=True)


def _before_env(before: str | None) -> dict[str, str] | None:
    """The environment of a worker that imports the packages of an older checkout."""
    if not before:
        return None
    paths = sorted(str(p) for p in Path(before).glob("packages/*/src"))
    if not paths:
        raise SystemExit(f"--before {before}: no packages/*/src directories there")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run_worker(
    python: str,
    which: str,
    args: argparse.Namespace,
    hops: bool,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    argv = [
        python,
        os.path.abspath(__file__),
        "--worker",
        which,
        "--enqueue-rows",
        str(args.enqueue_rows),
        "--deliver-rows",
        str(args.deliver_rows),
        "--webhook-rows",
        str(args.webhook_rows),
        "--receiver-url",
        args.receiver_url or "",
        "--round",
        str(args.round),
    ]
    if hops:
        argv.append("--hops")
    if args.quick:
        argv.append("--quick")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    raise RuntimeError(f"{which} worker failed (exit {proc.returncode}): " + " | ".join(tail))


def _reference_python(args: argparse.Namespace) -> tuple[str | None, str]:
    candidates = [sys.executable] + ([args.reference_python] if args.reference_python else [])
    reasons = []
    for python in candidates:
        probe = subprocess.run(
            [python, "-c", "import lionagi, lionagi.dispatch.outbox; print(lionagi.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if probe.returncode == 0:
            version = probe.stdout.strip()
            if version != "0.36.0":
                reasons.append(f"{python}: lionagi {version}, not 0.36.0")
                continue
            return python, version
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        reasons.append(f"{python}: {last}")
    return None, "; ".join(reasons)


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):9.0f}  ({min(values):.0f}–{max(values):.0f})"


def _fmt2(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--enqueue-rows", type=int, default=1000)
    parser.add_argument("--deliver-rows", type=int, default=200)
    parser.add_argument("--webhook-rows", type=int, default=1000)
    parser.add_argument(
        "--receiver",
        choices=["asyncio", "uvicorn"],
        default="asyncio",
        help="the loopback webhook receiver (default: a minimal asyncio HTTP/1.1 server)",
    )
    parser.add_argument("--reference-python", help="an interpreter with lionagi==0.36.0")
    parser.add_argument(
        "--before",
        help="a directory holding an older checkout (its packages/*/src): measured as a third "
        "implementation in every round, beside ours and the reference",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only enqueue (own transaction, and its raw one-hop floor) and /bin/true delivery",
    )
    parser.add_argument("--worker", choices=["ours", "ref"], help=argparse.SUPPRESS)
    parser.add_argument("--hops", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--receiver-url", help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args)
        return
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (figures are medians over >= 5 rounds)")

    ref_python, ref_note = _reference_python(args)
    import sqlite3

    print("studio-outbox benchmark (bench/outbox.py)")
    print(
        f"  python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  {args.rounds} rounds; enqueue {args.enqueue_rows} rows, deliver "
        f"{args.deliver_rows} rows per figure per round; template {json.dumps(TEMPLATE)}"
    )
    if ref_python:
        print(f"  reference: lionagi {ref_note} via {ref_python}")
    else:
        print(f"  reference: NOT MEASURED — lionagi 0.36.0 cannot be imported ({ref_note})")
    if not args.quick:
        print(
            f"  webhooks: {args.webhook_rows} rows per figure per round, concurrency "
            f"{WEBHOOK_CONCURRENCY}, receiver: {args.receiver} on 127.0.0.1 (its own process)"
        )
    ours: dict[str, list[float]] = {}
    before: dict[str, list[float]] = {}
    ref: dict[str, list[float]] = {key: [] for key, _, _ in FIGURES}
    ref_cpu: list[float] = []
    before_env = _before_env(args.before)
    if args.before:
        print(f"  before: the packages of {args.before} (PYTHONPATH), in every round")
    receiver = contextlib.nullcontext("") if args.quick else outbox_webhook.receiver(args.receiver)
    with receiver as receiver_url:
        args.receiver_url = receiver_url
        for number in range(1, args.rounds + 1):
            args.round = number
            # Rotate which implementation runs first, so load drifts hit all of them alike.
            order = ["ours", "before", "ref"]
            order = order[number % 3 :] + order[: number % 3]
            for which in order:
                if which == "ours":
                    got = _run_worker(sys.executable, "ours", args, hops=False)
                    for key, value in got.items():
                        ours.setdefault(key, []).append(value)
                elif which == "before" and before_env is not None:
                    got = _run_worker(sys.executable, "ours", args, hops=False, env=before_env)
                    for key, value in got.items():
                        before.setdefault(key, []).append(value)
                elif which == "ref" and ref_python:
                    got = _run_worker(ref_python, "ref", args, hops=False)
                    for key in ref:
                        if got[key] is not None:
                            ref[key].append(got[key])
                    ref_cpu.append(got["deliver_cpu"])
            print(f"  round {number}/{args.rounds} done", flush=True)

    print()
    head = f"{'figure':42} {'ours: median (min–max)':>26} {'reference':>26} {'ratio':>7}"
    if before:
        head += f" {'before: median (min–max)':>26} {'ratio':>7} {'ours/before':>11}"
    print(head)
    print("-" * len(head))
    verdicts = []
    for key, label, unit in FIGURES:
        if key not in ours:
            continue
        ours_text = _fmt(ours[key]) + f" {unit}"
        before_text = ""
        if before.get(key):
            before_text = _fmt(before[key]) + f" {unit}"
            gain = statistics.median(ours[key]) / statistics.median(before[key])
            before_ratio = ""
            if ref[key]:
                r = statistics.median(before[key]) / statistics.median(ref[key])
                before_ratio = f"{r:6.1f}×"
            before_text = f" {before_text:>26} {before_ratio:>7} {gain:10.2f}×"
        if ref[key]:
            ratio = statistics.median(ours[key]) / statistics.median(ref[key])
            ref_text = _fmt(ref[key]) + f" {unit}"
            ratio_text = f"{ratio:6.1f}×"
            target = ENQUEUE_TARGET if key.startswith("enqueue") else DELIVERY_TARGET
            if key in ("enqueue_own", "deliver_c1", "deliver_c4"):
                verdicts.append(
                    f"  {label}: {ratio:.1f}× (target ≥ {target:g}×) "
                    + ("met" if ratio >= target else "NOT MET")
                )
        else:
            why = {
                "enqueue_caller_txn": " (cannot join a caller txn)",
                "enqueue_many": " (no batch)",
            }
            ref_text = "n/a" + (why.get(key, "") if ref_python else "")
            ratio_text = ""
        print(f"{label:42} {ours_text:>26} {ref_text:>26} {ratio_text:>7}{before_text}")
    print()
    raw_ratio = statistics.median(ours["enqueue_own"]) / statistics.median(ours["enqueue_raw_hop"])
    verdicts.append(
        f"  enqueue, own transaction each vs a raw aiosqlite one-hop transaction doing the same "
        f"writes ({_fmt(ours['enqueue_raw_hop']).strip()} rows/s): {raw_ratio:.0%} "
        f"(target ≥ {RAW_HOP_TARGET:.0%}) " + ("met" if raw_ratio >= RAW_HOP_TARGET else "NOT MET")
    )
    if before.get("enqueue_raw_hop"):
        b = statistics.median(before["enqueue_own"]) / statistics.median(before["enqueue_raw_hop"])
        verdicts.append(f"    before: {b:.0%} of its own run's raw floor")
    print("CPU of the delivering process per delivery (ms; children excluded):")
    for key in ("deliver_c1_cpu", "deliver_c4_cpu"):
        line = f"  {key[:10]}: ours {_fmt2(ours[key])}"
        if before.get(key):
            line += f"   before {_fmt2(before[key])}"
        if ref_cpu:
            line += f"   reference (serial) {_fmt2(ref_cpu)}"
        print(line)
    print()
    print("bench/README.md targets (ratios measured in this run):")
    print("\n".join(verdicts))
    print(
        "bench/README.md anchors for scale (reference on a 2-core machine): "
        f"enqueue {ANCHORS['enqueue_own']:.0f} rows/s, delivery {ANCHORS['deliver']:.0f}/s; "
        f"ours here: {statistics.median(ours['enqueue_own']) / ANCHORS['enqueue_own']:.1f}× and "
        f"{statistics.median(ours['deliver_c4']) / ANCHORS['deliver']:.1f}× those."
    )

    if not args.quick:
        _print_wave2(ours)

    print()
    print("round trips to the SQLite thread, per operation (one untimed pass of 50):")
    mine = _run_worker(sys.executable, "ours", args, hops=True)
    older = (
        _run_worker(sys.executable, "ours", args, hops=True, env=before_env)
        if before_env is not None
        else {}
    )
    theirs = _run_worker(ref_python, "ref", args, hops=True) if ref_python else {}
    rows = [
        ("enqueue, own transaction", "enqueue_own", "enqueue_own"),
        ("enqueue, new dedup key", "enqueue_dedup_new", "enqueue_dedup_new"),
        ("enqueue, existing dedup key", "enqueue_dedup_existing", "enqueue_dedup_existing"),
        ("enqueue, inside a caller transaction", "enqueue_caller_txn", None),
        ("enqueue_many, per row (50 in one call)", "enqueue_many", None),
        ("delivery, concurrency 1", "deliver_c1", "deliver_serial"),
        ("delivery, concurrency 4", "deliver_c4", "deliver_serial"),
    ]
    for label, ours_key, ref_key in rows:
        other = f"{theirs[ref_key]:.1f}" if ref_key and ref_key in theirs else "n/a"
        was = f"   before {older[ours_key]:5.1f}" if ours_key in older else ""
        print(f"  {label:38} ours {mine[ours_key]:5.1f}{was}   reference {other}")


def _print_wave2(ours: dict[str, list[float]]) -> None:
    print()
    print("bench/README.md (ours beside an anchor measured in the same run):")
    head = f"{'figure':46} {'ours: median (min–max)':>26} {'anchor: median (min–max)':>26}"
    print(head + f" {'ratio':>6}  target")
    print("-" * (len(head) + 16))
    for label, key, anchor_key, anchor, unit, target in WAVE2:
        ratio = statistics.median(ours[key]) / statistics.median(ours[anchor_key])
        verdict = (
            "—"
            if target is None
            else f"≥ {target:.0%} " + ("met" if ratio >= target else "NOT MET")
        )
        print(
            f"{label:46} {_fmt(ours[key]) + ' ' + unit:>26} "
            f"{_fmt(ours[anchor_key]) + ' ' + unit:>26} {ratio:6.0%}  {verdict}"
        )
        print(f"{'':46} {'':>26} {'(' + anchor + ')':>26}")
    ours_cpu, bare_cpu = ours["webhook_cpu"], ours["bare_httpx_cpu"]
    print(
        f"{'webhook delivery, CPU per delivery':46} "
        f"{f'{statistics.median(ours_cpu):.2f} ({min(ours_cpu):.2f}–{max(ours_cpu):.2f}) ms':>26} "
        f"{f'{statistics.median(bare_cpu):.2f} ({min(bare_cpu):.2f}–{max(bare_cpu):.2f}) ms':>26} "
        f"{statistics.median(bare_cpu) / statistics.median(ours_cpu):6.0%}  (bare / ours)"
    )


if __name__ == "__main__":
    main()

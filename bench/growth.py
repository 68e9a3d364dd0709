"""Hot queries against growing history: each one's cost at 0, 100k and 1M terminal rows.

Issue 18 item 1: every hot query must cost the same however much terminal history the database
holds (target: ratio to the empty database <= 1.5x). One database is built with the packages'
real migrations (`studio_scheduler_core.ensure_schema`, which applies studio-state's and
studio-outbox's too) and a constant live set: 100 enabled interval schedules (10 due), 4
running runs with their invocations, 40 pending dispatch rows (20 due) and 2 delivering, plus
one full page (100) of old terminal runs of the listed schedule, of old terminal ad-hoc runs
and of terminal dispatches, so a page holds as many rows at 0 history as at 1M. Terminal
history is then added in stages (0 -> 100k -> 1M rows of each of: terminal `dispatch_outbox`
rows, terminal `schedule_runs` spread over the 100 schedules with their terminal `invocations`,
terminal ad-hoc `schedule_runs` (no schedule, `queued_at` set; no invocation rows, which the
ad-hoc list does not read), and `status_transitions` rows); each stage is kept as a file of its
own. Every hot query is timed through aiosqlite as the packages run it (the real function where
one exists, else the exact SQL, named by where it comes from) on one connection per size, the
sizes taking turns call by call, so load from other work lands on every size alike (timing one
size after another made the ratios mostly the load of the moment). Every dispatch row carries
the same payload, so a page decodes the same bytes at every size. The delivery write step
(claim + outcome with their transition rows) runs in a transaction that is rolled back: every
call claims the same row, and no fsync is timed. Separately, `GET /api/schedules`'s first page
is timed at 1k and 100k schedules, the same way.

Each figure is the median of REPS calls (min–max) in ms. A query whose ratio misses the target
gets its EXPLAIN QUERY PLAN and the index or rewrite that would fix it. The history is built
with executemany in large batches inside one transaction with `synchronous=OFF` (the build
only; the timed connections have Studio's own settings). `--db-dir DIR` keeps the built
files in DIR and reuses them (migrated to the code's schema first) on the next run.

    python bench/growth.py [--sizes 0,100000,1000000] [--reps 15] [--schedules 1000,100000]
                           [--db-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiosqlite

import studio_outbox
import studio_scheduler_core
import studio_state
from studio_outbox import _delivery, _drive, _steps

TARGET = 1.5
NOW = 1_800_000_000.0
SCHEDULES = 100
TYPES = ("cron", "interval", "github_poll")  # the engine's registered trigger types
BATCH = 50_000
PAGE = 100  # the page size every list figure reads (GET /api/... default)


@dataclass
class HotQuery:
    """One hot query: how the packages run it, and the SQL it sends (for EXPLAIN)."""

    name: str
    source: str
    run: Callable[[aiosqlite.Connection, dict[str, Any]], Awaitable[object]]
    sql: list[tuple[str, tuple[Any, ...]]]
    fix: str
    costs: dict[int, list[float]] = field(default_factory=dict)


# --------------------------------------------------------------------------- the queries

_DUE_SQL = (
    "SELECT id, trigger_type, next_fire_at, action_kind, overlap_policy, threshold_config, "
    "max_runs, budget_usd, budget_tokens FROM schedules WHERE enabled = 1 AND next_fire_at <= ? "
    "AND trigger_type IN (?, ?, ?) ORDER BY next_fire_at, id LIMIT ?"
)
_DUE_COUNT_SQL = (
    "SELECT COUNT(*) AS n, MIN(next_fire_at) AS oldest FROM schedules "
    "WHERE enabled = 1 AND next_fire_at <= ?"
)
_NEXT_WAKE_SQL = (
    "SELECT id, next_fire_at FROM schedules WHERE enabled = 1 "
    "AND next_fire_at IS NOT NULL AND trigger_type IN (?, ?, ?) "
    "ORDER BY next_fire_at, id LIMIT ?"
)
_REAP_RUNS_SQL = (
    "SELECT r.id, r.invocation_id, r.child_pid, r.child_started_at, r.fired_at, "
    "s.timeout_sec FROM schedule_runs r LEFT JOIN schedules s ON s.id = r.schedule_id "
    "WHERE r.status = 'running' AND r.leased_by IS NULL AND r.fired_at < ?"
)
_REAP_INVOCATIONS_SQL = (
    "SELECT i.id, i.schedule_run_id FROM invocations i "
    "LEFT JOIN schedule_runs r ON r.id = i.schedule_run_id "
    "WHERE i.status = 'running' AND i.started_at < ? AND (r.id IS NULL OR r.leased_by IS NULL)"
)
_LEASED_SQL = (
    "SELECT id, invocation_id, leased_by, lease_expires_at, lease_attempts, child_pid, "
    "child_started_at FROM schedule_runs WHERE status = 'running' AND leased_by IS NOT NULL"
)


async def _backlog(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    return await studio_outbox.dispatch_backlog(conn, now=NOW)


async def _delivery_scan(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    # what a delivery pass and the engine's wake-up read: the due rows, and the next due time
    rows = await _steps.scan(conn, NOW, 100)
    assert rows, "nothing due"
    return rows, await studio_outbox.next_due_at(conn)


async def _claim_outcome(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    # one delivery write step's statements: claim a due row, record its send's outcome (with
    # their transition rows); rolled back, so every call claims the same row and no fsync is
    # timed (the statements' cost is what could grow with history)
    rows = ctx["due"][:1]

    def body(db: sqlite3.Connection) -> object:
        db.execute("BEGIN IMMEDIATE")
        try:
            _, _, claimed = _drive.run_sync(db, _delivery.step_steps(NOW, [], [], rows, "bench"))
            done = [(claimed[0], studio_outbox.TransportResult.success(), NOW)]
            applied, _, _ = _drive.run_sync(db, _delivery.step_steps(NOW, [], done, [], "bench"))
            assert len(applied) == 1, applied
            return applied
        finally:
            db.execute("ROLLBACK")

    return await studio_state.run_sync(conn, body)


async def _outbox_page(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    # what GET /api/dispatch runs: one page, then the total
    rows = await studio_outbox.list_dispatches(conn, limit=100)
    return rows, await studio_outbox.count_dispatches(conn)


async def _due_scan(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    due = await conn.execute_fetchall(_DUE_SQL, (NOW, *TYPES, 1000))
    count = await studio_state.fetch_value(conn, _DUE_COUNT_SQL, (NOW,))
    wake = await studio_state.fetch_all(conn, _NEXT_WAKE_SQL, (*TYPES, 1))
    assert len(list(due)) == count == 10, count
    return wake


async def _running(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    cutoff = NOW - 7200.0
    runs = await studio_state.fetch_all(conn, _REAP_RUNS_SQL, (cutoff,))
    invocations = await studio_state.fetch_all(conn, _REAP_INVOCATIONS_SQL, (cutoff,))
    leased = await studio_state.fetch_all(conn, _LEASED_SQL)
    assert len(runs) == 4 and len(invocations) == 4 and leased == [], (runs, invocations)
    return runs


async def _schedules_page(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    rows, total = await ctx["service"].list(limit=100, offset=0)
    assert len(rows) == 100 and total == ctx["schedules"], total
    return rows


async def _runs_page(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    rows, total = await ctx["service"].list_runs(ctx["schedule_id"], limit=100, offset=0)
    return rows, total


async def _adhoc_page(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    # what GET /api/runs runs: one page of ad-hoc runs and their total
    rows, total = await ctx["adhoc"].list(limit=100, offset=0)
    assert len(rows) == PAGE and total == ctx["adhoc_rows"], (len(rows), total)
    return rows, total


async def _dashboard_page(conn: aiosqlite.Connection, ctx: dict[str, Any]) -> object:
    # the dashboard's runs page: every run (scheduled, follow-up, ad-hoc) and the exact total
    rows, total = await studio_scheduler_core.read_runs_page(
        conn, status=None, zones=True, limit=PAGE, offset=0
    )
    assert len(rows) == PAGE and total == ctx["all_runs"], (len(rows), total)
    return rows, total


_ADHOC_WHERE = "schedule_id IS NULL AND queued_at IS NOT NULL"


def hot_queries(schedule_id: str) -> list[HotQuery]:
    at = (NOW,)
    return [
        HotQuery(
            "outbox dispatch_backlog",
            "studio_outbox.dispatch_backlog (engine health, every 5 s)",
            _backlog,
            [
                (
                    "SELECT count(*) AS n, min(next_attempt_at) AS oldest FROM dispatch_outbox "
                    "INDEXED BY idx_dispatch_outbox_due "
                    "WHERE status IN ('pending', 'delivering') AND next_attempt_at <= ?",
                    at,
                ),
                ("SELECT status, count(*) AS n FROM dispatch_outbox GROUP BY status", ()),
            ],
            "studio-outbox: the engine needs only `due`: give it a due-only call (the first "
            "statement alone, already on idx_dispatch_outbox_due). by_status: count the live "
            "statuses only, from a covering partial index\n"
            "      CREATE INDEX idx_dispatch_outbox_live ON dispatch_outbox(status, "
            "next_attempt_at) WHERE status IN ('pending', 'delivering');\n"
            "      SELECT status, count(*) FROM dispatch_outbox WHERE status IN ('pending', "
            "'delivering') GROUP BY status;\n"
            "      and keep terminal counts out of the hot path (a counter row per status "
            "updated in the transition's own transaction, or only on the health endpoint).",
        ),
        HotQuery(
            "outbox delivery scan + next due",
            "studio_outbox delivery pass's scan (limit 100) + studio_outbox.next_due_at",
            _delivery_scan,
            [(_steps._SCAN, (NOW, 100, NOW, NOW, 100))],
            "studio-outbox: both read the partial indexes on live statuses "
            "(idx_dispatch_outbox_due, idx_dispatch_outbox_expiry)",
        ),
        HotQuery(
            "outbox claim + outcome (write step)",
            "studio_outbox delivery write step: guarded claim UPDATE + outcome UPDATE + "
            "transition rows (rolled back)",
            _claim_outcome,
            [],
            "studio-outbox: guarded UPDATEs by primary key; transitions append",
        ),
        HotQuery(
            "outbox list + total, first page",
            "studio_outbox.list_dispatches(limit=100) + count_dispatches() (GET /api/dispatch)",
            _outbox_page,
            [
                (
                    "SELECT id, kind, deliver_to, payload, dedup_key, status, attempt, "
                    "max_attempts, next_attempt_at, ack_required, session_id, schedule_run_id, "
                    "last_error, created_at, expires_at, updated_at FROM dispatch_outbox "
                    "ORDER BY rowid DESC LIMIT ? OFFSET ?",
                    (100, 0),
                ),
                ("SELECT coalesce(sum(n), 0) AS n FROM dispatch_outbox_counts", ()),
            ],
            "studio-outbox / studio-api: the page (rowid DESC) is flat; the unfiltered "
            "count(*) reads the whole table (smallest index). Bound it: "
            "`SELECT count(*) FROM (SELECT 1 FROM dispatch_outbox LIMIT 10001)` "
            "(answer 'more than 10,000'), or a counter row maintained with each insert/purge; "
            "page further with keyset `WHERE rowid < :last ORDER BY rowid DESC LIMIT n` "
            "instead of OFFSET.",
        ),
        HotQuery(
            "engine due-schedule scan",
            "studio_scheduler_core evaluator due_query + the tick's due COUNT + next-wake "
            "query (exact SQL)",
            _due_scan,
            [(_DUE_SQL, (NOW, *TYPES, 1000)), (_DUE_COUNT_SQL, at), (_NEXT_WAKE_SQL, (*TYPES, 1))],
            "none needed (idx_schedules_due)",
        ),
        HotQuery(
            "running-runs scan",
            "studio_scheduler_core reap_stale's two SELECTs + recover_abandoned's (exact SQL)",
            _running,
            [
                (_REAP_RUNS_SQL, (NOW - 7200.0,)),
                (_REAP_INVOCATIONS_SQL, (NOW - 7200.0,)),
                (_LEASED_SQL, ()),
            ],
            "none needed (idx_schedule_runs_running, idx_invocations_running)",
        ),
        HotQuery(
            "a schedule's runs page",
            "studio_scheduler_core.ScheduleService.list_runs(limit=100) "
            "(GET /api/schedules/{id}/runs)",
            _runs_page,
            [
                ("SELECT * FROM schedules WHERE id = ?", (schedule_id,)),
                (
                    "SELECT coalesce(sum(n), 0) FROM schedule_run_counts WHERE schedule_id = ?",
                    (schedule_id,),
                ),
                (
                    "SELECT * FROM schedule_runs WHERE schedule_id = ? "
                    "ORDER BY fired_at DESC, created_at DESC, id DESC LIMIT ? OFFSET ?",
                    (schedule_id, 100, 0),
                ),
            ],
            "studio-scheduler-core: the total reads schedule_run_counts and the page "
            "idx_schedule_runs_schedule_page; deeper pages pass the cursor (keyset, "
            "`(fired_at, created_at, id) < (?, ?, ?)`) instead of OFFSET.",
        ),
        HotQuery(
            "ad-hoc runs page",
            "studio_scheduler_core.AdhocRunService.list(limit=100) (GET /api/runs)",
            _adhoc_page,
            [
                ("SELECT coalesce(sum(n), 0) FROM adhoc_run_counts", ()),
                (
                    f"SELECT * FROM schedule_runs WHERE {_ADHOC_WHERE} "
                    "ORDER BY queued_at DESC, id DESC LIMIT ? OFFSET ?",
                    (100, 0),
                ),
            ],
            "studio-scheduler-core: the page reads idx_schedule_runs_adhoc_page in order; the "
            "total reads the trigger-kept adhoc_run_counts (migration 14).",
        ),
        HotQuery(
            "dashboard runs page",
            "studio_scheduler_core.read_runs_page(status=None, limit=100) (the dashboard's "
            "runs page)",
            _dashboard_page,
            [
                (
                    "SELECT r.*, s.timezone FROM schedule_runs r "
                    "LEFT JOIN schedules s ON s.id = r.schedule_id "
                    "ORDER BY r.rowid DESC LIMIT ? OFFSET ?",
                    (100, 0),
                ),
                (
                    "SELECT (SELECT coalesce(sum(n), 0) FROM schedule_run_counts) "
                    "+ (SELECT coalesce(sum(n), 0) FROM adhoc_run_counts) "
                    "+ (SELECT count(*) FROM schedule_runs INDEXED BY idx_schedule_runs_unlisted "
                    "WHERE schedule_id IS NULL AND queued_at IS NULL)",
                    (),
                ),
            ],
            "studio-scheduler-core: the total adds schedule_run_counts, adhoc_run_counts and "
            "the runs that are neither (idx_schedule_runs_unlisted); the page walks the rowid.",
        ),
    ]


def schedules_query() -> HotQuery:
    return HotQuery(
        "GET /api/schedules first page",
        "studio_scheduler_core.ScheduleService.list(limit=100) (GET /api/schedules)",
        _schedules_page,
        [
            ("SELECT COUNT(*) FROM schedules", ()),
            ("SELECT * FROM schedules ORDER BY created_at, rowid LIMIT ? OFFSET ?", (100, 0)),
        ],
        "studio-scheduler-core: index the page's ORDER BY (the index carries the rowid, so it "
        "serves `created_at, rowid`)\n"
        "      CREATE INDEX idx_schedules_created ON schedules(created_at);\n"
        "      the COUNT(*) over all schedules stays O(N) (it then reads the smallest index): "
        "bound or cache it as for the outbox, and page with keyset "
        "`WHERE (created_at, rowid) > (?, ?)` instead of OFFSET.",
    )


# --------------------------------------------------------------------------- building


def _hex(n: int) -> Iterator[str]:
    for _ in range(n):
        yield os.urandom(6).hex()


def _schedule_row(
    template: dict[str, Any], i: int, created_at: float, next_fire: float
) -> tuple[Any, ...]:
    row = dict(template)
    row.update(id=os.urandom(6).hex(), name=f"bench-{i:07d}", created_at=created_at)
    row.update(updated_at=created_at, next_fire_at=next_fire)
    return tuple(row.values())


async def _template(path: Path) -> dict[str, Any]:
    """One schedule created through the real service, to clone (its stored columns)."""
    async with studio_state.connect(path) as conn:
        await studio_scheduler_core.ensure_schema(conn)
        service = studio_scheduler_core.ScheduleService(
            conn,
            settings=studio_scheduler_core.SchedulerSettings(command_allowlist=("true",)),
            clock=lambda: NOW - 86400,
        )
        created = await service.create(
            {
                "name": "template",
                "trigger_type": "interval",
                "interval_sec": 60,
                "action_kind": "command",
                "action_command": "true",
            }
        )
        row = await studio_state.fetch_one(
            conn, "SELECT * FROM schedules WHERE id = ?", (created.id,)
        )
        assert row is not None
        await conn.execute("DELETE FROM schedules")
        return row


def _insert_schedules(db: sqlite3.Connection, template: dict[str, Any], n: int, start: int) -> None:
    columns = ", ".join(template)
    marks = ", ".join("?" * len(template))
    sql = f"INSERT INTO schedules ({columns}) VALUES ({marks})"
    for lo in range(start, start + n, BATCH):
        hi = min(lo + BATCH, start + n)
        # the first 10 of the live set are due; the rest fire later
        db.executemany(
            sql,
            (
                _schedule_row(
                    template, i, NOW - 86400 + i * 0.001, NOW - 5 if i < 10 else NOW + 60 + i
                )
                for i in range(lo, hi)
            ),
        )


# Every dispatch row the benchmark writes carries this payload: a page then decodes the same
# bytes per row at 0 history as at 1M (a '{}' page at 0 made the first page look 2-3x dearer
# at 1M for its JSON alone).
PAYLOAD = json.dumps({"dispatch_id": "x", "kind": "bench", "body": {"text": "x" * 200}})


def _live_set(db: sqlite3.Connection, schedule_ids: list[str]) -> None:
    runs = []
    invocations = []
    for k in range(4):
        run_id, inv_id = os.urandom(6).hex(), os.urandom(6).hex()
        fired = NOW - 10_000 - k  # past the reaper's cutoff, so both reap scans return them
        runs.append((run_id, schedule_ids[k], inv_id, "running", fired, fired))
        invocations.append((inv_id, run_id, "running", fired, fired, fired))
    db.executemany(
        "INSERT INTO invocations (id, schedule_run_id, skill, status, started_at, created_at, "
        "updated_at) VALUES (?, ?, 'command', ?, ?, ?, ?)",
        invocations,
    )
    db.executemany(
        "INSERT INTO schedule_runs (id, schedule_id, invocation_id, trigger_context, "
        "action_kind, action_args, status, fired_at, created_at) "
        "VALUES (?, ?, ?, '{}', 'command', '{}', ?, ?, ?)",
        runs,
    )
    dispatches = [
        (os.urandom(6).hex(), status, NOW - 5 + k if due else NOW + 3600 + k)
        for k, (status, due) in enumerate(
            [("pending", True)] * 20 + [("pending", False)] * 20 + [("delivering", False)] * 2
        )
    ]
    db.executemany(
        "INSERT INTO dispatch_outbox (id, kind, deliver_to, payload, status, next_attempt_at, "
        "created_at, updated_at) VALUES (?, 'bench', 'sink', ?, ?, ?, ?, ?)",
        [(i, PAYLOAD, s, t, NOW - 60, NOW - 60) for i, s, t in dispatches],
    )
    # One full page (100 rows) of each listed table already at "0 history", older than any
    # history added later: every size then times a page of the same 100 rows' size.
    old = NOW - 90 * 86400.0
    page_runs = [os.urandom(6).hex() for _ in range(PAGE)]
    db.executemany(
        "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
        "status, exit_code, fired_at, ended_at, created_at, updated_at) "
        "VALUES (?, ?, '{}', 'command', '{}', 'completed', 0, ?, ?, ?, ?)",
        [
            (r, schedule_ids[50], old + k, old + k + 1, old + k, old + k)
            for k, r in enumerate(page_runs)
        ],
    )
    db.executemany(
        "INSERT INTO dispatch_outbox (id, kind, deliver_to, payload, status, attempt, "
        "next_attempt_at, created_at, updated_at) "
        "VALUES (?, 'bench', 'sink', ?, 'delivered', 1, ?, ?, ?)",
        [(os.urandom(6).hex(), PAYLOAD, old + k, old + k, old + k) for k in range(PAGE)],
    )
    _insert_adhoc(db, [(os.urandom(6).hex(), "completed", old + k) for k in range(PAGE)])


def _insert_adhoc(db: sqlite3.Connection, rows: Iterable[tuple[str, str, float]]) -> None:
    """Terminal ad-hoc runs ``(id, status, queued_at)``: no schedule, claimed and ended."""
    db.executemany(
        "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
        "status, exit_code, fired_at, ended_at, created_at, updated_at, queued_at, "
        "lease_attempts, status_reason_code) "
        "VALUES (?, NULL, '{}', 'command', '{}', ?, 0, ?, ?, ?, ?, ?, 1, 'run.completed')",
        ((r, status, t, t + 1, t, t + 1, t) for r, status, t in rows),
    )


_TERMINAL_DISPATCH = ("delivered",) * 14 + ("acked",) * 4 + ("dead_letter", "expired")
_TERMINAL_RUN = ("completed",) * 8 + ("failed", "timed_out")
_ENTITIES = ("dispatch", "dispatch", "dispatch", "schedule_run", "invocation", "schedule_run")


def _add_history(db: sqlite3.Connection, schedule_ids: list[str], start: int, n: int) -> None:
    payload = PAYLOAD
    span = 30 * 86400.0
    for lo in range(start, start + n, BATCH):
        hi = min(lo + BATCH, start + n)
        times = [NOW - 3600 - span + span * (i / 2_000_000) for i in range(lo, hi)]
        ids = [os.urandom(6).hex() for _ in range(lo, hi)]
        db.executemany(
            "INSERT INTO dispatch_outbox (id, kind, deliver_to, payload, status, attempt, "
            "next_attempt_at, created_at, updated_at) "
            "VALUES (?, 'bench', 'sink', ?, ?, 1, ?, ?, ?)",
            (
                (ids[j], payload, _TERMINAL_DISPATCH[i % 20], t, t, t + 1)
                for j, (i, t) in enumerate(zip(range(lo, hi), times, strict=True))
            ),
        )
        run_ids = [os.urandom(6).hex() for _ in range(lo, hi)]
        inv_ids = [os.urandom(6).hex() for _ in range(lo, hi)]
        statuses = [_TERMINAL_RUN[i % 10] for i in range(lo, hi)]
        db.executemany(
            "INSERT INTO invocations (id, schedule_run_id, skill, status, started_at, ended_at, "
            "created_at, updated_at) VALUES (?, ?, 'command', ?, ?, ?, ?, ?)",
            (
                (inv_ids[j], run_ids[j], statuses[j], t, t + 1, t, t + 1)
                for j, t in enumerate(times)
            ),
        )
        db.executemany(
            "INSERT INTO schedule_runs (id, schedule_id, invocation_id, trigger_context, "
            "action_kind, action_args, status, exit_code, fired_at, ended_at, created_at, "
            "updated_at, status_reason_code) "
            "VALUES (?, ?, ?, '{}', 'command', '{}', ?, 0, ?, ?, ?, ?, 'run.completed')",
            (
                (run_ids[j], schedule_ids[i % SCHEDULES], inv_ids[j], statuses[j], t, t + 1, t, t)
                for j, (i, t) in enumerate(zip(range(lo, hi), times, strict=True))
            ),
        )
        _insert_adhoc(
            db,
            (
                (os.urandom(6).hex(), _TERMINAL_RUN[i % 10], t)
                for i, t in zip(range(lo, hi), times, strict=True)
            ),
        )
        db.executemany(
            "INSERT INTO status_transitions (id, entity_type, entity_id, previous_status, status, "
            "reason_code, actor, created_at) VALUES (?, ?, ?, 'running', 'completed', "
            "'run.completed', 'bench', ?)",
            (
                (os.urandom(6).hex(), _ENTITIES[i % 6], run_ids[j], t)
                for j, (i, t) in enumerate(zip(range(lo, hi), times, strict=True))
            ),
        )


def _build(path: Path, fn: Callable[[sqlite3.Connection], None]) -> float:
    started = time.perf_counter()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA cache_size=-200000")
        db.execute("BEGIN IMMEDIATE")
        fn(db)
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return time.perf_counter() - started


# --------------------------------------------------------------------------- timing


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


async def _deep_pages(conn: aiosqlite.Connection, size: int, reps: int) -> None:
    """GET /api/dispatch page 1,000 (100 rows a page) by offset vs by cursor, beside page 1."""
    pages = min(1000, size // 100)
    if pages < 2:
        return
    offset = (pages - 1) * 100
    before = await studio_state.fetch_value(
        conn,
        "SELECT rowid FROM dispatch_outbox ORDER BY rowid DESC LIMIT 1 OFFSET ?",
        (offset - 1,),
    )

    async def first() -> Any:
        return await studio_outbox.page_dispatches(conn, limit=100)

    async def by_offset() -> Any:
        return await studio_outbox.page_dispatches(conn, limit=100, offset=offset)

    async def by_cursor() -> Any:
        return await studio_outbox.page_dispatches(conn, limit=100, before=int(before))

    assert (await by_offset())[0] == (await by_cursor())[0]
    costs = {}
    for name, call in (("page 1", first), ("offset", by_offset), ("cursor", by_cursor)):
        await call()
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            await call()
            times.append((time.perf_counter() - started) * 1000)
        costs[name] = times
    base = statistics.median(costs["page 1"])
    print(f"  deep page: GET /api/dispatch page {pages:,} of 100 rows at {size:,} rows")
    for name, times in costs.items():
        print(f"    {name:8} {_fmt(times)} ms  ({statistics.median(times) / base:5.1f}x page 1)")


async def _plans(conn: aiosqlite.Connection, q: HotQuery) -> list[str]:
    lines = []
    for sql, params in q.sql:
        lines.append(f"    {sql}")
        for row in await conn.execute_fetchall(f"EXPLAIN QUERY PLAN {sql}", params):
            lines.append(f"      -> {row['detail']}")
    return lines


def _table(title: str, unit: str, queries: list[HotQuery], sizes: list[int]) -> list[HotQuery]:
    print()
    print(title)
    head = f"{'query':36}" + "".join(f"{unit.format(s):>26}" for s in sizes)
    head += "".join(f"{'ratio ' + unit.format(s):>24}" for s in sizes[1:]) + "  met"
    print(head)
    print("-" * len(head))
    missed = []
    for q in queries:
        base = statistics.median(q.costs[sizes[0]])
        ratios = [statistics.median(q.costs[s]) / base for s in sizes[1:]]
        met = all(r <= TARGET for r in ratios)
        if not met:
            missed.append(q)
        cells = "".join(f"{_fmt(q.costs[s]):>26}" for s in sizes)
        cells += "".join(f"{r:>23.1f}x" for r in ratios)
        print(f"{q.name:36}{cells}  {'yes' if met else 'NO'}")
    print("(ms per call: median (min–max); ratio = median / median at the first size)")
    return missed


async def _interleaved(
    queries: list[HotQuery], conns: dict[int, aiosqlite.Connection], ctxs: dict[int, Any], reps: int
) -> None:
    """Time every query on every size round-robin, so a load spike lands on all sizes alike."""
    sizes = list(conns)
    # The cyclic GC is off while timing (collected between queries): a page allocates ~1,000
    # objects, so a collection lands every few calls, and with the sizes taking turns it can
    # land on the same size each time (one run gave a 3x "ratio" that was only that).
    gc.disable()
    try:
        for q in queries:
            await _interleave_one(q, sizes, conns, ctxs, reps)
            gc.collect()
    finally:
        gc.enable()


async def _interleave_one(
    q: HotQuery,
    sizes: list[int],
    conns: dict[int, aiosqlite.Connection],
    ctxs: dict[int, Any],
    reps: int,
) -> None:
    for size in sizes:
        await q.run(conns[size], ctxs[size])  # warm the page and statement caches
        q.costs[size] = []
    for rep in range(reps):
        order = sizes[rep % len(sizes) :] + sizes[: rep % len(sizes)]
        for size in order:
            started = time.perf_counter()
            await q.run(conns[size], ctxs[size])
            q.costs[size].append((time.perf_counter() - started) * 1000)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,100000,1000000")
    parser.add_argument("--schedules", default="1000,100000")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--db-dir",
        help="keep the built databases here and reuse them on the next run (same sizes)",
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="leave the process on every CPU (by default it runs on one, with its threads)",
    )
    args = parser.parse_args()
    pinned = ""
    if not args.no_pin:
        # Each size has its own connection and so its own SQLite thread. Spread over two
        # cores, one thread may land beside the event loop and another across from it for
        # the whole run: a steady 1.6x between sizes that is only where the threads woke.
        # On one CPU every hop is the same thread switch, whatever the size.
        cpu = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        pinned = f", pinned to CPU {cpu} (--no-pin: not)"
    sizes = [int(s) for s in args.sizes.split(",")]
    schedule_sizes = [int(s) for s in args.schedules.split(",")]
    print("hot queries vs history (bench/growth.py)")
    print(
        f"  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"load {os.getloadavg()[0]:.2f}, {args.reps} timed calls per figure, sizes interleaved"
        f"{pinned}"
    )
    missed: list[tuple[HotQuery, str]] = []
    with contextlib.ExitStack() as stack:
        if args.db_dir:
            tmp = args.db_dir
            Path(tmp).mkdir(parents=True, exist_ok=True)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="studio-bench-growth-"))
        path = Path(tmp) / "history.db"
        staged = {size: Path(tmp) / f"history-{size}.db" for size in sizes}
        ids_file = Path(tmp) / "schedule_ids.json"
        if all(p.exists() for p in staged.values()) and ids_file.exists():
            schedule_ids = json.loads(ids_file.read_text())
            print(f"  reusing the databases in {tmp} (migrated to the code's schema)")
            for p in staged.values():
                async with studio_state.connect(p) as conn:
                    await studio_scheduler_core.ensure_schema(conn)
        else:
            for p in (path, *staged.values()):
                p.unlink(missing_ok=True)
            template = await _template(path)
            schedule_ids = []

            def live(db: sqlite3.Connection) -> None:
                _insert_schedules(db, template, SCHEDULES, 0)
                schedule_ids.extend(
                    r[0] for r in db.execute("SELECT id FROM schedules ORDER BY created_at")
                )
                _live_set(db, schedule_ids)

            _build(path, live)
            built = 0
            for size in sizes:
                add = partial(_add_history, schedule_ids=schedule_ids, start=built, n=size - built)
                seconds = _build(path, add)
                built = size
                # each size is a copy of its own (checkpointed: the WAL is empty)
                shutil.copyfile(path, staged[size])
                print(
                    f"  history {size:>9,}: built in {seconds:5.1f} s, file "
                    f"{path.stat().st_size / 2**20:,.0f} MiB",
                    flush=True,
                )
            path.unlink()
            ids_file.write_text(json.dumps(schedule_ids))
        queries = hot_queries(schedule_ids[50])
        async with contextlib.AsyncExitStack() as astack:
            conns = {
                size: await astack.enter_async_context(studio_state.connect(staged[size]))
                for size in sizes
            }
            ctxs = {
                size: {
                    "service": studio_scheduler_core.ScheduleService(
                        conn, settings=studio_scheduler_core.SchedulerSettings()
                    ),
                    "adhoc": studio_scheduler_core.AdhocRunService(
                        conn, settings=studio_scheduler_core.SchedulerSettings()
                    ),
                    "adhoc_rows": PAGE + size,  # a reused build without them fails here
                    "all_runs": await studio_state.fetch_value(
                        conn, "SELECT COUNT(*) FROM schedule_runs"
                    ),
                    "schedule_id": schedule_ids[50],
                    "schedules": SCHEDULES,
                    "due": await _steps.scan(conn, NOW, 100),
                }
                for size, conn in conns.items()
            }
            await _interleaved(queries, conns, ctxs, args.reps)
            await _deep_pages(conns[sizes[-1]], sizes[-1], args.reps)
        path = staged[sizes[-1]]
        for q in _table("history rows", "{:,} rows", queries, sizes):
            async with studio_state.connect(path) as conn:
                missed.append((q, "\n".join(await _plans(conn, q))))

        spath = Path(tmp) / "schedules.db"
        sstaged = {size: Path(tmp) / f"schedules-{size}.db" for size in schedule_sizes}
        if not all(p.exists() for p in sstaged.values()):
            spath.unlink(missing_ok=True)
            template = await _template(spath)
            built = 0
            for size in schedule_sizes:
                grow = partial(_insert_schedules, template=template, n=size - built, start=built)
                seconds = _build(spath, grow)
                built = size
                shutil.copyfile(spath, sstaged[size])
                print(f"  schedules {size:>9,}: built in {seconds:5.1f} s", flush=True)
            spath.unlink()
        sq = schedules_query()
        async with contextlib.AsyncExitStack() as astack:
            conns = {
                size: await astack.enter_async_context(studio_state.connect(sstaged[size]))
                for size in schedule_sizes
            }
            ctxs = {
                size: {
                    "service": studio_scheduler_core.ScheduleService(
                        conn, settings=studio_scheduler_core.SchedulerSettings()
                    ),
                    "schedules": size,
                }
                for size, conn in conns.items()
            }
            await _interleaved([sq], conns, ctxs, args.reps)
        for q in _table("schedules", "{:,} sched.", [sq], schedule_sizes):
            async with studio_state.connect(sstaged[schedule_sizes[-1]]) as conn:
                missed.append((q, "\n".join(await _plans(conn, q))))

    print()
    print(f"target: every ratio <= {TARGET}x")
    for q, plan in missed:
        print()
        print(f"MISSED: {q.name} — {q.source}")
        print("  EXPLAIN QUERY PLAN (at the largest size):")
        print(plan)
        print(f"  fix: {q.fix}")


if __name__ == "__main__":
    asyncio.run(main())

"""The verdict counts read in one aggregated statement, the health row every schedule has from
creation, ``remaining_runs`` through a retention pass, and migration 19's backfill of the runs
that ended before the counters existed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from studio_scheduler_core import (
    ensure_schema,
    read_health_counts,
    read_health_counts_sync,
    read_schedule_health,
    read_spend,
)
from studio_scheduler_core._records.counters import DURATION_BOUNDS
from studio_scheduler_core._records.store import HISTOGRAM, WEEK_COLUMNS, verdicts_statement
from studio_scheduler_core._recovery.retention import retention_pass
from studio_scheduler_core._recovery.retention_counters import prune_counters
from studio_scheduler_core._schema import MIGRATIONS, PACKAGE
from studio_state import (
    connect,
    connect_sync,
    fetch_all,
    fetch_one,
    fetch_value,
    is_postgres,
    migrate,
)
from studio_state import ensure_schema as ensure_state_schema

EXIT = "import sys; sys.exit(int(sys.argv[1]))"
DAY = 86_400.0


async def _made(engine: Any, h: Any, name: str, code: int, **fields: Any) -> Any:
    script = h.script(f"{name}.py", EXIT)
    data = h.command_schedule(script, str(code), name=name, **fields)
    return await engine.service.create({k: v for k, v in data.items() if v is not None})


async def _verdicts(conn: Any, now: float) -> dict[str, int]:
    ids = [str(r["id"]) for r in await fetch_all(conn, "SELECT id FROM schedules")]
    health = await read_schedule_health(conn, ids, now=now)
    counted = Counter(v.health for v in health.values())
    return {name: counted.get(name, 0) for name in await _names(conn, now)}


async def _names(conn: Any, now: float) -> list[str]:
    return list(await read_health_counts(conn, now=now))


async def test_the_counts_match_every_verdict_read_one_by_one(
    make_engine: Any, clock: Any, h: Any, db_target: str
) -> None:
    engine = await make_engine(clock=clock)
    # the manual clock starts at 22:13:20 UTC: "slow" fires at 22:58:20, both crons at 23:00
    slow = await _made(engine, h, "slow", 0, interval_sec=2700)
    await _made(
        engine, h, "hourly", 0, trigger_type="cron", cron_expr="0 * * * *", interval_sec=None
    )
    daily = await _made(
        engine, h, "daily", 0, trigger_type="cron", cron_expr="0 23 * * *", interval_sec=None
    )
    await h.fire_due(engine, clock, slow.next_fire_at)
    await h.fire_due(engine, clock, daily.next_fire_at)
    ok = await _made(engine, h, "ok", 0)
    await _made(engine, h, "bad", 3)
    off = await _made(engine, h, "off", 0)
    await engine.service.disable(off.id)
    await h.fire_due(engine, clock, ok.next_fire_at)
    await _made(engine, h, "fresh", 0)
    fired = clock()
    seen = []
    # healthy now; the 60 s ones overdue 360 s after their fire, "slow" 8100 s after its
    # fire, the hourly cron 3 h after its fire, the daily one 3 days after; "fresh" never fired
    for later in (0.0, 400.0, 3 * 3600 + 60, 3 * DAY + 60):
        now = fired + later
        counts = await read_health_counts(engine.conn, now=now)
        assert counts == await _verdicts(engine.conn, now), later
        db = connect_sync(db_target)
        try:
            assert read_health_counts_sync(db, now=now) == counts
        finally:
            db.close()
        seen.append(counts)
    assert seen[0] == {
        "disabled": 1,
        "never_fired": 1,
        "healthy": 4,
        "failing": 1,
        "overdue": 0,
    }
    assert seen[1]["overdue"] == 1 and seen[1]["healthy"] == 3  # "ok" went quiet
    assert seen[2]["overdue"] == 3 and seen[2]["healthy"] == 1  # and "slow" and "hourly"
    assert seen[3]["overdue"] == 4 and seen[3]["never_fired"] == 1  # and "daily"
    assert sum(seen[3].values()) == 7


async def test_the_counts_bind_the_cron_gaps_as_one_value_however_many_crons(
    make_engine: Any, clock: Any, h: Any, db_target: str
) -> None:
    engine = await make_engine(clock=clock)
    seed = await _made(
        engine, h, "seed", 0, trigger_type="cron", cron_expr="0 0 1 * *", interval_sec=None
    )
    row = await fetch_one(engine.conn, "SELECT * FROM schedules WHERE id = ?", (seed.id,))
    assert row is not None
    columns = [c for c in list(row.keys()) if c != "rowid"]  # PostgreSQL's identity column
    made = {  # 1,500 more schedules, each with a cron of its own (minute, hour, day of month)
        "id": "s.id || '-' || CAST(n.i AS TEXT)",
        "name": "s.name || '-' || CAST(n.i AS TEXT)",
        "cron_expr": "CAST(n.i % 60 AS TEXT) || ' ' || CAST((n.i / 60) % 24 AS TEXT) || ' ' "
        "|| CAST(1 + n.i / 1440 AS TEXT) || ' * *'",
    }
    picked = ", ".join(made.get(c, f"s.{c}") for c in columns)
    await engine.conn.execute(
        f"INSERT INTO schedules ({', '.join(columns)}) "
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500) "
        f"SELECT {picked} FROM schedules s, n WHERE s.id = ?",
        (seed.id,),
    )
    await engine.conn.commit()
    assert (
        await fetch_value(
            engine.conn,
            "SELECT count(*) FROM (SELECT DISTINCT cron_expr, timezone FROM schedules) p",
        )
        == 1_501
    )
    counts = await read_health_counts(engine.conn, now=clock())
    assert counts == dict.fromkeys(counts, 0) | {"never_fired": 1_501}
    # 40,000 crons' gaps (past SQLite's 32,766 and PostgreSQL's 65,535 bound values, were
    # each pair's three fields bound one by one) are one bound value
    gaps = [(f"{i % 60} {i // 60 % 24} * * {i // 1440 % 7}", "UTC", 60.0) for i in range(40_000)]
    postgres = is_postgres(db_target)
    sql, params = verdicts_statement(
        gaps, clock(), grace=300.0, failed=("failed",), postgres=postgres
    )
    assert len(params) == 3
    assert {r["verdict"]: r["n"] for r in await fetch_all(engine.conn, sql, params)} == {
        "never_fired": 1_501
    }


async def test_every_schedule_has_its_health_row_from_creation(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    made = await _made(engine, h, "new", 0, max_runs=4)
    row = await fetch_one(
        engine.conn, "SELECT fires, ended FROM schedule_health WHERE schedule_id = ?", (made.id,)
    )
    assert row is not None and (row["fires"], row["ended"]) == (0, 0)
    [health] = (await read_schedule_health(engine.conn, [made.id], now=clock())).values()
    assert (health.health, health.remaining_runs) == ("never_fired", 4)
    assert (await read_spend(engine.conn, by="schedule", now=clock())).rows == ()
    await engine.service.delete(made.id)
    assert await fetch_value(engine.conn, "SELECT count(*) FROM schedule_health") == 0


async def test_remaining_runs_holds_through_a_retention_pass(
    make_engine: Any, clock: Any, h: Any, tmp_path: Path
) -> None:
    engine = await make_engine(clock=clock)
    made = await _made(engine, h, "limited", 0, max_runs=5)
    await h.fire_due(engine, clock, made.next_fire_at)
    await h.fire_due(engine, clock, made.next_fire_at + 60)
    [before] = (await read_schedule_health(engine.conn, [made.id], now=clock())).values()
    assert before.remaining_runs == 3
    clock.advance(3 * DAY)
    report = await retention_pass(
        engine.conn, now=clock(), retention_days=2, runs_dir=tmp_path / "runs"
    )
    assert report.done and report.runs >= 2
    assert await h.runs_of(engine.conn, made.id) == []  # the history is gone
    [after] = (await read_schedule_health(engine.conn, [made.id], now=clock())).values()
    assert after.remaining_runs == 3
    assert after.last_status == "completed"


_SCHEDULE = (
    "INSERT INTO schedules (id, name, trigger_type, interval_sec, action_kind, action_command, "
    "max_runs, created_at, updated_at) VALUES (?, ?, 'interval', 60, 'command', ?, ?, ?, ?)"
)
_RUN = (
    "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, action_args, "
    "status, fired_at, ended_at, created_at, chain_depth, chain_parent_id, invocation_id, "
    "status_reason_code, exit_code) VALUES (?, ?, '{}', 'command', '[]', ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


async def test_migration_19_counts_the_runs_that_ended_before_the_counters(
    db_target: str,
) -> None:
    async with connect(db_target) as conn:
        await ensure_state_schema(conn)
        await migrate(conn, PACKAGE, MIGRATIONS[:18])  # the counters exist, empty
        cut = float(
            await fetch_value(
                conn,
                "SELECT applied_at FROM schema_migrations WHERE package = ? AND version = 16",
                (PACKAGE,),
            )
        )
        t = cut - 3 * 3600  # every run below ended before migration 16
        await conn.execute(_SCHEDULE, ("s1", "one", "echo", 10, t - DAY, t - DAY))
        await conn.execute(_SCHEDULE, ("s2", "two", "true", None, t - DAY, t - DAY))
        # s1: completed (8 s), failed (exit 3, 2 s), a follow-up of the first, timed out
        runs = [
            ("r1", "s1", "completed", t, t + 8, t, 0, None, "inv1", None, 0),
            ("r2", "s1", "failed", t + 60, t + 62, t + 60, 0, None, None,
             "run.failed.exit_nonzero", 3),
            ("c1", "s1", "completed", t + 9, t + 10, t + 9, 1, "r1", None, None, 0),
            ("r3", "s1", "timed_out", t + 120, t + 720, t + 120, 0, None, None,
             "run.timed_out", None),
            ("a1", None, "completed", t, t + 1, t, 0, None, None, None, 0),
        ]  # fmt: skip
        await conn.execute(
            "INSERT INTO invocations (id, skill, status, started_at, created_at, updated_at) "
            "VALUES ('inv1', 'command', 'completed', ?, ?, ?)",
            (t, t, t),
        )
        await conn.execute(
            "INSERT INTO sessions (id, invocation_id, status, input_tokens, output_tokens, "
            "total_cost_usd, created_at) VALUES ('x1', 'inv1', 'completed', 30, 12, 0.25, ?)",
            (t,),
        )
        await conn.executemany(_RUN, runs)
        # migration 16 seeded the fires from the run counts (the follow-up included)
        await conn.execute("INSERT INTO schedule_health (schedule_id, fires) VALUES ('s1', 4)")
        await conn.commit()
        await ensure_schema(conn)  # migration 19

        rows = {r["schedule_id"]: r for r in await fetch_all(conn, "SELECT * FROM schedule_health")}
        assert set(rows) == {"s1", "s2"}  # s2 never ran: its row exists all the same
        one = rows["s1"]
        assert (one["ended"], one["fires"], one["spend_missing"]) == (4, 3, 3)
        assert (float(one["spend_usd"]), int(one["spend_tokens"])) == (0.25, 42)
        assert (one["last_run_id"], one["last_status"]) == ("r3", "timed_out")
        assert float(one["last_run_at"]) == t + 720
        assert one["consecutive_failures"] == 2
        assert rows["s2"]["ended"] == 0 and rows["s2"]["last_run_id"] is None
        # migration 21 seeds the kept spend total from the health rows as they are
        [total] = await fetch_all(conn, "SELECT * FROM schedule_spend_total")
        assert (total["spenders"], total["runs"], total["spend_missing"]) == (1, 4, 3)
        assert (float(total["spend_usd"]), int(total["spend_tokens"])) == (0.25, 42)

        activity = await fetch_one(
            conn,
            "SELECT sum(fires) AS fires, sum(completed) AS completed, sum(failed) AS failed, "
            "sum(timed_out) AS timed_out FROM run_activity",
        )
        assert activity is not None
        assert [int(activity[k]) for k in ("fires", "completed", "failed", "timed_out")] == [
            5,
            3,
            1,
            1,
        ]
        days = await fetch_one(
            conn,
            "SELECT sum(completed) AS completed, sum(duration_count) AS n, sum(d3) AS d3, "
            "sum(d1) AS d1, sum(d0) AS d0, sum(d8) AS d8 FROM schedule_counters "
            "WHERE schedule_id = 's1'",
        )
        assert days is not None
        # durations 8 s (≤ 10: d3), 2 s (≤ 2: d1), 1 s (≤ 1: d0), 600 s (≤ 600: d8)
        assert [int(days[k]) for k in ("completed", "n", "d3", "d1", "d0", "d8")] == [
            2,
            4,
            1,
            1,
            1,
            1,
        ]
        spend = {r["action"]: r for r in await fetch_all(conn, "SELECT * FROM action_spend")}
        assert set(spend) == {"command:echo", "command:adhoc"}
        assert (spend["command:echo"]["runs"], spend["command:adhoc"]["runs"]) == (4, 1)
        classes = {
            r["id"]: r["error_class"]
            for r in await fetch_all(conn, "SELECT id, error_class FROM schedule_runs")
        }
        assert (classes["r2"], classes["r3"], classes["r1"]) == ("nonzero_exit", "timeout", None)

        [health] = (await read_schedule_health(conn, ["s1"], now=t + 800)).values()
        assert (health.health, health.consecutive_failures) == ("failing", 2)
        assert health.remaining_runs == 7 and health.spend_partial
        assert health.success_rate_7d == 2 / 4


async def test_the_7_day_figures_hold_across_days_and_the_roll(
    make_engine: Any, clock: Any, h: Any
) -> None:
    engine = await make_engine(clock=clock)
    ok = await _made(engine, h, "ok", 0)
    bad = await _made(engine, h, "bad", 3)
    await h.fire_due(engine, clock, ok.next_fire_at)
    await h.fire_due(engine, clock, ok.next_fire_at + 60)
    fired = clock()

    async def figures(now: float) -> list[Any]:
        got = await read_schedule_health(engine.conn, [ok.id, bad.id], now=now)
        return [(got[s].success_rate_7d, got[s].duration_p50_7d) for s in (ok.id, bad.id)]

    today = await figures(fired)
    assert today == [(1.0, 1), (0.0, 1)]
    assert await figures(fired + DAY) == today  # its sums are of yesterday: day rows summed
    await prune_counters(engine.conn, now=fired + DAY)  # the retention pass rolls them
    rolled = await fetch_all(engine.conn, "SELECT week_day, w_completed FROM schedule_health")
    assert {int(r["week_day"]) for r in rolled} == {int((fired + DAY) // DAY * DAY)}
    assert sorted(int(r["w_completed"]) for r in rolled) == [0, 2]
    assert await figures(fired + DAY) == today
    assert await figures(fired + 8 * DAY) == [(None, None), (None, None)]
    await prune_counters(engine.conn, now=fired + 8 * DAY)  # nothing left in the window
    assert await figures(fired + 8 * DAY) == [(None, None), (None, None)]


def test_the_histogram_columns_match_the_bounds() -> None:
    assert len(HISTOGRAM) == len(DURATION_BOUNDS)
    assert ("completed", "failed", "timed_out", *HISTOGRAM) == WEEK_COLUMNS

"""Health verdicts, counters kept as runs end, activity and spend stats, error classes."""

from __future__ import annotations

import pytest

from studio_scheduler_core import (
    ERROR_CLASSES,
    HEALTH_VERDICTS,
    InvalidStatsQuery,
    read_activity,
    read_schedule_health,
    read_spend,
    report_usage,
)
from studio_scheduler_core._records.counters import classify_error
from studio_scheduler_core._recovery.retention_counters import prune_counters
from studio_state import fetch_all, fetch_value

EXIT = "import sys; sys.exit(int(sys.argv[1]))"


async def _made(engine, h, name: str, code: int, **fields):
    script = h.script(f"{name}.py", EXIT)
    return await engine.service.create(h.command_schedule(script, str(code), name=name, **fields))


async def test_each_verdict_from_a_real_schedule(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = await _made(engine, h, "ok", 0)
    bad = await _made(engine, h, "bad", 3)
    off = await _made(engine, h, "off", 0)
    await engine.service.disable(off.id)
    due = ok.next_fire_at
    await h.fire_due(engine, clock, due)
    fresh = await _made(engine, h, "fresh", 0)
    await h.fire_due(engine, clock, due + 60)
    now = clock()
    health = await read_schedule_health(
        engine.conn, [ok.id, bad.id, off.id, fresh.id, "nope"], now=now
    )
    assert set(health) == {ok.id, bad.id, off.id, fresh.id}
    assert health[ok.id].health == "healthy"
    assert health[bad.id].health == "failing"
    assert health[off.id].health == "disabled"
    assert health[fresh.id].health == "healthy"
    assert health[bad.id].consecutive_failures == 2
    assert health[ok.id].consecutive_failures == 0
    assert health[bad.id].last_status == "failed"
    assert health[ok.id].last_status == "completed"
    assert health[ok.id].success_rate_7d == 1.0
    assert health[bad.id].success_rate_7d == 0.0
    assert health[ok.id].duration_p50_7d == 1 and health[ok.id].duration_p95_7d == 1
    assert health[ok.id].last_run_at == now
    assert health[ok.id].next_fire_at == due + 120
    assert set(health[ok.id].to_json()) >= {"health", "spend_partial", "remaining_runs"}
    runs = await h.runs_of(engine.conn, bad.id)
    assert [r.error_class for r in runs] == ["nonzero_exit", "nonzero_exit"]
    assert {r.error_class for r in await h.runs_of(engine.conn, ok.id)} == {None}


async def test_never_fired_then_overdue_by_the_clock(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    created = await _made(engine, h, "quiet", 0, interval_sec=60)
    [before] = (await read_schedule_health(engine.conn, [created.id], now=clock())).values()
    assert before.health == "never_fired"
    await h.fire_due(engine, clock, created.next_fire_at)
    fired = clock()
    # cadence 60 s: overdue after max(3 × 60, 60 + 300) = 360 s without a fire
    at_359 = await read_schedule_health(engine.conn, [created.id], now=fired + 359)
    at_361 = await read_schedule_health(engine.conn, [created.id], now=fired + 361)
    assert at_359[created.id].health == "healthy"
    assert at_361[created.id].health == "overdue"


async def test_a_completion_ends_the_failure_streak(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    counter = h.tmp = h.directory / "n"
    flaky = h.script(
        "flaky.py",
        "import pathlib, sys\np = pathlib.Path(sys.argv[1])\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\np.write_text(str(n))\n"
        "sys.exit(0 if n >= 3 else 4)\n",
    )
    created = await engine.service.create(h.command_schedule(flaky, str(counter), name="flaky"))
    at = created.next_fire_at
    streaks = []
    for step in range(3):
        await h.fire_due(engine, clock, at + 60 * step)
        got = await read_schedule_health(engine.conn, [created.id], now=clock())
        streaks.append((got[created.id].health, got[created.id].consecutive_failures))
    assert streaks == [("failing", 1), ("failing", 2), ("healthy", 0)]


async def test_activity_and_spend_read_the_counters(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = await _made(engine, h, "ok", 0)
    bad = await _made(engine, h, "bad", 3)
    await h.fire_due(engine, clock, ok.next_fire_at)
    runs = await h.runs_of(engine.conn, ok.id)
    await report_usage(
        engine.conn,
        invocation_id=runs[0].invocation_id,
        input_tokens=10,
        output_tokens=5,
        cost_usd=0.25,
        clock=clock,
    )
    await h.fire_due(engine, clock, ok.next_fire_at + 60)
    now = clock()
    activity = await read_activity(engine.conn, window="24h", now=now)
    assert len(activity.buckets) == 24 and activity.bucket_seconds == 3600
    assert sum(b.fires for b in activity.buckets) == 4
    assert sum(b.completed for b in activity.buckets) == 2
    assert sum(b.failed for b in activity.buckets) == 2
    assert activity.completion_rate == 0.5
    assert activity.buckets[-1].start <= now < activity.buckets[-1].start + 3600
    week = await read_activity(engine.conn, window="7d", now=now)
    assert len(week.buckets) == 168
    spend = await read_spend(engine.conn, by="schedule", now=now)
    by_key = {row.key: row for row in spend.rows}
    # the usage reported during the first run counted when the second run ended? No: usage
    # counts at the end of the run it belongs to, so the first (already ended) run's report
    # is not in the totals; the second run of "ok" reported none either.
    assert by_key[ok.id].runs == 2 and by_key[bad.id].runs == 2
    assert spend.spend_partial is True
    actions = await read_spend(engine.conn, by="action", now=now)
    assert sum(row.runs for row in actions.rows) == 4
    with pytest.raises(InvalidStatsQuery) as window:
        await read_activity(engine.conn, window="1y", now=now)
    assert window.value.field == "window"
    with pytest.raises(InvalidStatsQuery) as by:
        await read_spend(engine.conn, by="node", now=now)
    assert by.value.field == "by"


async def test_usage_reported_while_running_is_spend(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    script = h.script(
        "spender.py",
        "import os, subprocess, sys\n"
        "from studio_scheduler_core import report_usage\n"
        "import asyncio\nfrom studio_state import connect\n"
        "async def main():\n"
        "    async with connect(os.environ['LIONAGI_STUDIO_DB']) as c:\n"
        "        await report_usage(c, invocation_id=os.environ['LIONAGI_INVOCATION_ID'],\n"
        "                           input_tokens=7, output_tokens=3, cost_usd=0.5)\n"
        "asyncio.run(main())\n",
    )
    created = await engine.service.create(h.command_schedule(script, name="spender"))
    await h.fire_due(engine, clock, created.next_fire_at)
    [run] = await h.runs_of(engine.conn, created.id)
    assert run.status == "completed", run.error_detail
    health = (await read_schedule_health(engine.conn, [created.id], now=clock()))[created.id]
    assert (health.spend_usd, health.spend_tokens, health.spend_partial) == (0.5, 10, False)
    spend = await read_spend(engine.conn, by="action", now=clock())
    assert spend.total_usd == 0.5 and spend.total_tokens == 10
    assert spend.rows[0].key == f"command:{h.PY}"


async def test_spend_folds_past_the_top_twenty(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    made = [await _made(engine, h, f"s{i:02d}", 0) for i in range(23)]
    for step in range(30):  # a tick starts as many as the slots allow
        await h.fire_due(engine, clock, made[0].next_fire_at + step)
        if (
            await fetch_value(engine.conn, "SELECT count(*) FROM schedule_health WHERE ended > 0")
            >= 23
        ):
            break
    spend = await read_spend(engine.conn, by="schedule", now=clock())
    assert len(spend.rows) == 21
    assert spend.rows[-1].key == "(other)" and spend.rows[-1].label == "3 more"
    assert spend_runs(spend) == 23


_SUMMED = (
    "SELECT count(*) AS n, COALESCE(sum(spend_usd), 0) AS usd, "
    "COALESCE(sum(spend_tokens), 0) AS tokens, COALESCE(sum(ended), 0) AS runs, "
    "COALESCE(sum(spend_missing), 0) AS missing FROM schedule_health WHERE ended > 0"
)
_KEPT = "SELECT spenders, spend_usd, spend_tokens, runs, spend_missing FROM schedule_spend_total"


async def _kept_and_summed(conn) -> tuple[list[float], list[float]]:
    [kept] = await fetch_all(conn, _KEPT)
    [summed] = await fetch_all(conn, _SUMMED)
    return [float(v) for v in kept.values()], [float(v) for v in summed.values()]


async def test_the_kept_spend_total_follows_every_health_row(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = await _made(engine, h, "ok", 0)
    bad = await _made(engine, h, "bad", 3)
    idle = await _made(engine, h, "idle", 0)
    await engine.service.disable(idle.id)
    await h.fire_due(engine, clock, ok.next_fire_at)
    await h.fire_due(engine, clock, ok.next_fire_at + 60)
    kept, summed = await _kept_and_summed(engine.conn)
    assert kept == summed and kept[0] == 2 and kept[3] == 4  # two schedules, four runs
    assert kept[4] == 4  # none reported usage
    # any statement writing a health row keeps it: a direct update, a schedule's deletion
    await engine.conn.execute(
        "UPDATE schedule_health SET spend_usd = 0.25, spend_tokens = 3, ended = 1 "
        "WHERE schedule_id = ?",
        (idle.id,),
    )
    await engine.conn.commit()
    kept, summed = await _kept_and_summed(engine.conn)
    assert kept == summed and kept[:3] == [3, 0.25, 3]
    await engine.service.delete(bad.id)
    kept, summed = await _kept_and_summed(engine.conn)
    assert kept == summed and kept[0] == 2
    spend = await read_spend(engine.conn, by="schedule", now=clock())
    assert {row.key for row in spend.rows} == {ok.id, idle.id}
    assert (spend.total_usd, spend.total_tokens, spend.rows[0].key) == (0.25, 3, idle.id)


async def test_a_spawn_failure_and_a_missing_cwd_are_classed(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    missing = h.directory / "gone"
    created = await engine.service.create(
        h.command_schedule(h.env_dump, "x", name="nocwd", action_cwd=str(h.directory))
    )
    await engine.conn.execute(
        "UPDATE schedules SET action_cwd = ? WHERE id = ?", (str(missing), created.id)
    )
    await engine.conn.commit()
    await h.fire_due(engine, clock, created.next_fire_at)
    [run] = await h.runs_of(engine.conn, created.id)
    assert (run.status, run.error_class) == ("failed", "not_found")
    health = await read_schedule_health(engine.conn, [created.id], now=clock())
    assert health[created.id].health == "failing"


def spend_runs(spend) -> int:
    return sum(row.runs for row in spend.rows)


def test_error_classes_from_reason_exit_and_spawn_error() -> None:
    cases = {
        ("timed_out", "run.timed_out.deadline", None, ""): "timeout",
        ("failed", "run.failed.spawn_error", None, "Permission denied: '/x'"): "permission",
        ("failed", "run.failed.spawn_error", None, "No such file or directory"): "not_found",
        ("failed", "run.failed.spawn_error", None, "argument list too long"): "spawn_failed",
        ("failed", "run.failed.exit_nonzero", 3, ""): "nonzero_exit",
        ("failed", "run.failed.exit_nonzero", -9, ""): "killed",
        ("failed", "run.failed.exit_nonzero", 137, ""): "killed",
        ("failed", "run.failed.exit_nonzero", 126, ""): "permission",
        ("failed", "run.failed.exit_nonzero", 127, ""): "not_found",
        ("failed", "run.failed.node_lost", None, ""): "node_lost",
        ("failed", "run.failed.daemon_restart", None, ""): "node_lost",
        ("failed", "run.failed.exception", None, ""): "unclassified",
        ("completed", "run.completed.ok", 0, ""): None,
        ("cancelled", "run.cancelled.operator", None, ""): None,
    }
    for args, expected in cases.items():
        assert classify_error(*args) == expected, args
    assert set(ERROR_CLASSES) >= {v for v in cases.values() if v}
    assert HEALTH_VERDICTS == ("disabled", "never_fired", "healthy", "failing", "overdue")


async def test_retention_prunes_old_buckets_and_keeps_totals(make_engine, clock, h) -> None:
    engine = await make_engine(clock=clock)
    ok = await _made(engine, h, "ok", 0)
    await h.fire_due(engine, clock, ok.next_fire_at)
    now = clock()
    assert await fetch_value(engine.conn, "SELECT count(*) FROM run_activity") == 1
    assert await prune_counters(engine.conn, now=now + 86400) == 0
    later = now + 9 * 86400
    assert await prune_counters(engine.conn, now=later) == 2
    assert await fetch_value(engine.conn, "SELECT count(*) FROM schedule_counters") == 0
    [row] = await fetch_all(engine.conn, "SELECT ended, fires FROM schedule_health")
    assert (row["ended"], row["fires"]) == (1, 1)
    health = (await read_schedule_health(engine.conn, [ok.id], now=later))[ok.id]
    assert health.last_status == "completed" and health.success_rate_7d is None

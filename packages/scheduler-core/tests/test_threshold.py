"""threshold_config: metric computations on seeded rows, ops, cooldown, reservation, no-run."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from studio_outbox import enqueue_dispatch
from studio_scheduler_core._records.codec import schedule_record
from studio_scheduler_core._triggers.metrics import measure
from studio_scheduler_core._triggers.store import SQL
from studio_scheduler_core._triggers.threshold import MetricThreshold
from studio_state import fetch_all, fetch_one, new_id, write_transaction

T0 = 1_700_000_000.0


def _threshold(metric: str = "failed_runs", op: str = "gt", value: float = 0, window: int = 5):
    return {"metric": metric, "op": op, "value": value, "window_minutes": window}


def _alert(name: str = "alert", **fields):
    data = {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "command",
        "action_command": "true",
        "action_command_args": ["{{metric}}", "{{value}}"],
        "overlap_policy": "allow",
        "threshold_config": _threshold(),
    }
    data.update(fields)
    return data


async def _other(service, name: str = "other") -> str:
    created = await service.create(
        {
            "name": name,
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "command",
            "action_command": "true",
        }
    )
    return created.id


async def _run(conn, schedule_id, *, status, ended_at, started_at=None, reason=None, inv=None):
    """Seed one run (and its invocation when ``inv`` is given as the invocation status)."""
    run_id = new_id()
    inv_id = new_id() if inv else None
    async with write_transaction(conn):
        if inv_id:
            await conn.execute(
                "INSERT INTO invocations (id, schedule_run_id, skill, status, started_at, "
                "ended_at, status_reason_code, created_at, updated_at) "
                "VALUES (?, ?, 'seed', ?, ?, ?, ?, ?, ?)",
                (inv_id, run_id, inv, started_at, ended_at, reason, started_at, started_at),
            )
        await conn.execute(
            "INSERT INTO schedule_runs (id, schedule_id, invocation_id, trigger_context, "
            "action_kind, action_args, status, fired_at, ended_at, created_at) "
            "VALUES (?, ?, ?, '{}', 'command', '[]', ?, ?, ?, ?)",
            (run_id, schedule_id, inv_id, status, started_at or ended_at, ended_at, ended_at),
        )
    return run_id, inv_id


async def _session(conn, *, status, at, invocation_id=None, cost=None, ended=True):
    async with write_transaction(conn):
        await conn.execute(
            "INSERT INTO sessions (id, invocation_id, status, total_cost_usd, started_at, "
            "ended_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (new_id(), invocation_id, status, cost, at, at if ended else None, at),
        )


async def test_failed_runs_counts_the_window_and_not_the_alerts_own_runs(conn, service):
    other = await _other(service)
    own = await _other(service, "own")
    await _run(conn, other, status="failed", ended_at=T0 - 10)
    await _run(conn, other, status="timed_out", ended_at=T0 - 299)
    await _run(conn, other, status="failed", ended_at=T0 - 301)  # before the window
    await _run(conn, other, status="completed", ended_at=T0 - 10)
    await _run(conn, other, status="cancelled", ended_at=T0 - 10)
    await _run(conn, None, status="failed", ended_at=T0 - 5)  # ad-hoc run
    await _run(conn, own, status="failed", ended_at=T0 - 5)  # the alert's own: left out
    value, _ = await measure(conn, "failed_runs", now=T0, window_minutes=5, own=own)
    assert value == 3


async def test_failed_sessions_counts_distinct_causes(conn, service):
    other = await _other(service)
    own = await _other(service, "own")
    _, fanout = await _run(
        conn, other, status="failed", ended_at=T0 - 5, started_at=T0 - 9, inv="failed"
    )
    for _ in range(3):  # a fan-out failing one way counts once
        await _session(conn, status="failed", at=T0 - 6, invocation_id=fanout)
    await _session(conn, status="timed_out", at=T0 - 6, invocation_id=fanout)  # another cause
    await _session(conn, status="failed", at=T0 - 6)  # no invocation: counts alone
    await _session(conn, status="failed", at=T0 - 6)
    await _session(conn, status="failed", at=T0 - 400)  # before the window
    await _session(conn, status="completed", at=T0 - 6)
    _, mine = await _run(
        conn, own, status="failed", ended_at=T0 - 5, started_at=T0 - 9, inv="failed"
    )
    await _session(conn, status="failed", at=T0 - 6, invocation_id=mine)  # own: left out
    value, _ = await measure(conn, "failed_sessions", now=T0, window_minutes=5, own=own)
    assert value == 4


async def test_total_cost_sums_the_window_and_reports_unreported_sessions(conn):
    await _session(conn, status="completed", at=T0 - 10, cost=1.25)
    await _session(conn, status="completed", at=T0 - 20, cost=0.5)
    await _session(conn, status="completed", at=T0 - 4000, cost=100.0)  # before the window
    await _session(conn, status="failed", at=T0 - 30)  # ended, no cost: unreported
    await _session(conn, status="running", at=T0 - 30, ended=False)  # not ended: not counted
    value, extras = await measure(conn, "total_cost_usd", now=T0, window_minutes=60, own="x")
    assert value == pytest.approx(1.75)
    assert extras == {"unreported_sessions": 1, "spend_is_partial": True}
    empty, extras = await measure(conn, "total_cost_usd", now=T0 + 10**6, window_minutes=1, own="x")
    assert empty == 0 and extras == {"unreported_sessions": 0}


async def test_p95_latency_nearest_rank_and_exclusions(conn, service):
    other = await _other(service)
    own = await _other(service, "own")
    assert await measure(conn, "p95_latency_ms", now=T0, window_minutes=5, own=own) == (
        0.0,
        {"samples": 0},
    )
    for ms in range(1, 101):
        await _run(
            conn,
            other,
            status="completed",
            started_at=T0 - 100,
            ended_at=T0 - 100 + ms / 1000,
            inv="completed",
        )
    await _run(
        conn, own, status="completed", started_at=T0 - 100, ended_at=T0 - 90, inv="completed"
    )  # the alert's own: left out
    await _run(conn, other, status="cancelled", started_at=T0 - 100, ended_at=T0, inv="cancelled")
    await _run(
        conn,
        other,
        status="failed",
        started_at=T0 - 100,
        ended_at=T0,
        inv="failed",
        reason="run.failed.daemon_restart",
    )
    await _run(
        conn,
        other,
        status="failed",
        started_at=T0 - 100,
        ended_at=T0,
        inv="failed",
        reason="run.failed.node_lost",
    )  # its node died: the time is the takeover's, not the run's
    await _run(
        conn, other, status="completed", started_at=T0 - 1000, ended_at=T0, inv="completed"
    )  # started before the window
    value, extras = await measure(conn, "p95_latency_ms", now=T0, window_minutes=5, own=own)
    assert value == pytest.approx(95.0, abs=0.01) and extras == {"samples": 100}


async def test_dead_letters_and_pending_dispatch(conn):
    ids = [await enqueue_dispatch(conn, kind="k", deliver_to="x") for _ in range(5)]
    async with write_transaction(conn):
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'dead_letter', updated_at = ? WHERE id IN (?, ?)",
            (T0 - 30, ids[0], ids[1]),
        )
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'dead_letter', updated_at = ? WHERE id = ?",
            (T0 - 3600, ids[2]),
        )
        await conn.execute(
            "UPDATE dispatch_outbox SET status = 'delivered' WHERE id = ?", (ids[3],)
        )
    assert (await measure(conn, "dead_letters", now=T0, window_minutes=10, own="x"))[0] == 2
    assert (await measure(conn, "pending_dispatch", now=T0, window_minutes=10, own="x"))[0] == 1


async def test_github_poll_metrics(conn, service, clock):
    assert await measure(
        conn, "github_poll_healthy_age_minutes", now=T0, window_minutes=1, own="x"
    ) == (0.0, {})
    assert (await measure(conn, "github_poll_consecutive_401", now=T0, window_minutes=1, own="x"))[
        0
    ] == 0
    base = {"trigger_type": "github_poll", "action_kind": "command", "action_command": "true"}
    fresh = await service.create({**base, "name": "fresh", "github_repo": "o/fresh"})
    stale = await service.create({**base, "name": "stale", "github_repo": "o/stale"})
    never = await service.create({**base, "name": "never", "github_repo": "o/never"})
    off = await service.create({**base, "name": "off", "github_repo": "o/off", "enabled": False})
    async with write_transaction(conn):
        for sid, healthy, n401 in (
            (fresh.id, T0 - 60, 0),
            (stale.id, T0 - 1800, 2),
            (off.id, T0 - 99999, 9),
        ):
            await conn.execute(
                "UPDATE schedules SET last_healthy_poll_at = ?, poller_consecutive_401 = ? "
                "WHERE id = ?",
                (healthy, n401, sid),
            )
    # "never" has no healthy poll: its age counts from creation (clock T0).
    age, extras = await measure(
        conn, "github_poll_healthy_age_minutes", now=T0 + 600, window_minutes=1, own="x"
    )
    assert age == pytest.approx(40.0) and extras["github_repo"] == "o/stale"
    value, extras = await measure(
        conn, "github_poll_consecutive_401", now=T0, window_minutes=1, own="x"
    )
    assert value == 2 and extras["github_repo"] == "o/stale"  # disabled by hand: not counted
    async with write_transaction(conn):
        await conn.execute(
            "UPDATE schedules SET enabled = 0, disabled_reason = 'schedule.disabled.github_auth',"
            " poller_consecutive_401 = 5 WHERE id = ?",
            (never.id,),
        )
    value, extras = await measure(
        conn, "github_poll_consecutive_401", now=T0, window_minutes=1, own="x"
    )
    assert value == 5 and extras["github_repo"] == "o/never"  # auth-disabled still alerts


@pytest.mark.parametrize("name", sorted(SQL))
@pytest.mark.sqlite_only("reads SQLite's query plan")
async def test_metric_queries_use_indexes(conn, name):
    sql = SQL[name]
    if name == "latency_rows":
        sql = f"SELECT COUNT(*) {sql}"
    plan = await fetch_all(conn, f"EXPLAIN QUERY PLAN {sql}", [0] * sql.count("?"))
    details = [row["detail"] for row in plan]
    # A subquery (named by its alias) is read as a co-routine: scanning it reads no table.
    subqueries = {d.removeprefix("CO-ROUTINE ") for d in details if d.startswith("CO-ROUTINE ")}
    tables = [
        d
        for d in details
        if d.startswith(("SCAN", "SEARCH"))
        and "(subquery" not in d
        and d.split(" ", 1)[1] not in subqueries
    ]
    assert tables, details
    assert all("USING" in d for d in tables), details


@pytest.mark.parametrize(
    ("op", "value", "fires"),
    [
        ("gt", 2, True),
        ("gt", 3, False),
        ("gte", 3, True),
        ("gte", 4, False),
        ("lt", 4, True),
        ("lt", 3, False),
        ("lte", 3, True),
        ("lte", 2, False),
    ],
)
async def test_each_op(conn, service, op, value, fires):
    other = await _other(service)
    alert = await service.create(_alert(threshold_config=_threshold(op=op, value=value)))
    for _ in range(3):
        await _run(conn, other, status="failed", ended_at=T0 - 1)
    decision = await MetricThreshold().evaluate(conn, alert, now=T0)
    assert decision.fire is fires
    if fires:
        assert decision.context == {
            "metric": "failed_runs",
            "op": op,
            "value": 3.0,
            "threshold": float(value),
            "window_minutes": 5,
        }
        assert decision.schedule_updates == {"last_alert_at": T0}
    row = await fetch_one(conn, "SELECT last_evaluated_at FROM schedules WHERE id = ?", (alert.id,))
    assert row["last_evaluated_at"] == T0


async def test_reservation_race_only_one_evaluation_fires(conn, service):
    other = await _other(service)
    alert = await service.create(_alert())
    await _run(conn, other, status="failed", ended_at=T0 - 1)
    gate = MetricThreshold()
    decisions = await asyncio.gather(*(gate.evaluate(conn, alert, now=T0) for _ in range(4)))
    winners = [d for d in decisions if d.fire]
    assert len(winners) == 1 and gate.pending() == {alert.id}
    assert all("in flight" in d.reason for d in decisions if not d.fire)
    winners[0].release()
    assert gate.pending() == frozenset()
    assert (await gate.evaluate(conn, alert, now=T0)).fire  # no alert was committed


async def test_invalid_stored_config_never_fires_and_logs_once(conn, service, caplog):
    alert = await service.create(_alert())
    async with write_transaction(conn):
        await conn.execute(
            "UPDATE schedules SET threshold_config = ? WHERE id = ?",
            (
                json.dumps({"metric": "nope", "op": "gt", "value": 1, "window_minutes": 1}),
                alert.id,
            ),
        )
    row = await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (alert.id,))
    assert row is not None
    stored = schedule_record(row)
    gate = MetricThreshold()
    caplog.set_level(logging.ERROR, logger="studio_scheduler_core")
    for _ in range(3):
        assert not (await gate.evaluate(conn, stored, now=T0)).fire
    assert len([r for r in caplog.records if "invalid threshold_config" in r.getMessage()]) == 1

"""github_poll health and gates: 401 counting, rate limits, capacity holds, overlap, max_runs."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from studio_state import fetch_all, fetch_one

GITHUB_SERVER_MODULE = "studio_scheduler_core_test_github_server"
gh = sys.modules[GITHUB_SERVER_MODULE]  # loaded once by conftest.py, with the `github` fixture
REPO = gh.REPO


async def _row(conn, sid):
    return await fetch_one(conn, "SELECT * FROM schedules WHERE id = ?", (sid,))


async def _until(engine, predicate, rounds: int = 200) -> None:
    """Tick (and let fires finish) until ``predicate()`` holds; a liveness bound, no timing."""
    for _ in range(rounds):
        if await predicate():
            return
        await engine.tick_once()
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_five_consecutive_401s_disable_and_a_200_resets(make_engine, clock, github, h):
    engine = await make_engine(clock=clock, github_api_url=github.url, github_token="bad")
    github.add_pr(REPO, 1, updated=h.T0 - 10)
    created = await engine.service.create(gh.github_schedule("auth"))
    for _ in range(4):
        github.fail_next(401)
        await gh.poll(engine)
        clock.advance(60)
    row = await _row(engine.conn, created.id)
    assert row["poller_consecutive_401"] == 4 and row["enabled"] == 1
    assert row["last_healthy_poll_at"] is None
    await gh.poll(engine)  # a 200 in between
    row = await _row(engine.conn, created.id)
    assert row["poller_consecutive_401"] == 0 and row["last_healthy_poll_at"] == clock()
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1]
    for n in range(5):
        clock.advance(60)
        github.fail_next(401)
        await gh.poll(engine)
        row = await _row(engine.conn, created.id)
        assert row["enabled"] == (1 if n < 4 else 0)
    assert row["poller_consecutive_401"] == 5
    assert row["disabled_reason"] == "schedule.disabled.github_auth"
    (transition,) = await fetch_all(
        engine.conn,
        "SELECT * FROM status_transitions WHERE entity_id = ? AND status = 'disabled'",
        (created.id,),
    )
    assert transition["reason_code"] == "schedule.disabled.github_auth"
    assert REPO in transition["reason_summary"] and "401" in transition["reason_summary"]
    # Disabled: no more polls.
    github.clear_requests()
    clock.advance(600)
    await gh.poll(engine)
    assert github.pull_requests() == []


async def test_rate_limit_postpones_every_poll_and_logs_once(
    make_engine, clock, github, h, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="studio_scheduler_core")
    engine = await make_engine(clock=clock, github_api_url=github.url)
    t = h.T0
    github.add_pr(REPO, 1, updated=t - 10)
    reset = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(t) + 1800)}
    github.fail_next(403, reset, times=2)
    a = await engine.service.create(gh.github_schedule("a"))
    b = await engine.service.create(gh.github_schedule("b"))
    await gh.poll(engine)
    for sid in (a.id, b.id):
        row = await _row(engine.conn, sid)
        assert row["next_fire_at"] == t + 1800
        assert row["last_healthy_poll_at"] is None and row["poller_consecutive_401"] == 0
    warnings = [r for r in caplog.records if "rate limit" in r.getMessage()]
    assert len(warnings) == 1
    # A schedule due inside the window is postponed without asking GitHub.
    github.clear_requests()
    c = await engine.service.create(gh.github_schedule("c"))
    await gh.poll(engine)
    assert github.pull_requests() == []
    assert (await _row(engine.conn, c.id))["next_fire_at"] == t + 1800
    # After the reset every schedule polls again and fires.
    clock.set(t + 1800)
    await gh.poll(engine)
    for sid in (a.id, b.id, c.id):
        assert gh.numbers(await gh.fired(engine.conn, sid)) == [1]


async def test_429_retry_after_postpones_past_the_next_poll(make_engine, clock, github, h):
    engine = await make_engine(clock=clock, github_api_url=github.url)
    github.fail_next(429, {"retry-after": "600"})
    created = await engine.service.create(gh.github_schedule("slow-down"))
    await gh.poll(engine)
    assert (await _row(engine.conn, created.id))["next_fire_at"] == h.T0 + 600


async def test_transport_error_keeps_the_cadence_and_stamps_nothing(make_engine, clock, h):
    engine = await make_engine(clock=clock, github_api_url="http://127.0.0.1:9")
    created = await engine.service.create(gh.github_schedule("down"))
    await gh.poll(engine)
    row = await _row(engine.conn, created.id)
    assert row["next_fire_at"] == h.T0 + 60 and row["last_healthy_poll_at"] is None
    assert row["poller_consecutive_401"] == 0


def _blocking(h, flag: Path, name: str, **fields):
    return gh.github_schedule(
        name,
        action_command=h.PY,
        args=[h.blocker, str(flag), "0", "{{pr_number}}"],
        **fields,
    )


async def test_capacity_holds_the_rest_of_the_batch_without_loss_or_duplicate(
    make_engine, clock, github, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock, github_api_url=github.url, max_scheduled_concurrent=1)
    source = engine.registry.get("github_poll")
    for n in (1, 2, 3):
        github.add_pr(REPO, n, updated=h.T0 - 100 + n)
    flag = tmp_path / "go"
    created = await engine.service.create(_blocking(h, flag, "held"))
    sid = created.id
    await engine.tick_once()
    await source.wait_polls()
    await engine.tick_once()
    runs = await gh.fired(engine.conn, sid)
    assert gh.numbers(runs) == [1] and runs[0]["status"] == "running"
    row = await _row(engine.conn, sid)
    assert row["github_cursor"] == f"{gh.iso(h.T0 - 99)}#0000000001"
    assert row["github_etag"] is None  # stored only once the whole batch has fired
    deferred = await fetch_all(
        engine.conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? AND status = 'skipped'",
        (sid,),
    )
    assert [d["status_reason_code"] for d in deferred] == ["schedule.deferred.capacity"]
    # Held: re-offered on the next pass without polling GitHub again.
    await engine.tick_once()
    assert len(github.pull_requests()) == 1
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1]
    flag.write_text("go")

    async def all_fired() -> bool:
        await engine.wait_idle()
        return len(await gh.fired(engine.conn, sid)) == 3

    await _until(engine, all_fired)
    await engine.wait_idle()
    runs = await gh.fired(engine.conn, sid)
    assert gh.numbers(runs) == [1, 2, 3]
    assert {r["status"] for r in runs} == {"completed"}
    assert len(github.pull_requests()) == 1
    row = await _row(engine.conn, sid)
    assert row["github_cursor"] == f"{gh.iso(h.T0 - 97)}#0000000003"
    assert row["github_etag"] and row["next_fire_at"] == h.T0 + 60


async def test_restart_with_a_held_batch_fires_the_rest_once(
    make_engine, clock, github, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock, github_api_url=github.url, max_scheduled_concurrent=1)
    for n in (1, 2, 3):
        github.add_pr(REPO, n, updated=h.T0 - 100 + n)
    flag = tmp_path / "go"
    created = await engine.service.create(_blocking(h, flag, "restart"))
    sid = created.id
    await engine.tick_once()
    await engine.registry.get("github_poll").wait_polls()
    await engine.tick_once()
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1]
    await engine.stop()  # PR 1's run is cancelled; PRs 2 and 3 were never fired
    flag.write_text("go")
    second = await make_engine(clock=clock, github_api_url=github.url, max_scheduled_concurrent=1)
    github.clear_requests()

    async def all_fired() -> bool:
        await second.registry.get("github_poll").wait_polls()
        await second.wait_idle()
        return len(await gh.fired(second.conn, sid)) == 3

    await _until(second, all_fired)
    runs = await gh.fired(second.conn, sid)
    assert gh.numbers(runs) == [1, 2, 3]
    assert [r["status"] for r in runs] == ["cancelled", "completed", "completed"]
    (request,) = github.pull_requests()
    assert "if-none-match" not in request.headers  # no ETag was stored for the held batch


async def test_overlap_skip_makes_events_wait_their_turn(
    make_engine, clock, github, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock, github_api_url=github.url)
    github.add_pr(REPO, 1, updated=h.T0 - 20)
    github.add_pr(REPO, 2, updated=h.T0 - 10)
    flag = tmp_path / "go"
    created = await engine.service.create(_blocking(h, flag, "serial", overlap_policy="skip"))
    sid = created.id
    await engine.tick_once()
    await engine.registry.get("github_poll").wait_polls()
    await engine.tick_once()
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1]
    skipped = await fetch_all(
        engine.conn,
        "SELECT status_reason_code FROM schedule_runs WHERE schedule_id = ? AND status = 'skipped'",
        (sid,),
    )
    assert [s["status_reason_code"] for s in skipped] == ["schedule.deferred.overlap"]
    flag.write_text("go")

    async def both() -> bool:
        await engine.wait_idle()
        return len(await gh.fired(engine.conn, sid)) == 2

    await _until(engine, both)
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1, 2]


async def test_gates_apply_per_event_and_max_runs_keeps_the_refused_event(
    make_engine, clock, github, h
) -> None:
    engine = await make_engine(clock=clock, github_api_url=github.url)
    for n in (1, 2, 3):
        github.add_pr(REPO, n, updated=h.T0 - 100 + n)
    created = await engine.service.create(gh.github_schedule("capped", max_runs=2))
    sid = created.id
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1, 2]
    row = await _row(engine.conn, sid)
    assert row["enabled"] == 0 and row["disabled_reason"] == "schedule.disabled.max_runs"
    assert row["github_cursor"] == f"{gh.iso(h.T0 - 98)}#0000000002"
    clock.advance(30)
    await engine.service.update(sid, {"max_runs": 3})
    await engine.service.enable(sid)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1, 2, 3]


async def test_disable_stops_the_rest_of_a_held_batch(
    make_engine, clock, github, h, tmp_path
) -> None:
    engine = await make_engine(clock=clock, github_api_url=github.url, max_scheduled_concurrent=1)
    for n in (1, 2):
        github.add_pr(REPO, n, updated=h.T0 - 100 + n)
    flag = tmp_path / "go"
    created = await engine.service.create(_blocking(h, flag, "stop-me"))
    sid = created.id
    await engine.tick_once()
    await engine.registry.get("github_poll").wait_polls()
    await engine.tick_once()
    await engine.service.disable(sid)
    flag.write_text("go")
    await engine.wait_idle()
    for _ in range(3):
        await engine.tick_once()
        await engine.wait_idle()
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1]
    clock.advance(5)
    await engine.service.enable(sid)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, sid)) == [1, 2]


@pytest.mark.parametrize("event", ["pr_opened", "pr_updated"])
async def test_budget_is_checked_per_event(make_engine, clock, github, h, event) -> None:
    # With a budget the events of one pass fire one at a time (usage lands at run end) and
    # each passes the budget gate on its own.
    engine = await make_engine(clock=clock, github_api_url=github.url)
    for n in (1, 2):
        github.add_pr(REPO, n, updated=h.T0 - 100 + n)
    created = await engine.service.create(
        gh.github_schedule("budget", budget_usd=5.0, github_filter={"event": event})
    )
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1, 2]
    skipped = await fetch_all(
        engine.conn,
        "SELECT status_reason_code FROM schedule_runs WHERE schedule_id = ? AND status = 'skipped'",
        (created.id,),
    )
    assert {s["status_reason_code"] for s in skipped} <= {"schedule.deferred.budget_pending"}
